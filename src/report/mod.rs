//! Printing audits: a human table, the JSON contract, and Prometheus'
//! textfile format; the tables every command prints, and `bench`'s report.

pub mod bench;
mod human;
mod json;
mod prometheus;
pub mod table;

pub use human::{columns as audit_columns, render as human, Row as AuditRow};
pub use json::render as json;
pub use prometheus::render as prometheus;

/// What a NAME column holds: [`partition_name`].
pub const PARTITION_NAME_ABOUT: &str =
    "partition device name (sda1; whole-part1 on /dev/mapper/whole; for an image, its file \
     name and number)";

/// A partition's node name as the kernel and fdisk give it: sda1,
/// nvme0n1p1, disk.img1; whole-part1 on /dev/mapper/whole (kpartx's, as
/// sfdisk names it). `disk` is the kernel's name of the disk, else the file
/// name of `path` is used.
pub fn partition_name(disk: Option<&str>, path: &std::path::Path, number: u32) -> String {
    let file = || path.file_name().map(|f| f.to_string_lossy().into_owned());
    let mapper = crate::device::mapper_partition(path, number);
    if let Some(name) = mapper.as_deref().and_then(|m| m.file_name()) {
        return name.to_string_lossy().into_owned();
    }
    let base = disk.map(str::to_string).or_else(file).unwrap_or_default();
    crate::device::partition_name(&base, number)
}

#[cfg(test)]
mod tests {
    use super::partition_name;
    use crate::units::human_size;
    use std::path::Path;

    #[test]
    fn partition_names() {
        assert_eq!(partition_name(Some("sda"), Path::new("/dev/sda"), 1), "sda1");
        assert_eq!(partition_name(Some("nvme0n1"), Path::new("/dev/nvme0n1"), 2), "nvme0n1p2");
        assert_eq!(partition_name(None, Path::new("/tmp/disk.img"), 5), "disk.img5");
        // No kpartx node exists here: the name udev's kpartx rules give.
        let mapper = Path::new("/nonexistent/mapper/whole");
        assert_eq!(partition_name(Some("dm-1"), mapper, 1), "whole-part1");
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1536 << 20), "1.5 GiB");
        assert_eq!(human_size(2_000_398_934_016), "1.8 TiB");
        assert_eq!(human_size(u64::MAX), "16 EiB");
    }
}
