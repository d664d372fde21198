//! Telling the kernel about partitions that changed on a disk: the whole
//! table at once (BLKRRPART), or partition by partition (BLKPG, as partx
//! does) where it cannot take that.

use super::sysfs::{kernel_partitions, SysRoot};
use super::{Target, TargetKind};
use rustix::io::Errno;
use std::fs::File;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct KernelError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl KernelError {
    fn new(path: &Path, e: Errno) -> KernelError {
        KernelError { path: path.to_path_buf(), source: e.into() }
    }

    /// The device takes no partitions (EINVAL from BLKPG): device-mapper
    /// disks, on 6.1 in the kernel lab. A loop device attached without -P
    /// takes them all the same.
    pub(crate) fn is_no_partitions(&self) -> bool {
        self.source.raw_os_error() == Some(Errno::INVAL.raw_os_error())
    }
}

/// A partition for the kernel, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelPart {
    pub number: u32,
    pub start: u64,
    pub length: u64,
}

impl KernelPart {
    /// A partition given in sectors of `ss` bytes; None when that
    /// overflows. The kernel shows an extended partition as its first
    /// 1 KiB or sector.
    pub fn from_sectors(
        number: u32,
        start: u64,
        size: u64,
        extended: bool,
        ss: u64,
    ) -> Option<KernelPart> {
        let length = if extended { ss.max(1024) } else { size.checked_mul(ss)? };
        Some(KernelPart { number, start: start.checked_mul(ss)?, length })
    }
}

/// Telling the kernel about partitions that changed on the disk.
pub(crate) trait PartTable {
    /// Make the kernel's partition `part.number` match `part` (BLKPG delete+add or resize).
    fn update(&self, part: &KernelPart) -> Result<(), KernelError>;
}

/// A block device, open for writing.
pub struct Device<'a> {
    pub file: &'a File,
    /// For messages.
    pub path: &'a Path,
}

impl PartTable for Device<'_> {
    /// Delete and add: BLKPG's resize cannot move a start.
    fn update(&self, part: &KernelPart) -> Result<(), KernelError> {
        update_partitions(self.file, self.path, &[part.number], &[*part])
    }
}

/// How telling the kernel about a new table went.
#[must_use]
pub struct Told {
    disk: PathBuf,
    /// BLKRRPART left the kernel with other partitions than the table's,
    /// so they were added one by one (BLKPG).
    pub one_by_one: bool,
    /// Why the kernel may still show the old partitions; the table on the
    /// disk is right regardless.
    pub failed: Option<KernelError>,
}

impl Told {
    /// What the user should hear, in order; empty when all went well.
    pub fn messages(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.one_by_one {
            out.push(
                "the kernel did not take the whole table; adding the partitions one by one (BLKPG)"
                    .to_string(),
            );
        }
        if let Some(e) = &self.failed {
            out.push(format!(
                "warning: the kernel did not re-read the table ({e}); run `partprobe {}` or reboot",
                self.disk.display()
            ));
        }
        out
    }
}

/// Make the kernel see partitions `parts`, the whole table now on the disk
/// `file` of `target`: a rescan, and BLKPG when the kernel is left with
/// other partition numbers (a busy disk, no parser for the table). Nothing
/// to do for an image.
pub fn tell(root: &SysRoot, target: &Target, file: &File, parts: &[KernelPart]) -> Told {
    let mut told = Told { disk: target.path.clone(), one_by_one: false, failed: None };
    let Some(name) = target.name.as_deref().filter(|_| target.kind == TargetKind::Disk) else {
        return told;
    };
    let numbers =
        || -> Vec<u32> { kernel_partitions(root, name).iter().map(|k| k.number).collect() };
    let mut wanted: Vec<u32> = parts.iter().map(|p| p.number).collect();
    wanted.sort_unstable();
    let result = match rescan(file, &target.path) {
        Ok(true) if numbers() == wanted => Ok(()),
        Ok(_) => {
            told.one_by_one = true;
            update_partitions(file, &target.path, &numbers(), parts)
        }
        Err(e) => Err(e),
    };
    told.failed = result.err();
    told
}

/// Ask the kernel to rescan the table (BLKRRPART), retrying while udev's
/// probe holds a partition open. False when it stayed busy.
pub(crate) fn rescan(file: &File, path: &Path) -> Result<bool, KernelError> {
    const BLKRRPART: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 95);
    for _ in 0..5 {
        // SAFETY: BLKRRPART takes no argument.
        let done = unsafe { rustix::ioctl::ioctl(file, rustix::ioctl::NoArg::<BLKRRPART>::new()) };
        match done {
            Ok(()) => return Ok(true),
            Err(Errno::BUSY) => std::thread::sleep(std::time::Duration::from_millis(200)),
            Err(e) => return Err(KernelError::new(path, e)),
        }
    }
    Ok(false)
}

/// Tell the kernel partition by partition (BLKPG, as partx does): for a
/// busy disk, or a kernel without a parser for the table. `old` are the
/// numbers the kernel has now.
pub(crate) fn update_partitions(
    file: &File,
    path: &Path,
    old: &[u32],
    new: &[KernelPart],
) -> Result<(), KernelError> {
    for &number in old {
        // One already gone is fine; a busy one shows when adding.
        let _ = blkpg(file, BLKPG_DEL, KernelPart { number, start: 0, length: 0 });
    }
    for &part in new {
        blkpg(file, BLKPG_ADD, part).map_err(|e| KernelError::new(path, e))?;
    }
    Ok(())
}

const BLKPG_ADD: i32 = 1;
const BLKPG_DEL: i32 = 2;

/// struct blkpg_partition from <linux/blkpg.h>.
#[repr(C)]
struct BlkpgPartition {
    start: i64,
    length: i64,
    pno: i32,
    devname: [u8; 64],
    volname: [u8; 64],
}

/// struct blkpg_ioctl_arg from <linux/blkpg.h>.
#[repr(C)]
struct BlkpgArg {
    op: i32,
    flags: i32,
    datalen: i32,
    data: *mut BlkpgPartition,
}

fn blkpg(file: &File, op: i32, part: KernelPart) -> rustix::io::Result<()> {
    const BLKPG: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 105);
    let range = |v: u64| i64::try_from(v).map_err(|_| Errno::INVAL);
    let pno = i32::try_from(part.number).map_err(|_| Errno::INVAL)?;
    let mut data = BlkpgPartition {
        start: range(part.start)?,
        length: range(part.length)?,
        pno,
        devname: [0; 64],
        volname: [0; 64],
    };
    let arg = BlkpgArg {
        op,
        flags: 0,
        datalen: std::mem::size_of::<BlkpgPartition>() as i32,
        data: &mut data,
    };
    // SAFETY: BLKPG takes a pointer to blkpg_ioctl_arg, whose data points
    // at a blkpg_partition that outlives the call.
    unsafe { rustix::ioctl::ioctl(file, rustix::ioctl::Setter::<BLKPG, BlkpgArg>::new(arg)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_in_bytes() {
        let p = KernelPart::from_sectors(2, 2048, 100, false, 4096).unwrap();
        assert_eq!(p, KernelPart { number: 2, start: 2048 * 4096, length: 100 * 4096 });
        let extended = KernelPart::from_sectors(4, 63, 1 << 20, true, 512).unwrap();
        assert_eq!((extended.start, extended.length), (63 * 512, 1024));
        assert_eq!(KernelPart::from_sectors(1, u64::MAX, 1, false, 512), None);
    }

    #[test]
    fn images_are_not_told() {
        let image = Target {
            path: "disk.img".into(),
            name: None,
            kind: TargetKind::Image,
            selected_partition: None,
        };
        let file = tempfile::tempfile().unwrap();
        let told = tell(&SysRoot::real(), &image, &file, &[]);
        assert!(!told.one_by_one && told.failed.is_none() && told.messages().is_empty());
    }
}
