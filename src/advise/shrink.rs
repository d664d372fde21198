//! How the user can make a partition's contents smaller: blkalign never
//! shrinks anything itself, it only says how.

use super::Node;
use crate::stack::{Contents, Kind};

/// How to make `contents` at least `missing_bytes` smaller so a move fits,
/// for the partition `node`: commands runnable as typed (an image's
/// attached with `losetup` first), anything else in words. `current_bytes`
/// is the size the contents take now.
pub fn shrink_node(
    contents: Option<&Contents>,
    node: &Node,
    current_bytes: u64,
    missing_bytes: u64,
) -> String {
    match shrink(contents, node, current_bytes, missing_bytes) {
        Shrink::Run(cmd, None) => node.command(&cmd),
        Shrink::Run(cmd, Some(note)) => format!("{} ({note})", node.command(&cmd)),
        Shrink::Say(text) => format!("{node}: {text}"),
    }
}

enum Shrink {
    /// A command naming the node as [`Node::shell`] does, and what to know.
    Run(String, Option<String>),
    /// Only words: no command does it.
    Say(String),
}

fn shrink(
    contents: Option<&Contents>,
    node: &Node,
    current_bytes: u64,
    missing_bytes: u64,
) -> Shrink {
    let Some(target) = current_bytes.checked_sub(missing_bytes).filter(|&t| t > 0) else {
        return Shrink::Say(format!(
            "the move needs {missing_bytes} bytes but it holds only {current_bytes}: it cannot \
             shrink that far"
        ));
    };
    let Some(contents) = contents else {
        return Shrink::Say(format!(
            "shrink whatever is inside by {missing_bytes} bytes (to at most {target} bytes), \
             then move it"
        ));
    };
    if contents.size_bytes.is_some_and(|claimed| claimed <= target) {
        return Shrink::Say(format!(
            "its {} already fits in {target} bytes: only the partition needs to shrink",
            contents.name
        ));
    }
    let dev = node.shell();
    // Whole 4 KiB blocks, so every tool's rounding lands at or below target.
    let kib = target / 4096 * 4;
    let run = |cmd: String| Shrink::Run(cmd, None);
    match contents.kind {
        // -p: no terminal needed, and it stops at anything unsafe to fix.
        Kind::Ext => run(format!("e2fsck -fp {dev} && resize2fs {dev} {kib}K")),
        // ntfsresize's k is 1000 bytes.
        Kind::Ntfs => run(format!(
            "ntfsresize --no-action --size {k}k {dev} && ntfsresize --size {k}k {dev}",
            k = target / 4096 * 4096 / 1000
        )),
        Kind::Xfs => Shrink::Say(format!(
            "XFS cannot shrink: back it up (xfsdump), recreate it at most {target} bytes \
             (mkfs.xfs), restore (xfsrestore)"
        )),
        Kind::Btrfs => Shrink::Say(format!(
            "mount it at MOUNTPOINT, then `btrfs filesystem resize -{}k MOUNTPOINT` (prefix the \
             size with DEVID: if it spans several devices)",
            missing_bytes.div_ceil(4096) * 4
        )),
        Kind::LvmPv => Shrink::Run(
            format!("pvresize --setphysicalvolumesize {}b {dev}", target / 4096 * 4096),
            Some("if it refuses, move extents off its end with pvmove first".into()),
        ),
        Kind::Fat => Shrink::Run(
            format!("fatresize -s {kib}ki {dev}"),
            Some(format!(
                "FAT16/FAT32; otherwise back up, recreate it at most {target} bytes with \
                 mkfs.vfat, restore"
            )),
        ),
        Kind::Exfat => Shrink::Say(format!(
            "no tool shrinks exFAT: back it up, recreate it at most {target} bytes (mkfs.exfat), \
             restore"
        )),
        // The same UUID keeps /etc/fstab valid.
        Kind::Swap => Shrink::Run(
            format!("mkswap -U $(blkid -o value -s UUID {dev}) {dev} {kib}"),
            Some("swapoff it first; size in KiB; its UUID kept for /etc/fstab".into()),
        ),
        Kind::Luks => Shrink::Say(format!(
            "open it with cryptsetup and shrink the contents of the mapping by {missing_bytes} \
             bytes; LUKS itself follows the partition's size"
        )),
        Kind::Md => Shrink::Say(format!(
            "shrink what the array holds, then `mdadm --grow /dev/mdN --size=KIB`, KIB being at \
             most {kib} less the data offset `mdadm --examine` shows for it"
        )),
        Kind::Bcache if contents.size_bytes.is_some() => Shrink::Say(format!(
            "a bcache cache device's bucket count is fixed: detach it from its cache set (`echo 1 \
             > /sys/block/bcacheN/bcache/detach` flushes dirty data), then remake it at most \
             {target} bytes with make-bcache -C"
        )),
        Kind::Bcache => Shrink::Say(format!(
            "shrink what /dev/bcacheN holds by {missing_bytes} bytes; a backing device's data \
             runs to the partition's end, so bcache follows the new size"
        )),
        Kind::Zfs => Shrink::Say(format!(
            "a ZFS vdev cannot shrink: move the pool's data to a new vdev at most {target} bytes \
             (zpool attach, then detach this one, or send and receive)"
        )),
        Kind::LvmLv => {
            run(format!("lvreduce --resizefs -L -{}k {dev}", missing_bytes.div_ceil(4096) * 4))
        }
        Kind::Iso9660 => {
            Shrink::Say(format!("ISO 9660 is read-only: recreate the image at most {target} bytes"))
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
            shrink_node(Some(&ext), &Node::Device("/dev/sdb1".into()), gib, 5000),
            "e2fsck -fp /dev/sdb1 && resize2fs /dev/sdb1 1048568K"
        );
        let ntfs = contents(Kind::Ntfs, "ntfs", Some(gib));
        assert_eq!(
            shrink_node(Some(&ntfs), &Node::Device("/dev/sdb1".into()), gib, 4096),
            "ntfsresize --no-action --size 1073737k /dev/sdb1 && ntfsresize --size 1073737k /dev/sdb1"
        );
        let pv = contents(Kind::LvmPv, "LVM2_member", Some(gib));
        assert!(shrink_node(Some(&pv), &Node::Device("/dev/sdb2".into()), gib, 1)
            .starts_with("pvresize --setphysicalvolumesize 1073737728b /dev/sdb2"));
        let btrfs = contents(Kind::Btrfs, "btrfs", Some(gib));
        assert!(shrink_node(Some(&btrfs), &Node::Device("/dev/sdb3".into()), gib, 1)
            .contains("`btrfs filesystem resize -4k MOUNTPOINT`"));
        let xfs = contents(Kind::Xfs, "xfs", Some(gib));
        assert!(shrink_node(Some(&xfs), &Node::Device("/dev/sdb4".into()), gib, 1)
            .contains("cannot shrink"));
    }

    #[test]
    fn unknown_already_fitting_and_impossible() {
        assert_eq!(
            shrink_node(None, &Node::Device("/dev/sdc1".into()), 10_000, 512),
            "/dev/sdc1: shrink whatever is inside by 512 bytes (to at most 9488 bytes), then move it"
        );
        let small = contents(Kind::Ext, "ext4", Some(4096));
        assert!(shrink_node(Some(&small), &Node::Device("/dev/sdc1".into()), 10_000, 512)
            .contains("already fits"));
        assert!(shrink_node(None, &Node::Device("/dev/sdc1".into()), 512, 512)
            .contains("cannot shrink that far"));
    }

    /// Found by a user: an image's advice read "e2fsck -f 4kn.img partition
    /// 1 (attach it with `losetup -P`) && resize2fs ...".
    #[test]
    fn an_image_is_attached_by_the_command_itself() {
        let gib = 1u64 << 30;
        let image = Node::Image { image: "/tmp/my disk.img".into(), number: 1 };
        let ext = contents(Kind::Ext, "ext4", Some(gib));
        assert_eq!(
            shrink_node(Some(&ext), &image, gib, 5000),
            "dev=$(losetup -fP --show '/tmp/my disk.img') && { partx -u $dev && e2fsck -fp \
             ${dev}p1 && resize2fs ${dev}p1 1048568K; ok=$?; losetup -d $dev; test $ok = 0; }"
        );
        let pv = contents(Kind::LvmPv, "LVM2_member", Some(gib));
        let text =
            shrink_node(Some(&pv), &Node::Image { image: "4kn.img".into(), number: 2 }, gib, 1);
        let want = "dev=$(losetup -fP --show 4kn.img) && { partx -u $dev && pvresize \
                    --setphysicalvolumesize 1073737728b ${dev}p2; ok=$?; losetup -d $dev; test \
                    $ok = 0; } (if it refuses";
        assert!(text.starts_with(want), "{text}");
        let xfs = contents(Kind::Xfs, "xfs", Some(gib));
        let text = shrink_node(Some(&xfs), &image, gib, 1);
        assert!(text.starts_with("partition 1 of /tmp/my disk.img: XFS cannot shrink"), "{text}");
    }
}
