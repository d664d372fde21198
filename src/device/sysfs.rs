//! Reading sysfs attributes, from the real /sys or a fixture tree.

use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

/// Where to find sysfs, device nodes and udev's database: real ("/sys",
/// "/dev", "/run/udev/data") or a fixture tree laid out as
/// ROOT/sys/block/..., ROOT/dev/NAME and ROOT/run/udev/data/bMAJ:MIN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysRoot {
    pub sys: PathBuf,
    pub dev: PathBuf,
    pub udev: PathBuf,
}

impl SysRoot {
    pub fn real() -> SysRoot {
        SysRoot {
            sys: PathBuf::from("/sys"),
            dev: PathBuf::from("/dev"),
            udev: PathBuf::from("/run/udev/data"),
        }
    }

    /// A fixture: `sys` is ROOT/sys, device nodes are in ROOT/dev, udev's
    /// database in ROOT/run/udev/data.
    pub fn fixture(sys: PathBuf) -> SysRoot {
        let base = sys.parent().unwrap_or(Path::new("")).to_path_buf();
        SysRoot { sys, dev: base.join("dev"), udev: base.join("run/udev/data") }
    }

    /// udev's properties of the block device of sysfs directory `dir`
    /// (its `dev` attribute names the database file): KEY=VALUE lines
    /// after "E:". Empty when udev has no record (no udevd, a container).
    pub(crate) fn udev_properties(&self, dir: &Path) -> Vec<(String, String)> {
        let Some(number) = read_text(&dir.join("dev")) else { return Vec::new() };
        let text = fs::read(self.udev.join(format!("b{number}"))).unwrap_or_default();
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.strip_prefix("E:")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// SYS/block/NAME.
    pub(crate) fn block(&self, name: &str) -> PathBuf {
        self.sys.join("block").join(name)
    }
}

/// The node of block device `name` as lsblk's PATH names it:
/// /dev/mapper/NAME for a device-mapper device (its sysfs `dm/name`; LVM's
/// /dev/VG/LV is a link to the same node), where that node exists; else
/// /dev/NAME.
pub(crate) fn node_path(root: &SysRoot, name: &str) -> PathBuf {
    read_text(&root.block(name).join("dm/name"))
        .map(|dm| root.dev.join("mapper").join(dm))
        .filter(|mapper| mapper.exists())
        .unwrap_or_else(|| root.dev.join(name))
}

/// A partition as the kernel sees it, in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelPartition {
    pub number: u32,
    pub start_bytes: u64,
    pub size_bytes: u64,
}

/// Partitions of disk `name` from SYS/block/NAME/*/partition, by number.
/// Used when the device itself is unreadable; empty when there are none.
pub fn kernel_partitions(root: &SysRoot, name: &str) -> Vec<KernelPartition> {
    let mut parts: Vec<KernelPartition> =
        partition_dirs(&root.block(name)).iter().filter_map(|dir| partition_at(dir)).collect();
    parts.sort_by_key(|p| p.number);
    parts
}

/// The opened dm-crypt device over partition `number` of disk `name`, from
/// the partition's sysfs `holders/` (a dm device whose uuid starts with
/// "CRYPT-"): its node (/dev/mapper/NAME) and size in bytes. What it holds can only be read
/// through it.
pub(crate) fn crypt_holder(root: &SysRoot, name: &str, number: u32) -> Option<(PathBuf, u64)> {
    let part = partition_dirs(&root.block(name))
        .into_iter()
        .find(|dir| partition_number(dir) == Some(number))?;
    let holders = fs::read_dir(part.join("holders")).ok()?;
    holders.flatten().find_map(|h| {
        let holder = h.file_name().into_string().ok()?;
        let dir = root.block(&holder);
        read_text(&dir.join("dm/uuid")).filter(|uuid| uuid.starts_with("CRYPT-"))?;
        let size = read_number(&dir.join("size"))?.checked_mul(512)?;
        Some((node_path(root, &holder), size))
    })
}

/// The partition directories inside a disk's sysfs directory.
pub(crate) fn partition_dirs(disk: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(disk).into_iter().flatten().flatten();
    entries.map(|e| e.path()).filter(|p| partition_number(p).is_some()).collect()
}

/// SYS/dev/block/MAJ:MIN resolved to the real directory: found by device
/// number, so aliases such as /dev/disk/by-id/... work too.
pub(crate) fn block_dir(sys: &Path, rdev: u64) -> Option<PathBuf> {
    let number = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
    fs::canonicalize(sys.join("dev/block").join(number)).ok()
}

/// sysfs `start` and `size` are in 512-byte units whatever the sector size.
fn partition_at(dir: &Path) -> Option<KernelPartition> {
    Some(KernelPartition {
        number: partition_number(dir)?,
        start_bytes: read_number(&dir.join("start"))?.checked_mul(512)?,
        size_bytes: read_number(&dir.join("size"))?.checked_mul(512)?,
    })
}

/// The number in DIR/partition, present only in partition directories.
pub(crate) fn partition_number(dir: &Path) -> Option<u32> {
    u32::try_from(read_number(&dir.join("partition"))?).ok()
}

/// Trimmed contents of an attribute; None when missing, unreadable or blank.
pub(crate) fn read_text(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// A numeric attribute, None when missing or malformed.
pub(crate) fn read_number(path: &Path) -> Option<u64> {
    read_text(path)?.parse().ok()
}

/// A numeric attribute; a malformed one is noted and treated as missing.
pub(crate) fn read_u64(path: &Path, notes: &mut Vec<String>) -> Option<u64> {
    let text = read_text(path)?;
    let value = text.parse().ok();
    if value.is_none() {
        notes.push(format!("ignored {}: {text:?} is not a byte count", path.display()));
    }
    value
}
