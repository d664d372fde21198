//! The options that keep the layers above a partition aligned: file
//! systems, LVM, LUKS and ZFS, derived from the disk's I/O sizes. Commands
//! that create a layer destroy what is there, so they are offered only for
//! a partition holding nothing recognised; one that holds something gets
//! what checks or tunes it in place.

use crate::align::Class;
use crate::stack::{self, Contents, Details, Kind, Layer, LayerVerdict};
use crate::table::ReadAt;
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
    /// None when there is nothing to run, only something to know.
    pub command: Option<String>,
    pub why: String,
    /// Running the command destroys whatever the partition holds.
    pub destroys_data: bool,
}

impl Advice {
    fn run(layer: &'static str, command: String, why: String) -> Advice {
        Advice { layer, command: Some(command), why, destroys_data: false }
    }

    /// Something to know, with nothing to run.
    fn note(layer: &'static str, why: impl Into<String>) -> Advice {
        Advice { layer, command: None, why: why.into(), destroys_data: false }
    }

    fn destroys(self) -> Advice {
        Advice { destroys_data: true, ..self }
    }
}

/// What a partition holds, as far as its headers tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holds {
    /// No recognised signature: empty, new, or something we do not know.
    Nothing,
    Contents(Contents),
    /// Its first sector could not be read.
    Unreadable(String),
}

/// What the partition of `sectors` logical sectors of `ss` bytes at
/// `start` holds, on a disk of `disk_bytes`. Only the part inside the disk
/// is looked at: one starting past the end holds nothing.
pub fn holds(dev: &dyn ReadAt, start: u64, sectors: u64, ss: u64, disk_bytes: u64) -> Holds {
    let Some(offset) = start.checked_mul(ss).filter(|&o| o < disk_bytes) else {
        return Holds::Nothing;
    };
    let room = disk_bytes - offset;
    let len = sectors.checked_mul(ss).map_or(room, |l| l.min(room));
    match stack::identify(dev, offset, len) {
        Ok(Some(c)) => Holds::Contents(c),
        Ok(None) => Holds::Nothing,
        Err(e) => Holds::Unreadable(e.to_string()),
    }
}

const FS_BLOCK: u64 = 4096;

/// Advice for a partition node `dev` on disk `disk` (its kernel name) with
/// `io`, given what the partition holds.
pub fn advise(dev: &str, disk: &str, io: &IoSizes, holds: &Holds) -> Vec<Advice> {
    let mut out = match holds {
        Holds::Nothing => [ext4(dev, io), xfs(dev, io), lvm(dev, io), luks(dev, io), zfs(dev, io)]
            .into_iter()
            .map(Advice::destroys)
            .collect(),
        Holds::Contents(c) => vec![in_place(dev, io, c)],
        Holds::Unreadable(e) => vec![Advice::note(
            "?",
            format!(
                "could not read it ({e}): check what it holds (`blkid -p {dev}`) before \
                 creating anything on it"
            ),
        )],
    };
    if io.usb {
        out.push(Advice::run(
            "usb",
            format!("echo 2048 > /sys/block/{disk}/device/max_sectors"),
            "USB bridges often cap requests far below 1 MiB; 2048 sectors (1 MiB) keeps large \
             writes whole (a positive multiple of 8, not much above 2048)"
                .to_string(),
        ));
    }
    out
}

const RECREATE: &str = "changing it means recreating it: copy the data off first";

/// What to do about a layer found inside partition `dev` whose verdict is
/// not aligned, from what its header says. None for an aligned layer.
pub fn for_layer(dev: &str, io: &IoSizes, layer: &Layer, verdict: &LayerVerdict) -> Option<Advice> {
    if verdict.verdict == Class::Aligned {
        return None;
    }
    let at = layer.absolute_offset_bytes;
    let off = if verdict.aligned_physical {
        String::new()
    } else {
        format!(" starts at byte {at}, {} bytes off a physical sector;", verdict.misalignment_bytes)
    };
    let finding = verdict.finding.as_deref().map(|f| format!(" {f};")).unwrap_or_default();
    let said = format!("{}{off}{finding}", layer.name);
    Some(match &layer.details {
        Details::LvmPv { vg, .. } => {
            let vg = vg.as_deref().unwrap_or("VG");
            Advice::run(
                "lvm",
                format!("pvmove {dev} NEWPV"),
                format!(
                    "{said} its data area (pe_start) is fixed when the PV is made: first make an \
                     aligned PV on a new device (`pvcreate --dataalignment {}b NEWPV`, which \
                     destroys what NEWPV holds; `vgextend {vg} NEWPV`), move the extents to it \
                     live, then `vgreduce {vg} {dev}`",
                    lvm_alignment(io)
                ),
            )
        }
        Details::LvmLv { vg, lv, .. } => Advice::note(
            "lvm",
            format!("{said} {vg}/{lv} sits on a misaligned data area: fix the PV (see its line)"),
        ),
        Details::Luks { .. } => Advice::note(
            "luks",
            format!(
                "{said} the payload offset is fixed in the header: reformat with `cryptsetup \
                 luksFormat --type luks2 --offset SECTORS` on an aligned number of 512-byte \
                 sectors (copy the data off first), or shift it with `cryptsetup reencrypt \
                 --reduce-device-size`"
            ),
        ),
        Details::Md { .. } => Advice::note(
            "md",
            format!("{said} recreate the array with `mdadm --create --data-offset=` a multiple of {} KiB; {RECREATE}", io.physical / 1024),
        ),
        Details::Zfs { .. } => Advice::note(
            "zfs",
            format!(
                "{said} ashift cannot change on an existing vdev: `zpool replace`/`attach` onto a \
                 vdev added with -o ashift=12, or recreate the pool"
            ),
        ),
        Details::Ext { .. } if verdict.aligned_physical => ext4_in_place(dev, io),
        _ => Advice::note(layer.name, format!("{said} fix the layer below it, or {RECREATE}")),
    })
}

/// For a partition that already holds `c`: what tunes it in place, or
/// checks it, and what changing the rest would take.
fn in_place(dev: &str, io: &IoSizes, c: &Contents) -> Advice {
    match c.kind {
        Kind::Ext => ext4_in_place(dev, io),
        Kind::Xfs => xfs_in_place(dev, io),
        Kind::LvmPv => Advice::run(
            "lvm",
            format!("pvs -o pv_name,pe_start --units b {dev}"),
            format!(
                "the first extent (pe_start) should be a multiple of {} bytes; moving it means \
                 pvmove, pvremove and pvcreate --dataalignment",
                lvm_alignment(io)
            ),
        ),
        Kind::Luks => {
            let sector = luks_sector(io);
            Advice::run(
                "luks",
                format!("cryptsetup luksDump {dev}"),
                format!(
                    "LUKS2 should show sector: {sector}; `cryptsetup reencrypt --sector-size \
                     {sector} {dev}` changes it in place (back up first); LUKS1 is always 512"
                ),
            )
        }
        Kind::Md => Advice::run(
            "md",
            format!("mdadm --examine {dev}"),
            format!("the Data Offset should be a multiple of {} bytes; {RECREATE}", io.physical),
        ),
        Kind::Swap => Advice::note("swap", "swap has no alignment settings: nothing to change"),
        _ => Advice::note(c.name, format!("{} fixes its layout when made; {RECREATE}", c.name)),
    }
}

/// An existing ext2/3/4: RAID hints can change in place, the block size
/// cannot.
fn ext4_in_place(dev: &str, io: &IoSizes) -> Advice {
    let block = ext_block(io);
    match stripe(io) {
        Some((chunk, width)) => Advice::run(
            "ext4",
            format!("tune2fs -E stride={},stripe_width={} {dev}", chunk / block, width / block),
            format!(
                "sets the allocator's RAID hints in place (for {block}-byte blocks; see \
                 `tune2fs -l {dev}`); the data stays"
            ),
        ),
        None => Advice::run(
            "ext4",
            format!("tune2fs -l {dev}"),
            format!(
                "no RAID geometry, so nothing to tune; \"Block size\" should be at least \
                 {block}: a smaller one means recreating the file system (copy the data off first)"
            ),
        ),
    }
}

/// An existing XFS takes new stripe hints at mount time; its sector size
/// is fixed.
fn xfs_in_place(dev: &str, io: &IoSizes) -> Advice {
    match stripe(io) {
        Some((chunk, width)) => Advice::run(
            "xfs",
            format!("mount -o sunit={},swidth={} {dev} MOUNTPOINT", chunk / 512, width / 512),
            "XFS takes new stripe hints at mount time (in 512-byte units); the data stays".into(),
        ),
        None => Advice::run(
            "xfs",
            format!("xfs_info {dev}"),
            format!("check sectsz={}: fixed when XFS is made; {RECREATE}", xfs_sector(io)),
        ),
    }
}

/// (chunk, stripe width) in bytes when the disk reports a RAID geometry.
fn stripe(io: &IoSizes) -> Option<(u64, u64)> {
    let chunk = io.minimum_io.filter(|&m| m > io.physical && m % FS_BLOCK == 0)?;
    let width = io.optimal_io.filter(|&o| o >= chunk && o % chunk == 0)?;
    Some((chunk, width))
}

/// The ext4 block: at least the physical sector, at most what ext4 takes.
fn ext_block(io: &IoSizes) -> u64 {
    io.physical.clamp(FS_BLOCK, 65536)
}

fn ext4(dev: &str, io: &IoSizes) -> Advice {
    let block = ext_block(io);
    match stripe(io) {
        Some((chunk, width)) => Advice::run(
            "ext4",
            format!("mkfs.ext4 -b {block} -E stride={},stripe-width={} {dev}", chunk / block, width / block),
            format!("{block}-byte blocks on {}-byte sectors; stride = chunk {chunk} / block, stripe-width = stripe {width} / block", io.physical),
        ),
        None => Advice::run(
            "ext4",
            format!("mkfs.ext4 -b {block} {dev}"),
            format!("blocks of at least the {}-byte physical sector, so no block straddles two", io.physical),
        ),
    }
}

/// The XFS sector: the physical sector, within what XFS takes.
fn xfs_sector(io: &IoSizes) -> u64 {
    io.physical.clamp(512, 32768)
}

fn xfs(dev: &str, io: &IoSizes) -> Advice {
    let sector = xfs_sector(io);
    let geometry = stripe(io)
        .map_or(String::new(), |(chunk, width)| format!(" -d su={chunk},sw={}", width / chunk));
    Advice::run(
        "xfs",
        format!("mkfs.xfs -s size={sector}{geometry} {dev}"),
        format!("metadata and log written in whole {sector}-byte physical sectors"),
    )
}

/// Bytes the first physical extent should align to.
fn lvm_alignment(io: &IoSizes) -> u64 {
    io.optimal_io.filter(|&o| o > 0 && (1 << 20) % o != 0).unwrap_or(1 << 20)
}

fn lvm(dev: &str, io: &IoSizes) -> Advice {
    Advice::run(
        "lvm",
        format!("pvcreate --dataalignment {}k {dev}", lvm_alignment(io) / 1024),
        "the first physical extent on the partition's grain, so every logical volume inherits it"
            .to_string(),
    )
}

/// The LUKS2 encryption sector: the physical sector, within what LUKS takes.
fn luks_sector(io: &IoSizes) -> u64 {
    io.physical.clamp(512, 4096)
}

fn luks(dev: &str, io: &IoSizes) -> Advice {
    let sector = luks_sector(io);
    Advice::run(
        "luks",
        format!("cryptsetup luksFormat --sector-size {sector} {dev}"),
        format!(
            "encrypt in {sector}-byte units so the mapped device presents whole physical sectors"
        ),
    )
}

fn zfs(dev: &str, io: &IoSizes) -> Advice {
    let ashift = 63 - io.physical.max(4096).leading_zeros();
    Advice::run(
        "zfs",
        format!("zpool create -o ashift={ashift} POOL {dev}"),
        format!(
            "ZFS never changes ashift after creation; 2^{ashift} = the {}-byte physical sector",
            1u64 << ashift
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(physical: u64, min: Option<u64>, opt: Option<u64>) -> IoSizes {
        IoSizes { physical, minimum_io: min, optimal_io: opt, usb: false }
    }

    fn command(advice: &[Advice], layer: &str) -> String {
        advice.iter().find(|a| a.layer == layer).and_then(|a| a.command.clone()).unwrap()
    }

    #[test]
    fn plain_512e_disk() {
        let a = advise("/dev/sda1", "sda", &io(4096, Some(4096), None), &Holds::Nothing);
        assert_eq!(command(&a, "ext4"), "mkfs.ext4 -b 4096 /dev/sda1");
        assert_eq!(command(&a, "xfs"), "mkfs.xfs -s size=4096 /dev/sda1");
        assert_eq!(command(&a, "lvm"), "pvcreate --dataalignment 1024k /dev/sda1");
        assert_eq!(command(&a, "luks"), "cryptsetup luksFormat --sector-size 4096 /dev/sda1");
        assert_eq!(command(&a, "zfs"), "zpool create -o ashift=12 POOL /dev/sda1");
        assert!(a.iter().all(|x| x.layer != "usb"));
        assert!(a.iter().all(|x| x.destroys_data), "creating a layer destroys what is there");
    }

    #[test]
    fn raid_geometry() {
        let a =
            advise("/dev/md0p1", "md0", &io(4096, Some(65536), Some(4 * 65536)), &Holds::Nothing);
        assert_eq!(
            command(&a, "ext4"),
            "mkfs.ext4 -b 4096 -E stride=16,stripe-width=64 /dev/md0p1"
        );
        assert_eq!(command(&a, "xfs"), "mkfs.xfs -s size=4096 -d su=65536,sw=4 /dev/md0p1");
        let odd =
            advise("/dev/md1", "md1", &io(4096, Some(65536), Some(3 * 65536)), &Holds::Nothing);
        assert_eq!(command(&odd, "lvm"), "pvcreate --dataalignment 192k /dev/md1");
    }

    #[test]
    fn big_sectors_and_usb() {
        let a = advise(
            "/dev/sdb1",
            "sdb",
            &IoSizes { usb: true, ..io(8192, None, None) },
            &Holds::Nothing,
        );
        assert_eq!(command(&a, "zfs"), "zpool create -o ashift=13 POOL /dev/sdb1");
        assert_eq!(command(&a, "luks"), "cryptsetup luksFormat --sector-size 4096 /dev/sdb1");
        assert_eq!(command(&a, "usb"), "echo 2048 > /sys/block/sdb/device/max_sectors");
    }

    fn holding(kind: Kind, name: &'static str) -> Holds {
        Holds::Contents(Contents { kind, name, label: None, size_bytes: None })
    }

    #[test]
    fn existing_contents_get_nothing_destructive() {
        let raid = io(4096, Some(65536), Some(4 * 65536));
        let ext = advise("/dev/md0p1", "md0", &raid, &holding(Kind::Ext, "ext4"));
        assert_eq!(command(&ext, "ext4"), "tune2fs -E stride=16,stripe_width=64 /dev/md0p1");
        let plain = advise("/dev/sda1", "sda", &io(4096, None, None), &holding(Kind::Ext, "ext4"));
        assert_eq!(command(&plain, "ext4"), "tune2fs -l /dev/sda1");
        let xfs = advise("/dev/md0p1", "md0", &raid, &holding(Kind::Xfs, "xfs"));
        assert_eq!(command(&xfs, "xfs"), "mount -o sunit=128,swidth=512 /dev/md0p1 MOUNTPOINT");
        for (kind, name) in [
            (Kind::LvmPv, "LVM2_member"),
            (Kind::Luks, "crypto_LUKS"),
            (Kind::Swap, "swap"),
            (Kind::Ntfs, "ntfs"),
            (Kind::Md, "linux_raid_member"),
        ] {
            let a = advise("/dev/sda1", "sda", &raid, &holding(kind, name));
            assert!(a.iter().all(|x| !x.destroys_data), "{name}: {a:?}");
            let text: String = a.iter().filter_map(|x| x.command.clone()).collect();
            assert!(!text.contains("mkfs") && !text.contains("Format") && !text.contains("create"));
        }
        let unread = advise("/dev/sda1", "sda", &raid, &Holds::Unreadable("EIO".into()));
        assert!(unread.iter().all(|x| !x.destroys_data && x.command.is_none()));
    }

    #[test]
    fn holds_reads_only_inside_the_disk() {
        let mut disk = vec![0u8; 1 << 20];
        // An XFS superblock (magic, 4096-byte blocks) at LBA 8.
        disk[8 * 512..8 * 512 + 4].copy_from_slice(b"XFSB");
        disk[8 * 512 + 4..8 * 512 + 8].copy_from_slice(&4096u32.to_be_bytes());
        let found = holds(&disk, 8, 1000, 512, 1 << 20);
        assert!(matches!(found, Holds::Contents(ref c) if c.kind == Kind::Xfs), "{found:?}");
        assert_eq!(holds(&disk, 9, 1000, 512, 1 << 20), Holds::Nothing);
        assert_eq!(holds(&disk, 4096, 8, 512, 1 << 20), Holds::Nothing, "past the end");
        assert_eq!(holds(&disk, u64::MAX, 8, 512, 1 << 20), Holds::Nothing);
    }
}
