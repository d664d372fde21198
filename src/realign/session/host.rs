//! What a move needs from the world beyond the bytes it reads: the
//! [`Host`] and [`Writer`] traits, and [`DiskHost`], the real disk or image.

use super::error::{io_error, MoveRefusal, SessionError};
use crate::device::exclusive;
use crate::device::kernel::{self, KernelPart, PartTable};
use crate::device::{self, SysRoot, Target, TargetKind};
use crate::io::ReadAt;
use crate::realign::disk::Disk;
use crate::realign::{guard, Move};
use std::fs::File;
use std::path::Path;
use std::time::Instant;

/// What a move needs from the world beyond the bytes it reads: the in-use
/// check, a writer and the kernel. [`DiskHost`] is the real one; tests inject
/// failures through their own.
pub trait Host {
    /// Refuse a target that is mounted, held, attached or locked, naming
    /// the partitions in `asked` first where they are the ones in use.
    fn check_unused(&self, asked: &[u32]) -> Result<(), SessionError>;
    /// Refuse a journal where a crash of the target would take it along
    /// (for the move of the partitions `moved`).
    fn check_journal(&self, journal: &Path, moved: &[u32]) -> Result<(), SessionError>;
    /// The target opened for the move's writes, once [`hold`] has checked
    /// that nothing uses it.
    fn writer(&self, checked: Unused) -> Result<Box<dyn Writer>, SessionError>;
    /// Bytes per second reading the target at `offset`: the estimate's basis.
    fn read_rate(&self, offset: u64, bytes: u64) -> Option<f64>;
    /// The target for reading what is on it, not in a cache (O_DIRECT).
    fn direct_reader(&self) -> Result<Box<dyn ReadAt + Sync>, SessionError>;
    /// Whether the target is still there, asked after an I/O error: a disk
    /// unplugged or dropped by its controller has left sysfs.
    fn present(&self) -> bool;
}

/// That the in-use check passed: only [`hold`] makes one, right after the
/// check, so no [`Writer`] exists without it (as [`crate::commit::Held`]
/// for a table's write).
pub struct Unused(());

/// Refuse a target in use (naming `asked` first), then open it to write.
pub(crate) fn hold(host: &dyn Host, asked: &[u32]) -> Result<Box<dyn Writer>, SessionError> {
    host.check_unused(asked)?;
    host.writer(Unused(()))
}

/// The target as the copy writes it, and the kernel's view of it.
pub trait Writer: Disk {
    /// Make the kernel's partition match the moved one; a warning when it
    /// cannot (the table on the disk is already right).
    fn tell_kernel(&self, m: &Move) -> Option<String>;
}

/// A real disk or image.
pub(crate) struct DiskHost {
    pub root: SysRoot,
    pub target: Target,
    /// A VM image's guest disk exported by qemu-storage-daemon over FUSE.
    pub export: bool,
    /// In the initramfs, with the journal's file system mounted from
    /// another partition of this disk: only the partitions moved must be
    /// unused, and the disk is opened without O_EXCL (the mount holds it).
    pub at_boot: bool,
}

impl Host for DiskHost {
    fn check_unused(&self, asked: &[u32]) -> Result<(), SessionError> {
        if self.at_boot {
            return Ok(exclusive::check_partitions_unused(&self.root, &self.target, asked)?);
        }
        Ok(exclusive::check_unused(&self.root, &self.target, asked)?)
    }

    fn check_journal(&self, journal: &Path, moved: &[u32]) -> Result<(), SessionError> {
        let spared = self.at_boot.then_some(moved);
        Ok(guard::journal_location(&self.root, &self.target, journal, spared)?)
    }

    /// O_DIRECT where the file system allows it (tmpfs does not),
    /// exclusive for block devices. Through a FUSE export, writes are
    /// buffered (QEMU 7.2 corrupts O_DIRECT writes over 1 MiB there; fsync
    /// still reaches the image) and reads O_DIRECT, so verification reads
    /// the image, not the page cache.
    fn writer(&self, _: Unused) -> Result<Box<dyn Writer>, SessionError> {
        use crate::bench::{open_direct, Mode};
        let (root, target) = (self.root.clone(), self.target.clone());
        if self.export {
            let file = exclusive::open_for_writing(&self.target)?;
            let reads = open_direct(&self.target.path, Mode::Read, false)
                .map_err(MoveRefusal::OpenDirect)?;
            return Ok(Box::new(DeviceWriter { file, reads: Some(reads), root, target }));
        }
        if self.at_boot {
            let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::DIRECT;
            let file = device::open_checked(&self.target.path, flags)?;
            return Ok(Box::new(DeviceWriter { file, reads: None, root, target }));
        }
        let file = match open_direct(&self.target.path, Mode::Write, false) {
            Ok(f) => f,
            Err(_) if self.target.kind == TargetKind::Image => {
                exclusive::open_for_writing(&self.target)?
            }
            Err(e) => return Err(MoveRefusal::OpenDirect(e).into()),
        };
        Ok(Box::new(DeviceWriter { file, reads: None, root, target }))
    }

    /// O_DIRECT, or buffered where the file system refuses it (tmpfs).
    fn direct_reader(&self) -> Result<Box<dyn ReadAt + Sync>, SessionError> {
        let path = &self.target.path;
        let file = crate::bench::open_direct(path, crate::bench::Mode::Read, false)
            .or_else(|_| File::open(path))
            .map_err(io_error(format!("opening {}", path.display())))?;
        Ok(Box::new(file))
    }

    /// The kernel removes a disk's sysfs entry shortly after its I/O
    /// starts failing: asked for up to a second before saying it stayed.
    fn present(&self) -> bool {
        let entry = match (&self.target.name, self.target.kind) {
            (Some(name), TargetKind::Disk) => self.root.sys.join("block").join(name),
            _ => self.target.path.clone(),
        };
        for _ in 0..10 {
            if !entry.exists() {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        true
    }

    fn read_rate(&self, offset: u64, bytes: u64) -> Option<f64> {
        use std::os::unix::fs::FileExt;
        let path = &self.target.path;
        let file = crate::bench::open_direct(path, crate::bench::Mode::Read, false)
            .ok()
            .or_else(|| File::open(path).ok())?;
        let mut buf = crate::io::AlignedBuf::new(4 << 20, 0);
        let (started, mut done) = (Instant::now(), 0u64);
        while done < bytes.min(64 << 20) && started.elapsed().as_secs_f64() < 0.5 {
            let len = (bytes - done).min(4 << 20) as usize;
            FileExt::read_exact_at(&file, &mut buf.bytes_mut()[..len], offset.checked_add(done)?)
                .ok()?;
            done += len as u64;
        }
        let secs = started.elapsed().as_secs_f64();
        (done > 0 && secs > 0.0).then(|| done as f64 / secs)
    }
}

struct DeviceWriter {
    file: File,
    /// Where reads go when not to `file`.
    reads: Option<File>,
    root: SysRoot,
    target: Target,
}

impl Disk for DeviceWriter {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        Disk::read_at(self.reads.as_ref().unwrap_or(&self.file), buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        Disk::write_at(&self.file, buf, offset)
    }

    fn flush(&self) -> std::io::Result<()> {
        Disk::flush(&self.file)
    }
}

impl Writer for DeviceWriter {
    /// Swap the kernel's partition for the moved one, if it had it.
    fn tell_kernel(&self, m: &Move) -> Option<String> {
        let name = self.target.name.as_ref().filter(|_| self.target.kind == TargetKind::Disk)?;
        let known =
            device::kernel_partitions(&self.root, name).iter().any(|k| k.number == m.partition);
        let part = KernelPart {
            number: m.partition,
            start: m.new_start.saturating_mul(m.sector_size),
            length: m.sectors.saturating_mul(m.sector_size),
        };
        // Added even when the kernel lacks it: a rerun after a crash mid-table
        // finds a disk the kernel scanned while its table was torn (the kernel
        // lab's crash states). A disk that takes no partitions (device-mapper,
        // seen on 6.1 in the lab) refuses with EINVAL: nothing to tell it.
        let path = &self.target.path;
        match (kernel::Device { file: &self.file, path }).update(&part) {
            Err(e) if known || !e.is_no_partitions() => Some(format!(
                "the kernel still sees the old partition {} ({e}); run `partx -u {}` or reboot",
                m.partition,
                path.display()
            )),
            _ => None,
        }
    }
}
