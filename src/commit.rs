//! The one safe way to write a table (or any set of regions) to a disk or
//! image, as libfdisk's `fdisk_write_disklabel()` is for fdisk: the disk
//! held ([`Held`]: the in-use check, then an O_EXCL open), the bytes about
//! to be overwritten saved and the backup checked to restore them, the
//! regions written in order with a flush after each, read back past the
//! page cache, and the kernel told. `partition`, `rescale` and a library
//! caller go through [`commit_table`]; `restore` holds the disk the same way.
//! A `realign` move writes its table as the last step of a journaled copy:
//! its journal, not a backup file, records the bytes each write replaces
//! (checked again before it is made), in an order a crash cannot break, so
//! a rerun resumes it; its writer, too, exists only after the in-use check
//! (`realign::session::host::hold`).

use crate::backup::{self, BackupError, Saved, ToSave};
use crate::device::exclusive::{self, ExclusiveError};
use crate::device::kernel::{self, KernelPart, Told};
use crate::device::{self, DeviceError, Identity, SysRoot, Target, TargetKind};
use crate::io::{DirectReader, ReadAt};
use crate::table::write::Chunk;
use crate::table::{self, Layout, TableError};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    InUse(#[from] ExclusiveError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Backup(#[from] BackupError),
    #[error("{}: reading the {what} at byte {offset}", path.display())]
    ReadOld { path: PathBuf, what: String, offset: u64, source: io::Error },
    /// Nothing or part was written; the backup puts back what was.
    #[error("writing {}", path.display())]
    Write { path: PathBuf, backup: PathBuf, source: io::Error },
    #[error(
        "{}: the {what} at byte {offset} does not read back as written",
        path.display()
    )]
    ReadBack { path: PathBuf, backup: PathBuf, what: String, offset: u64 },
    #[error("{}: the table written does not read back", path.display())]
    Table { path: PathBuf, backup: PathBuf, source: TableError },
}

/// A disk or image that nothing else uses, open for writing: the only way
/// to get one is [`Held::take`], which checks first.
pub struct Held {
    target: Target,
    disk: DirectReader,
}

impl Held {
    /// Refuse a target in use (mounted, held, attached to a loop device,
    /// open exclusively elsewhere), then open it to write, a block device
    /// with O_EXCL so that nothing claims it while it is written.
    pub fn take(root: &SysRoot, target: &Target) -> Result<Held, CommitError> {
        exclusive::check_unused(root, target, &[])?;
        let file = exclusive::open_for_writing(target)?;
        Ok(Held { target: target.clone(), disk: device::reader(file, &target.path)? })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// What is on the disk now, read past the page cache.
    pub fn reader(&self) -> &DirectReader {
        &self.disk
    }

    /// The handle that writes, for writers with their own ordering
    /// (`restore` puts a backup's regions back).
    pub fn file(&self) -> &std::fs::File {
        self.disk.file()
    }
}

/// What the kernel is told after the write.
pub enum Kernel {
    /// The table as it reads back with `sector_size` from `size` bytes.
    Table { sector_size: u64, size: u64 },
    /// These partitions.
    Parts(Vec<KernelPart>),
    /// Nothing: the table is for another sector size than the disk presents.
    Untold,
}

/// One write: `chunks` in order; `saves`, the regions to back up (by
/// default each chunk's bytes as they are now); where the backup goes
/// (by default ./blkalign-backup-NAME-UNIXTIME.bin); the disk's sector
/// size and identity the backup records.
pub struct Commit<'a> {
    pub chunks: &'a [Chunk],
    pub saves: Option<Vec<ToSave>>,
    pub backup: Option<&'a Path>,
    pub sector_size: u64,
    pub identity: Identity,
    pub kernel: Kernel,
}

/// What [`commit_table`] did.
pub struct Committed {
    pub backup: Saved,
    /// The table read back, when [`Kernel::Table`] asked for it.
    pub table: Option<Layout>,
    /// `None` for an image or [`Kernel::Untold`].
    pub told: Option<Told>,
}

/// The bytes of each chunk's region as they are now.
pub fn old_bytes(
    disk: &dyn ReadAt,
    path: &Path,
    chunks: &[Chunk],
) -> Result<Vec<Vec<u8>>, CommitError> {
    chunks
        .iter()
        .map(|c| {
            let mut buf = vec![0u8; c.bytes.len()];
            disk.read_exact_at(&mut buf, c.offset).map_err(|source| CommitError::ReadOld {
                path: path.to_path_buf(),
                what: c.what.to_string(),
                offset: c.offset,
                source,
            })?;
            Ok(buf)
        })
        .collect()
}

/// Save, check the backup, write, read back, tell the kernel. On an error
/// after the backup was saved, the error names it: `blkalign restore`
/// puts back what was there.
pub fn commit_table(root: &SysRoot, held: &Held, c: Commit) -> Result<Committed, CommitError> {
    let path = &held.target.path;
    let saves = match c.saves {
        Some(saves) => saves,
        None => {
            let old = old_bytes(&held.disk, path, c.chunks)?;
            c.chunks
                .iter()
                .zip(old)
                .map(|(k, old)| ToSave::new(k.what, k.offset, old, &k.bytes))
                .collect()
        }
    };
    let saved = backup::save_backup(c.backup, &held.target, c.sector_size, c.identity, saves)?;
    backup::check_restorable(&saved.bin, &held.disk)?;
    let bin = saved.bin.clone();
    backup::write_chunks(held.file(), c.chunks).map_err(|source| CommitError::Write {
        path: path.clone(),
        backup: bin.clone(),
        source,
    })?;
    for (chunk, now) in c.chunks.iter().zip(old_bytes(&held.disk, path, c.chunks)?) {
        if now != chunk.bytes {
            return Err(CommitError::ReadBack {
                path: path.clone(),
                backup: bin,
                what: chunk.what.to_string(),
                offset: chunk.offset,
            });
        }
    }
    let table =
        match c.kernel {
            Kernel::Table { sector_size, size } => {
                Some(table::read(&held.disk, sector_size, size).map_err(|source| {
                    CommitError::Table { path: path.clone(), backup: bin, source }
                })?)
            }
            _ => None,
        };
    let parts = match (&c.kernel, &table) {
        (Kernel::Parts(parts), _) => Some(parts.clone()),
        (_, Some(layout)) => Some(backup::kernel_parts(layout)),
        _ => None,
    };
    let told = parts
        .filter(|_| held.target.kind == TargetKind::Disk)
        .map(|parts| kernel::tell(root, &held.target, held.file(), &parts));
    Ok(Committed { backup: saved, table, told })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::Backup;

    fn image(dir: &Path, fill: u8) -> (SysRoot, Target) {
        let path = dir.join("disk.img");
        std::fs::write(&path, vec![fill; 64 << 10]).unwrap();
        let root = SysRoot::real();
        let target = device::resolve(&root, &path).unwrap();
        (root, target)
    }

    fn chunk(offset: u64, byte: u8) -> Chunk {
        Chunk { offset, bytes: vec![byte; 512], what: "test region" }
    }

    #[test]
    fn a_commit_saves_writes_in_order_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let (root, target) = image(dir.path(), 7);
        let held = Held::take(&root, &target).unwrap();
        let chunks = [chunk(0, 1), chunk(4096, 2)];
        let bin = dir.path().join("backup.bin");
        let identity = Identity { size_bytes: 64 << 10, serial: None, wwid: None };
        let commit = Commit {
            chunks: &chunks,
            saves: None,
            backup: Some(&bin),
            sector_size: 512,
            identity,
            kernel: Kernel::Untold,
        };
        let done = super::commit_table(&root, &held, commit).unwrap();
        assert!(done.told.is_none() && done.table.is_none());
        let bytes = std::fs::read(&target.path).unwrap();
        assert!(bytes[..512].iter().all(|&b| b == 1));
        assert!(bytes[4096..4608].iter().all(|&b| b == 2));
        assert!(bytes[512..4096].iter().all(|&b| b == 7), "nothing between the chunks changes");
        // The backup holds what was there, and puts it back.
        let backup = Backup::open(&done.backup.bin).unwrap();
        let todo = backup.to_restore(held.reader(), &target.path).unwrap();
        assert_eq!(todo.len(), 2);
        backup.put_back(held.file(), &target.path, &todo).unwrap();
        assert_eq!(std::fs::read(&target.path).unwrap(), vec![7; 64 << 10]);
    }

    #[test]
    fn a_backup_that_exists_is_never_overwritten_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (root, target) = image(dir.path(), 0);
        let bin = dir.path().join("backup.bin");
        std::fs::write(&bin, b"someone else's").unwrap();
        let held = Held::take(&root, &target).unwrap();
        let chunks = [chunk(0, 1)];
        let commit = Commit {
            chunks: &chunks,
            saves: None,
            backup: Some(&bin),
            sector_size: 512,
            identity: Identity { size_bytes: 64 << 10, serial: None, wwid: None },
            kernel: Kernel::Table { sector_size: 512, size: 64 << 10 },
        };
        let err = super::commit_table(&root, &held, commit).err().unwrap();
        assert!(matches!(err, CommitError::Backup(_)), "{err}");
        assert_eq!(std::fs::read(&bin).unwrap(), b"someone else's");
        assert_eq!(std::fs::read(&target.path).unwrap(), vec![0; 64 << 10]);
    }
}
