//! The options that keep the layers above a partition aligned: file
//! systems, LVM, LUKS and ZFS, derived from the disk's I/O sizes.

use serde::Serialize;

/// What the advice is computed from, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoSizes {
    /// The effective physical sector.
    pub physical: u64,
    /// RAID chunk (minimum I/O) when larger than the physical sector.
    pub minimum_io: Option<u64>,
    /// Full stripe (optimal I/O) when reported and sane.
    pub optimal_io: Option<u64>,
    /// The disk sits behind a USB bridge.
    pub usb: bool,
}

/// One command for one layer, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Advice {
    pub layer: &'static str,
    pub command: String,
    pub why: String,
}

const FS_BLOCK: u64 = 4096;

/// Advice for a partition node `dev` on disk `disk` (its kernel name) with `io`.
pub fn advise(dev: &str, disk: &str, io: &IoSizes) -> Vec<Advice> {
    let mut out = vec![ext4(dev, io), xfs(dev, io), lvm(dev, io), luks(dev, io), zfs(dev, io)];
    if io.usb {
        out.push(Advice {
            layer: "usb",
            command: format!("echo 2048 > /sys/block/{disk}/device/max_sectors"),
            why:
                "USB bridges often cap requests far below 1 MiB; 2048 sectors (1 MiB) keeps large \
                  writes whole (a positive multiple of 8, not much above 2048)"
                    .to_string(),
        });
    }
    out
}

/// (chunk, stripe width) in bytes when the disk reports a RAID geometry.
fn stripe(io: &IoSizes) -> Option<(u64, u64)> {
    let chunk = io.minimum_io.filter(|&m| m > io.physical && m % FS_BLOCK == 0)?;
    let width = io.optimal_io.filter(|&o| o >= chunk && o % chunk == 0)?;
    Some((chunk, width))
}

fn ext4(dev: &str, io: &IoSizes) -> Advice {
    let block = io.physical.clamp(FS_BLOCK, 65536);
    match stripe(io) {
        Some((chunk, width)) => Advice {
            layer: "ext4",
            command: format!("mkfs.ext4 -b {block} -E stride={},stripe-width={} {dev}", chunk / block, width / block),
            why: format!("{block}-byte blocks on {}-byte sectors; stride = chunk {chunk} / block, stripe-width = stripe {width} / block", io.physical),
        },
        None => Advice {
            layer: "ext4",
            command: format!("mkfs.ext4 -b {block} {dev}"),
            why: format!("blocks of at least the {}-byte physical sector, so no block straddles two", io.physical),
        },
    }
}

fn xfs(dev: &str, io: &IoSizes) -> Advice {
    let sector = io.physical.clamp(512, 32768);
    let geometry = stripe(io)
        .map_or(String::new(), |(chunk, width)| format!(" -d su={chunk},sw={}", width / chunk));
    Advice {
        layer: "xfs",
        command: format!("mkfs.xfs -s size={sector}{geometry} {dev}"),
        why: format!("metadata and log written in whole {sector}-byte physical sectors"),
    }
}

fn lvm(dev: &str, io: &IoSizes) -> Advice {
    let align = io.optimal_io.filter(|&o| o > 0 && (1 << 20) % o != 0).unwrap_or(1 << 20);
    Advice {
        layer: "lvm",
        command: format!("pvcreate --dataalignment {}k {dev}", align / 1024),
        why: "the first physical extent on the partition's grain, so every logical volume inherits it".to_string(),
    }
}

fn luks(dev: &str, io: &IoSizes) -> Advice {
    let sector = io.physical.clamp(512, 4096);
    Advice {
        layer: "luks",
        command: format!("cryptsetup luksFormat --sector-size {sector} {dev}"),
        why: format!(
            "encrypt in {sector}-byte units so the mapped device presents whole physical sectors"
        ),
    }
}

fn zfs(dev: &str, io: &IoSizes) -> Advice {
    let ashift = 63 - io.physical.max(4096).leading_zeros();
    Advice {
        layer: "zfs",
        command: format!("zpool create -o ashift={ashift} POOL {dev}"),
        why: format!(
            "ZFS never changes ashift after creation; 2^{ashift} = the {}-byte physical sector",
            1u64 << ashift
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(physical: u64, min: Option<u64>, opt: Option<u64>) -> IoSizes {
        IoSizes { physical, minimum_io: min, optimal_io: opt, usb: false }
    }

    fn command(advice: &[Advice], layer: &str) -> String {
        advice.iter().find(|a| a.layer == layer).map(|a| a.command.clone()).unwrap()
    }

    #[test]
    fn plain_512e_disk() {
        let a = advise("/dev/sda1", "sda", &io(4096, Some(4096), None));
        assert_eq!(command(&a, "ext4"), "mkfs.ext4 -b 4096 /dev/sda1");
        assert_eq!(command(&a, "xfs"), "mkfs.xfs -s size=4096 /dev/sda1");
        assert_eq!(command(&a, "lvm"), "pvcreate --dataalignment 1024k /dev/sda1");
        assert_eq!(command(&a, "luks"), "cryptsetup luksFormat --sector-size 4096 /dev/sda1");
        assert_eq!(command(&a, "zfs"), "zpool create -o ashift=12 POOL /dev/sda1");
        assert!(a.iter().all(|x| x.layer != "usb"));
    }

    #[test]
    fn raid_geometry() {
        let a = advise("/dev/md0p1", "md0", &io(4096, Some(65536), Some(4 * 65536)));
        assert_eq!(
            command(&a, "ext4"),
            "mkfs.ext4 -b 4096 -E stride=16,stripe-width=64 /dev/md0p1"
        );
        assert_eq!(command(&a, "xfs"), "mkfs.xfs -s size=4096 -d su=65536,sw=4 /dev/md0p1");
        let odd = advise("/dev/md1", "md1", &io(4096, Some(65536), Some(3 * 65536)));
        assert_eq!(command(&odd, "lvm"), "pvcreate --dataalignment 192k /dev/md1");
    }

    #[test]
    fn big_sectors_and_usb() {
        let a = advise("/dev/sdb1", "sdb", &IoSizes { usb: true, ..io(8192, None, None) });
        assert_eq!(command(&a, "zfs"), "zpool create -o ashift=13 POOL /dev/sdb1");
        assert_eq!(command(&a, "luks"), "cryptsetup luksFormat --sector-size 4096 /dev/sdb1");
        assert_eq!(command(&a, "usb"), "echo 2048 > /sys/block/sdb/device/max_sectors");
    }
}
