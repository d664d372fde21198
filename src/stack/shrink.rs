//! How the user can make a partition's contents smaller: blkalign never
//! shrinks anything itself, it only says how.

use super::signature::{Contents, Kind};

/// How to make `contents` at least `missing_bytes` smaller so a move fits,
/// as commands for the user. `device` is the partition's device path as
/// the user would type it; `current_bytes` the size the contents take now.
pub fn shrink_advice(
    contents: Option<&Contents>,
    device: &str,
    current_bytes: u64,
    missing_bytes: u64,
) -> String {
    let Some(target) = current_bytes.checked_sub(missing_bytes).filter(|&t| t > 0) else {
        return format!(
            "{device}: the move needs {missing_bytes} bytes but it holds only {current_bytes}: \
             it cannot shrink that far"
        );
    };
    let Some(contents) = contents else {
        return format!(
            "{device}: shrink whatever is inside by {missing_bytes} bytes \
             (to at most {target} bytes), then move it"
        );
    };
    if contents.size_bytes.is_some_and(|claimed| claimed <= target) {
        return format!(
            "{device}: its {} already fits in {target} bytes: only the partition needs to shrink",
            contents.name
        );
    }
    let dev = device;
    // Whole 4 KiB blocks, so every tool's rounding lands at or below target.
    let kib = target / 4096 * 4;
    match contents.kind {
        Kind::Ext => format!("e2fsck -f {dev} && resize2fs {dev} {kib}K"),
        // ntfsresize's k is 1000 bytes.
        Kind::Ntfs => format!(
            "ntfsresize --no-action --size {k}k {dev} && ntfsresize --size {k}k {dev}",
            k = target / 4096 * 4096 / 1000
        ),
        Kind::Xfs => format!(
            "{dev}: XFS cannot shrink: back it up (xfsdump), recreate it at most {target} bytes \
             (mkfs.xfs), restore (xfsrestore)"
        ),
        Kind::Btrfs => format!(
            "btrfs filesystem resize -{}k MOUNTPOINT (with {dev} mounted at MOUNTPOINT; \
             prefix the size with DEVID: if it spans several devices)",
            missing_bytes.div_ceil(4096) * 4
        ),
        Kind::LvmPv => format!(
            "pvresize --setphysicalvolumesize {}b {dev} (if it refuses, move extents off its end \
             with pvmove first)",
            target / 4096 * 4096
        ),
        Kind::Fat => format!(
            "fatresize -s {kib}ki {dev} (FAT16/FAT32; otherwise back up, recreate it at most \
             {target} bytes with mkfs.vfat, restore)"
        ),
        Kind::Exfat => format!(
            "{dev}: no tool shrinks exFAT: back it up, recreate it at most {target} bytes \
             (mkfs.exfat), restore"
        ),
        Kind::Swap => format!(
            "swapoff {dev} && mkswap -U UUID {dev} {kib} (size in KiB; UUID from `blkid {dev}` \
             keeps /etc/fstab valid), then swapon"
        ),
        Kind::Luks => format!(
            "open {dev} with cryptsetup and shrink the contents of the mapping by {missing_bytes} \
             bytes; LUKS itself follows the partition's size"
        ),
        Kind::Md => format!(
            "shrink what the array holds, then `mdadm --grow /dev/mdN --size=KIB`, KIB being at \
             most {kib} less the data offset `mdadm --examine {dev}` shows"
        ),
        Kind::Zfs => format!(
            "{dev}: a ZFS vdev cannot shrink: move the pool's data to a new vdev at most {target} \
             bytes (zpool attach, then detach this one, or send and receive)"
        ),
        Kind::LvmLv => {
            format!("lvreduce --resizefs -L -{}k {dev}", missing_bytes.div_ceil(4096) * 4)
        }
        Kind::Iso9660 => {
            format!("{dev}: ISO 9660 is read-only: recreate the image at most {target} bytes")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(kind: Kind, name: &'static str, size: Option<u64>) -> Contents {
        Contents { kind, name, label: None, size_bytes: size }
    }

    #[test]
    fn commands_per_kind() {
        let gib = 1u64 << 30;
        let ext = contents(Kind::Ext, "ext4", Some(gib));
        assert_eq!(
            shrink_advice(Some(&ext), "/dev/sdb1", gib, 5000),
            "e2fsck -f /dev/sdb1 && resize2fs /dev/sdb1 1048568K"
        );
        let ntfs = contents(Kind::Ntfs, "ntfs", Some(gib));
        assert_eq!(
            shrink_advice(Some(&ntfs), "/dev/sdb1", gib, 4096),
            "ntfsresize --no-action --size 1073737k /dev/sdb1 && ntfsresize --size 1073737k /dev/sdb1"
        );
        let pv = contents(Kind::LvmPv, "LVM2_member", Some(gib));
        assert!(shrink_advice(Some(&pv), "/dev/sdb2", gib, 1)
            .starts_with("pvresize --setphysicalvolumesize 1073737728b /dev/sdb2"));
        let btrfs = contents(Kind::Btrfs, "btrfs", Some(gib));
        assert!(shrink_advice(Some(&btrfs), "/dev/sdb3", gib, 1)
            .starts_with("btrfs filesystem resize -4k MOUNTPOINT"));
        let xfs = contents(Kind::Xfs, "xfs", Some(gib));
        assert!(shrink_advice(Some(&xfs), "/dev/sdb4", gib, 1).contains("cannot shrink"));
    }

    #[test]
    fn unknown_already_fitting_and_impossible() {
        assert_eq!(
            shrink_advice(None, "/dev/sdc1", 10_000, 512),
            "/dev/sdc1: shrink whatever is inside by 512 bytes (to at most 9488 bytes), then move it"
        );
        let small = contents(Kind::Ext, "ext4", Some(4096));
        assert!(shrink_advice(Some(&small), "/dev/sdc1", 10_000, 512).contains("already fits"));
        assert!(shrink_advice(None, "/dev/sdc1", 512, 512).contains("cannot shrink that far"));
    }
}
