//! Turning what the user typed into a whole disk or an image, and opening it.

use super::sysfs::{block_dir, node_path, partition_number, read_number, SysRoot};
use super::{ioctl, DeviceError, Target, TargetKind};
use crate::io::DirectReader;
use rustix::fs::{major, minor, Mode, OFlags};
use rustix::io::Errno;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

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

/// A block device by the node lsblk's PATH names (/dev/mapper/NAME for
/// device-mapper), so that headers, hints and journal names survive a
/// reboot that renumbers dm-N.
fn disk_target(root: &SysRoot, name: String, selected_partition: Option<u32>) -> Target {
    Target {
        path: node_path(root, &name),
        name: Some(name),
        kind: TargetKind::Disk,
        selected_partition,
    }
}

/// Resolve a user path: a whole disk, a partition (as its parent disk with
/// `selected_partition` set) or a regular file (an image).
pub fn resolve(root: &SysRoot, path: &Path) -> Result<Target, DeviceError> {
    let meta = check_kind(path)?;
    let target = if meta.file_type().is_block_device() {
        resolve_block(root, path, meta.rdev())?
    } else if let Some(target) = fixture_node(root, path) {
        target
    } else {
        let file = fs::File::open(path).map_err(|e| DeviceError::from_io(path, e))?;
        if let Some(format) = super::vmimage::detect(&file, meta.len()) {
            return Err(DeviceError::VmImage { path: path.to_path_buf(), format });
        }
        let path = path.to_path_buf();
        return Ok(Target { path, name: None, kind: TargetKind::Image, selected_partition: None });
    };
    // A bound loop device has SYS/block/loopN/loop; an unbound one is an
    // empty disk that would pass for "no table, nothing to check".
    let unbound =
        |name: &String| name.starts_with("loop") && !root.block(name).join("loop").is_dir();
    if target.name.as_ref().is_some_and(unbound) {
        return Err(DeviceError::NotAttached(path.to_path_buf()));
    }
    Ok(target)
}

/// Stat `path` without opening it and refuse anything but a block device
/// or a regular file: opening a FIFO blocks until a writer comes, and
/// opening a character device can act on it (a tape rewinds, a watchdog
/// starts).
pub(crate) fn check_kind(path: &Path) -> Result<fs::Metadata, DeviceError> {
    let meta = fs::metadata(path).map_err(|e| DeviceError::from_io(path, e))?;
    usable(path, &meta)?;
    Ok(meta)
}

fn usable(path: &Path, meta: &fs::Metadata) -> Result<(), DeviceError> {
    let t = meta.file_type();
    let kind = if t.is_block_device() || t.is_file() {
        return Ok(());
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "an unknown kind of file"
    };
    Err(DeviceError::NotBlockOrFile { path: path.to_path_buf(), kind })
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

/// Open for reading only: auditing never writes.
pub fn open(target: &Target) -> Result<DirectReader, DeviceError> {
    open_path(&target.path)
}

/// Open a disk, partition or image for reading only, read as [`reader`]
/// says. CLOEXEC keeps the descriptor out of any tool we spawn.
pub fn open_path(path: &Path) -> Result<DirectReader, DeviceError> {
    reader(open_checked(path, OFlags::RDONLY | OFlags::CLOEXEC)?, path)
}

/// Reads of `file`, opened from `path` for reading or writing, that see
/// what is on the device (see [`DirectReader`]): a block device is opened
/// again with O_DIRECT, through /proc/self/fd so that it is the same
/// device whatever `path` names now. A device that refuses O_DIRECT
/// (EINVAL) is read buffered with its cached pages dropped per read. An
/// image keeps its page cache, which is its own.
pub fn reader(file: File, path: &Path) -> Result<DirectReader, DeviceError> {
    let io = |e: std::io::Error| DeviceError::from_io(path, e);
    if !file.metadata().map_err(io)?.file_type().is_block_device() {
        return Ok(DirectReader::cached(file));
    }
    let again = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let flags = OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC;
    match rustix::fs::open(&again, flags, Mode::empty()) {
        Ok(direct) => {
            // Blocks of 4096 bytes are whole blocks of any smaller size too.
            let block = ioctl::logical_block_size(&file).unwrap_or(4096);
            DirectReader::direct(file, File::from(direct), block).map_err(io)
        }
        Err(Errno::INVAL) => Ok(DirectReader::uncached(file)),
        Err(e) => Err(io(e.into())),
    }
}

/// Open a block device or regular file with `flags`, checked before (see
/// [`check_kind`]) and after, in case another file took its name between:
/// open itself never blocks (O_NONBLOCK) nor makes a terminal ours.
pub(crate) fn open_checked(path: &Path, flags: OFlags) -> Result<File, DeviceError> {
    check_kind(path)?;
    let io = |e: std::io::Error| DeviceError::from_io(path, e);
    let fd = rustix::fs::open(path, flags | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())
        .map_err(|e| io(e.into()))?;
    let file = File::from(fd);
    usable(path, &file.metadata().map_err(io)?)?;
    // Reads and writes block as usual (io_uring would return EAGAIN).
    let without = rustix::fs::fcntl_getfl(&file).map_err(|e| io(e.into()))? - OFlags::NONBLOCK;
    rustix::fs::fcntl_setfl(&file, without).map_err(|e| io(e.into()))?;
    Ok(file)
}
