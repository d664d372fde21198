//! Opening targets (block devices, partitions, images) and reading their
//! topology: sector sizes, alignment offset, I/O hints, and where each value
//! came from.

use serde::Serialize;

/// Where a topology value came from. Drives and USB bridges lie, so every
/// value says who vouched for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// /sys/block/*/queue and friends.
    Kernel,
    /// Block-device ioctls (BLKSSZGET, BLKPBSZGET, ...).
    Ioctl,
    /// Our table of drive models known to misreport.
    Quirk,
    /// A command-line override.
    Override,
    /// Inferred from the partition table found on an image.
    Table,
    /// Nothing better was available.
    Assumed,
    /// Measured by `blkalign probe`.
    Probe,
    /// The drive's own answer (ATA IDENTIFY, SCSI RC16, NVMe Identify).
    Drive,
}

impl Source {
    /// The name used in JSON and human output.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Kernel => "kernel",
            Source::Ioctl => "ioctl",
            Source::Quirk => "quirk",
            Source::Override => "override",
            Source::Table => "table",
            Source::Assumed => "assumed",
            Source::Probe => "probe",
            Source::Drive => "drive",
        }
    }
}

/// A value and the source that vouched for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    pub fn new(value: T, source: Source) -> Self {
        Self { value, source }
    }
}

/// Values given on the command line; they beat anything read or assumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub logical_sector_size: Option<u64>,
    pub physical_sector_size: Option<u64>,
    pub alignment_offset: Option<u64>,
}

/// The geometry of a target as reported, each value with its source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub logical_sector_size: Sourced<u64>,
    /// As reported (or quirk-corrected, overridden, probed); the audit may
    /// still assume 4096 on top of this, and says so.
    pub physical_sector_size: Sourced<u64>,
    /// Bytes from LBA 0 to the first physical-sector boundary.
    pub alignment_offset: Sourced<u64>,
    /// None when unreported (0) or neutralised as bogus.
    pub minimum_io_size: Option<Sourced<u64>>,
    /// None when unreported (0) or neutralised as bogus.
    pub optimal_io_size: Option<Sourced<u64>>,
    pub size_bytes: u64,
    pub rotational: Option<bool>,
    pub vendor: Option<String>,
    pub model: Option<String>,
    pub serial: Option<String>,
    /// What the drive itself answered; None for an image or a device with
    /// no drive under it.
    pub drive: Option<drive::Drive>,
    /// Disagreements between sources and values we neutralised, in words.
    pub notes: Vec<String>,
}

impl Topology {
    /// A disk of 1 GiB as its kernel reports it, nothing else known.
    #[cfg(test)]
    pub(crate) fn reported(logical: u64, physical: u64, offset: u64) -> Topology {
        Topology {
            logical_sector_size: Sourced::new(logical, Source::Kernel),
            physical_sector_size: Sourced::new(physical, Source::Kernel),
            alignment_offset: Sourced::new(offset, Source::Kernel),
            minimum_io_size: None,
            optimal_io_size: None,
            size_bytes: 1 << 30,
            rotational: None,
            vendor: None,
            model: None,
            serial: None,
            drive: None,
            notes: Vec::new(),
        }
    }

    /// What verdicts are judged against. `trust_kernel` believes a reported
    /// physical sector under 4096; one nobody reported (an image's, a disk
    /// without sysfs) is not believed: trusting it would judge at 512.
    pub fn geometry(&self, trust_kernel: bool) -> crate::align::Geometry {
        crate::align::Geometry::new(
            self.logical_sector_size.value,
            self.physical_sector_size.value,
            self.alignment_offset.value,
            self.optimal_io_size.map(|s| s.value),
            trust_kernel && self.physical_sector_size.source != Source::Assumed,
        )
    }
}

/// Whether a target is a kernel block device or a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Disk,
    Image,
}

/// What the user asked to audit, resolved to a whole disk or an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The whole-disk node (/dev/sda) or the image file.
    pub path: std::path::PathBuf,
    /// Kernel name (sda, nvme0n1) for block devices.
    pub name: Option<String>,
    pub kind: TargetKind,
    /// When the user named a partition: its number, to highlight.
    pub selected_partition: Option<u32>,
}

impl Target {
    /// The device node of partition `number` as the kernel names it
    /// (/dev/sda1, /dev/nvme0n1p1), or for a device-mapper device as
    /// kpartx and sfdisk do (see [`mapper_partition`]); None for an image,
    /// which has none until attached. The kernel's name, not the path
    /// typed: by-id links have "-partN" siblings, not a digit appended.
    pub(crate) fn partition_node(&self, number: u32) -> Option<std::path::PathBuf> {
        let name = self.name.as_deref().filter(|_| self.kind == TargetKind::Disk)?;
        if let Some(node) = mapper_partition(&self.path, number) {
            return Some(node);
        }
        Some(std::path::Path::new("/dev").join(partition_name(name, number)))
    }

    /// Whether it is a device-mapper device, named /dev/mapper/NAME: the
    /// kernel makes no partitions on one (kpartx maps them).
    pub(crate) fn is_mapper(&self) -> bool {
        self.kind == TargetKind::Disk && mapper_partition(&self.path, 1).is_some()
    }
}

/// Partition `number` of the device-mapper device at `mapper`
/// (/dev/mapper/NAME) as sfdisk names it (fdisk_partname): NAMEn or NAMEpn
/// where kpartx made that node, else NAME-partn (kpartx's udev rules).
/// None when `mapper` is not in a directory called mapper.
pub(crate) fn mapper_partition(
    mapper: &std::path::Path,
    number: u32,
) -> Option<std::path::PathBuf> {
    let dir = mapper.parent().filter(|d| d.file_name().is_some_and(|n| n == "mapper"))?;
    let name = mapper.file_name()?.to_str()?;
    let candidates = [format!("{name}{number}"), format!("{name}p{number}")];
    let made = candidates.iter().map(|c| dir.join(c)).find(|node| node.exists());
    Some(made.unwrap_or_else(|| dir.join(format!("{name}-part{number}"))))
}

/// What kind of block device a disk target is, as JSON says it: a
/// device-mapper or md device is not a drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Disk,
    Dm,
    Md,
    Image,
}

/// The kind of `target`, from its sysfs directory (`dm/`, `md/`).
pub(crate) fn device_kind(root: &SysRoot, target: &Target) -> DeviceKind {
    let dir = target.name.as_deref().map(|name| root.block(name));
    match (target.kind, dir) {
        (TargetKind::Image, _) => DeviceKind::Image,
        (_, Some(dir)) if dir.join("dm").is_dir() => DeviceKind::Dm,
        (_, Some(dir)) if dir.join("md").is_dir() => DeviceKind::Md,
        _ => DeviceKind::Disk,
    }
}

/// Partition `number` of the disk called `base`, by the kernel's rule:
/// "p" before the number when the name ends in a digit (nvme0n1p1, sda1).
pub fn partition_name(base: &str, number: u32) -> String {
    let p = if base.ends_with(|c: char| c.is_ascii_digit()) { "p" } else { "" };
    format!("{base}{p}{number}")
}

pub mod drive;
mod error;
pub mod exclusive;
mod identity;
mod ioctl;
pub mod kernel;
pub mod libvirt;
pub mod quirks;
mod stack;
pub(crate) mod sysfs;
mod target;
mod topology;
pub mod vmimage;

pub use error::DeviceError;
pub(crate) use identity::kernel_serial;
pub use identity::{identity, Identity};
pub use stack::held;
pub(crate) use stack::{is_held, origins, Origin};
pub(crate) use sysfs::crypt_holder;
pub use sysfs::{kernel_partitions, KernelPartition, SysRoot};
pub(crate) use target::{check_kind, open_checked};
pub use target::{list_disks, open, open_path, reader, resolve};
pub use topology::{topology, validate_overrides, SectorGuess};

#[cfg(test)]
mod tests {
    use super::Source;

    #[test]
    fn source_names_match_json() {
        for s in [
            Source::Kernel,
            Source::Ioctl,
            Source::Quirk,
            Source::Override,
            Source::Table,
            Source::Assumed,
            Source::Probe,
            Source::Drive,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
