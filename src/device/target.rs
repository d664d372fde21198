//! Turning what the user typed into a whole disk or an image, and opening it.

use super::sysfs::{block_dir, partition_number, read_number, SysRoot};
use super::{DeviceError, Target, TargetKind};
use rustix::fs::{major, minor, Mode, OFlags};
use std::fs::{self, File};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Every whole disk in SYS/block, sorted by name, except those with nothing
/// to audit: RAM disks, zram, unattached loop devices and empty drives.
pub fn list_disks(root: &SysRoot) -> Result<Vec<Target>, DeviceError> {
    let dir = root.sys.join("block");
    let entries = fs::read_dir(&dir).map_err(|e| DeviceError::from_io(&dir, e))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| is_auditable(root, name))
        .collect();
    names.sort();
    Ok(names.into_iter().map(|name| disk_target(root, name, None)).collect())
}

fn is_auditable(root: &SysRoot, name: &str) -> bool {
    if name.starts_with("ram") || name.starts_with("zram") {
        return false;
    }
    let dir = root.block(name);
    if name.starts_with("loop") && !dir.join("loop/backing_file").exists() {
        return false;
    }
    read_number(&dir.join("size")).is_some_and(|sectors| sectors > 0)
}

fn disk_target(root: &SysRoot, name: String, selected_partition: Option<u32>) -> Target {
    Target {
        path: root.dev.join(&name),
        name: Some(name),
        kind: TargetKind::Disk,
        selected_partition,
    }
}

/// Resolve a user path: a whole disk, a partition (as its parent disk with
/// `selected_partition` set) or a regular file (an image).
pub fn resolve(root: &SysRoot, path: &Path) -> Result<Target, DeviceError> {
    let meta = fs::metadata(path).map_err(|e| DeviceError::from_io(path, e))?;
    if meta.file_type().is_block_device() {
        return resolve_block(root, path, meta.rdev());
    }
    if let Some(target) = fixture_node(root, path) {
        return Ok(target);
    }
    if meta.is_file() {
        let path = path.to_path_buf();
        return Ok(Target { path, name: None, kind: TargetKind::Image, selected_partition: None });
    }
    Err(DeviceError::NotBlockOrFile(path.to_path_buf()))
}

/// Find the sysfs directory by device number rather than by node name.
fn resolve_block(root: &SysRoot, path: &Path, rdev: u64) -> Result<Target, DeviceError> {
    block_dir(&root.sys, rdev).and_then(|dir| target_of_sysfs_dir(root, &dir)).ok_or_else(|| {
        let number = format!("{}:{}", major(rdev), minor(rdev));
        DeviceError::NoSysfs { path: path.to_path_buf(), number }
    })
}

/// A partition directory sits inside its disk's directory.
fn target_of_sysfs_dir(root: &SysRoot, dir: &Path) -> Option<Target> {
    match partition_number(dir) {
        Some(number) => Some(disk_target(root, dir_name(dir.parent()?)?, Some(number))),
        None => Some(disk_target(root, dir_name(dir)?, None)),
    }
}

fn dir_name(dir: &Path) -> Option<String> {
    Some(dir.file_name()?.to_str()?.to_string())
}

/// In a fixture, DEV/NAME is a plain file standing for the disk or partition
/// that SYS names NAME.
fn fixture_node(root: &SysRoot, path: &Path) -> Option<Target> {
    let name = path.file_name()?.to_str()?;
    let parent = match path.parent()? {
        p if p.as_os_str().is_empty() => Path::new("."),
        p => p,
    };
    if fs::canonicalize(parent).ok()? != fs::canonicalize(&root.dev).ok()? {
        return None;
    }
    let disk = root.block(name);
    if disk.is_dir() {
        return target_of_sysfs_dir(root, &disk);
    }
    let disks = fs::read_dir(root.sys.join("block")).ok()?;
    let partition = disks
        .flatten()
        .map(|entry| entry.path().join(name))
        .find(|dir| partition_number(dir).is_some())?;
    target_of_sysfs_dir(root, &partition)
}

/// Open for reading only: auditing never writes. CLOEXEC keeps the
/// descriptor out of any tool we spawn.
pub fn open(target: &Target) -> Result<File, DeviceError> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(&target.path, flags, Mode::empty())
        .map_err(|e| DeviceError::from_io(&target.path, e.into()))?;
    Ok(File::from(fd))
}
