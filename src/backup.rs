//! The backup a table writer saves before it overwrites anything, and
//! putting it back: the old bytes back to back in NAME.bin, and beside it a
//! JSON sidecar NAME.bin.json saying where each region goes, on which
//! disk, and the hashes that tell a damaged backup or a disk changed since.

use crate::device::exclusive::sync_parent;
use crate::device::kernel::{self, KernelPart, Told};
use crate::device::{Identity, SysRoot, Target, TargetKind, Topology};
use crate::io::{DirectReader, ReadAt};
use crate::table::write::Chunk;
use crate::table::{self, Layout, PartKind, Partition, TableError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The sidecar format that records the disk's identity and hashes.
pub(crate) const FORMAT: u32 = 2;

/// Far above any table's sectors (a GPT's arrays are 16 KiB); a sidecar
/// or region claiming more is not one `partition` wrote.
const MAX_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("cannot create a backup file in the current directory")]
    NoName,
    #[error("creating backup {}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("flushing the backup's directory")]
    SyncDir { source: io::Error },
    #[error("reading {}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("writing {}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("opening {}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: no such file or directory", .0.display())]
    Missing(PathBuf),
    #[error("{} is not a blkalign backup: no sidecar {}.json beside it", .0.display(), .0.display())]
    NotABackup(PathBuf),
    #[error("{} is not a blkalign backup sidecar", path.display())]
    NotASidecar { path: PathBuf, source: serde_json::Error },
    #[error("{}: made by a newer blkalign (format {format})", path.display())]
    NewerFormat { path: PathBuf, format: u32 },
    #[error("{}: damaged backup: the {what} region lies outside it", path.display())]
    Outside { path: PathBuf, what: String },
    #[error("{}: damaged backup: the {what} region does not match its hash", path.display())]
    Mismatch { path: PathBuf, what: String },
    #[error(
        "{} is not the disk the backup was taken from: {size} bytes, the backup's \
         {saved_size} bytes ({})",
        path.display(),
        taken_from.display()
    )]
    OtherSize { path: PathBuf, size: u64, saved_size: u64, taken_from: PathBuf },
    #[error(
        "{} has {logical}-byte sectors; the backup was taken from one with {saved}",
        path.display()
    )]
    OtherSectorSize { path: PathBuf, logical: u64, saved: u64 },
    #[error(
        "{} is not the disk the backup was taken from: {what} {now}, the backup's {then}",
        path.display()
    )]
    OtherDrive { path: PathBuf, what: &'static str, now: String, then: String },
    #[error(
        "{} changed since the backup was taken: the {what} at byte {offset} holds neither what \
         `partition` wrote nor the saved bytes; refusing to restore over it",
        path.display()
    )]
    Changed { path: PathBuf, what: String, offset: u64 },
    #[error(
        "{}: the backup just saved would not put back the {what} region as it is now; \
         nothing was written",
        path.display()
    )]
    NotRestorable { path: PathBuf, what: String },
}

/// The sidecar of a backup: where each saved region goes back, on which
/// disk, and what `partition` wrote over it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Sidecar {
    /// [`FORMAT`]; absent (0) in sidecars written before restore existed.
    #[serde(default)]
    pub format: u32,
    /// The target as named when the backup was taken.
    pub target: PathBuf,
    /// Logical sector size the table was laid out in.
    pub sector_size: u64,
    pub size_bytes: u64,
    /// Size, serial and WWN: /dev names change across boots.
    #[serde(default)]
    pub identity: Option<Identity>,
    pub regions: Vec<Region>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Region {
    pub what: String,
    /// Byte offset on the target.
    pub offset: u64,
    pub length: u64,
    /// Byte offset in the backup file.
    pub backup_offset: u64,
    /// The same by hand.
    pub restore: String,
    /// SHA-256 of the saved bytes, to catch a damaged backup.
    #[serde(default)]
    pub saved_sha256: Option<String>,
    /// SHA-256 of what `partition` wrote there, to catch a disk changed since.
    #[serde(default)]
    pub written_sha256: Option<String>,
}

impl Sidecar {
    /// A sidecar from its JSON text, read from `path` (for messages).
    pub fn parse(text: &[u8], path: &Path) -> Result<Sidecar, BackupError> {
        let sidecar: Sidecar = serde_json::from_slice(text)
            .map_err(|source| BackupError::NotASidecar { path: path.to_path_buf(), source })?;
        if sidecar.format > FORMAT {
            return Err(BackupError::NewerFormat {
                path: path.to_path_buf(),
                format: sidecar.format,
            });
        }
        Ok(sidecar)
    }

    /// Every region lies inside the backup file `bin` of `len` bytes, in
    /// whole sectors.
    pub fn check_regions(&self, bin: &Path, len: u64) -> Result<(), BackupError> {
        let outside = self.regions.iter().find(|r| {
            let fits = r.backup_offset.checked_add(r.length).is_some_and(|end| end <= len);
            !fits || r.length > MAX_BYTES || r.length % self.sector_size.max(1) != 0
        });
        match outside {
            Some(r) => Err(BackupError::Outside { path: bin.to_path_buf(), what: r.what.clone() }),
            None => Ok(()),
        }
    }
}

/// A region a writer is about to overwrite: the bytes there now, and the
/// hash of what it will write.
pub struct ToSave {
    what: String,
    offset: u64,
    old: Vec<u8>,
    written_sha256: String,
}

impl ToSave {
    /// `old` at byte `offset` of the target, about to become `new`.
    pub fn new(what: impl Into<String>, offset: u64, old: Vec<u8>, new: &[u8]) -> ToSave {
        ToSave { what: what.into(), offset, old, written_sha256: sha256_hex(new) }
    }
}

/// Save `regions` of `target` (sector size `ss`): the old bytes back to
/// back and a JSON sidecar naming their offsets, both flushed with the
/// directory holding them, before anything on the target changes. Never
/// overwrites; by default ./blkalign-backup-NAME-UNIXTIME.bin, with .N
/// added while taken.
pub(crate) fn save_backup(
    chosen: Option<&Path>,
    target: &Target,
    ss: u64,
    identity: Identity,
    regions: Vec<ToSave>,
) -> Result<Saved, BackupError> {
    let (path, mut file) = match chosen {
        Some(path) => (path.to_path_buf(), create_new(path)?),
        None => (0..100)
            .map(|n| default_backup(target, n))
            .find_map(|p| create_new(&p).ok().map(|f| (p, f)))
            .ok_or(BackupError::NoName)?,
    };
    // Absolute, so restore and the dd lines work from any directory.
    let absolute = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (shown, disk) = (absolute(&path), absolute(&target.path));
    let mut saved = Vec::new();
    let mut data = Vec::new();
    for r in regions {
        let at = data.len() as u64;
        let length = r.old.len() as u64;
        saved.push(Region {
            what: r.what,
            offset: r.offset,
            length,
            backup_offset: at,
            saved_sha256: Some(sha256_hex(&r.old)),
            written_sha256: Some(r.written_sha256),
            restore: format!(
                "dd if={} of={} bs={ss} skip={} seek={} count={} conv=notrunc",
                shown.display(),
                disk.display(),
                at / ss,
                r.offset / ss,
                length / ss
            ),
        });
        data.extend_from_slice(&r.old);
    }
    let sidecar = Sidecar {
        format: FORMAT,
        target: disk,
        sector_size: ss,
        size_bytes: identity.size_bytes,
        identity: Some(identity),
        regions: saved,
    };
    let json_path = sidecar_path(&path);
    let mut json = create_new(&json_path)?;
    let text = serde_json::to_vec_pretty(&sidecar).map_err(io::Error::from);
    for (f, at, bytes) in [(&mut file, &path, Ok(data)), (&mut json, &json_path, text)] {
        bytes
            .and_then(|bytes| f.write_all(&bytes))
            .and_then(|()| f.sync_all())
            .map_err(|source| BackupError::Write { path: at.clone(), source })?;
    }
    // The sidecar sits beside the backup: one directory flush covers both.
    sync_parent(&path).map_err(|source| BackupError::SyncDir { source })?;
    Ok(Saved { bin: path })
}

/// Where a backup went.
pub struct Saved {
    pub bin: PathBuf,
}

fn default_backup(target: &Target, attempt: u32) -> PathBuf {
    let name = target
        .name
        .clone()
        .or_else(|| target.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "disk".into());
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let extra = if attempt == 0 { String::new() } else { format!(".{attempt}") };
    PathBuf::from(format!("blkalign-backup-{name}-{now}{extra}.bin"))
}

fn create_new(path: &Path) -> Result<File, BackupError> {
    File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| BackupError::Create { path: path.to_path_buf(), source })
}

fn sidecar_path(bin: &Path) -> PathBuf {
    let mut json = bin.as_os_str().to_owned();
    json.push(".json");
    PathBuf::from(json)
}

fn sha256_hex(bytes: &[u8]) -> String {
    crate::units::hex(&Sha256::digest(bytes))
}

/// The dry run of a restore, before the write it would undo: the backup
/// `bin` just saved reads back, every region matches its hash, and holds
/// exactly what `disk` holds there now, so restoring it after the write
/// puts back what is there now.
pub(crate) fn check_restorable(bin: &Path, disk: &dyn ReadAt) -> Result<(), BackupError> {
    let backup = Backup::open(bin)?;
    let now = backup
        .compare(disk)
        .map_err(|source| BackupError::Read { path: backup.sidecar.target.clone(), source })?;
    match backup.sidecar.regions.iter().zip(now).find(|(_, n)| *n != Now::Restored) {
        Some((r, _)) => {
            Err(BackupError::NotRestorable { path: bin.to_path_buf(), what: r.what.clone() })
        }
        None => Ok(()),
    }
}

/// In order, each flushed before the next: the encoder orders them so a
/// crash leaves the old table or a repairable new one.
pub(crate) fn write_chunks(file: &File, chunks: &[Chunk]) -> io::Result<()> {
    for c in chunks {
        file.write_all_at(&c.bytes, c.offset)?;
        file.sync_data()?;
    }
    Ok(())
}

/// A backup read back: its sidecar and every saved region, checked
/// against its hash.
pub struct Backup {
    /// The file holding the saved bytes.
    pub bin: PathBuf,
    pub sidecar: Sidecar,
    saved: Vec<Vec<u8>>,
}

/// Where a region stands on the disk now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Now {
    /// Already holds the saved bytes.
    Restored,
    /// Holds what `partition` wrote (or, for an old sidecar, anything else).
    Written,
    Changed,
}

/// Said about the disk a backup goes back to; none stops a restore.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    /// The sidecar records the disk's size only.
    OlderFormat { sidecar_target: PathBuf, path: PathBuf },
    /// The disk was named otherwise when the backup was taken.
    Renamed { taken_from: PathBuf },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Notice::OlderFormat { sidecar_target, path } => write!(
                f,
                "warning: {} was made by an older blkalign: it records the disk's size only, so \
                 whether {} is that disk, and unchanged since, cannot be checked",
                sidecar_target.display(),
                path.display()
            ),
            Notice::Renamed { taken_from } => {
                write!(f, "note: the backup was taken from {}", taken_from.display())
            }
        }
    }
}

impl Backup {
    /// The backup named by either its file or its sidecar.
    pub fn open(given: &Path) -> Result<Backup, BackupError> {
        let (bin, sidecar) = read_sidecar(given)?;
        let saved = read_saved(&bin, &sidecar)?;
        Ok(Backup { bin, sidecar, saved })
    }

    /// Refuse another disk: another size or logical sector size, serial or
    /// WWN than the one the backup was taken from. `now` is the identity of
    /// `target`. A sidecar from before restore existed records only the size.
    pub fn same_disk(
        &self,
        target: &Target,
        topology: &Topology,
        now: &Identity,
    ) -> Result<Option<Notice>, BackupError> {
        let sidecar = &self.sidecar;
        let path = target.path.clone();
        let size = topology.size_bytes;
        if size != sidecar.size_bytes {
            return Err(BackupError::OtherSize {
                path,
                size,
                saved_size: sidecar.size_bytes,
                taken_from: sidecar.target.clone(),
            });
        }
        // An image has no sector size of its own; a block device's is fixed.
        let logical = topology.logical_sector_size.value;
        if target.kind == TargetKind::Disk && logical != sidecar.sector_size {
            return Err(BackupError::OtherSectorSize { path, logical, saved: sidecar.sector_size });
        }
        let Some(then) = sidecar.identity.as_ref().filter(|_| sidecar.format >= FORMAT) else {
            return Ok(Some(Notice::OlderFormat { sidecar_target: sidecar.target.clone(), path }));
        };
        let differs = |what, a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) if a != b => Some((what, b.clone(), a.clone())),
            _ => None,
        };
        if let Some((what, now, then)) = differs("serial", &then.serial, &now.serial)
            .or_else(|| differs("WWN", &then.wwid, &now.wwid))
        {
            return Err(BackupError::OtherDrive { path, what, now, then });
        }
        Ok((sidecar.target != target.path)
            .then(|| Notice::Renamed { taken_from: sidecar.target.clone() }))
    }

    /// The regions to write back to `disk` (named `path`): those still
    /// holding what `partition` wrote. Refused when any holds something
    /// else: the disk changed since.
    pub fn to_restore(&self, disk: &dyn ReadAt, path: &Path) -> Result<Vec<usize>, BackupError> {
        let now = self
            .compare(disk)
            .map_err(|source| BackupError::Read { path: path.to_path_buf(), source })?;
        let regions = &self.sidecar.regions;
        if let Some((r, _)) = regions.iter().zip(&now).find(|(_, n)| **n == Now::Changed) {
            return Err(BackupError::Changed {
                path: path.to_path_buf(),
                what: r.what.clone(),
                offset: r.offset,
            });
        }
        Ok((0..now.len()).filter(|&i| now[i] == Now::Written).collect())
    }

    /// Write regions `todo` back to `disk` (named `path`), each flushed.
    pub fn put_back(&self, disk: &File, path: &Path, todo: &[usize]) -> Result<(), BackupError> {
        for &i in todo {
            disk.write_all_at(&self.saved[i], self.sidecar.regions[i].offset)
                .and_then(|()| disk.sync_data())
                .map_err(|source| BackupError::Write { path: path.to_path_buf(), source })?;
        }
        Ok(())
    }

    /// Where each region stands. Without the hash of what was written (an
    /// old sidecar) anything but the saved bytes counts as written.
    fn compare(&self, disk: &dyn ReadAt) -> io::Result<Vec<Now>> {
        self.sidecar
            .regions
            .iter()
            .zip(&self.saved)
            .map(|(r, old)| {
                let mut buf = vec![0u8; old.len()];
                disk.read_exact_at(&mut buf, r.offset)?;
                Ok(if buf == *old {
                    Now::Restored
                } else if r.written_sha256.as_ref().is_none_or(|h| *h == sha256_hex(&buf)) {
                    Now::Written
                } else {
                    Now::Changed
                })
            })
            .collect()
    }
}

/// The backup and its sidecar, named by either.
fn read_sidecar(given: &Path) -> Result<(PathBuf, Sidecar), BackupError> {
    let bin = match given.to_str().and_then(|s| s.strip_suffix(".json")) {
        Some(stem) => PathBuf::from(stem),
        None => given.to_path_buf(),
    };
    let json = sidecar_path(&bin);
    let text = read_bounded(&json).map_err(|source| match source.kind() {
        // Whatever the file is, without its sidecar it is no backup.
        io::ErrorKind::NotFound if given.exists() => BackupError::NotABackup(bin.clone()),
        io::ErrorKind::NotFound => BackupError::Missing(given.to_path_buf()),
        _ => BackupError::Read { path: json.clone(), source },
    })?;
    let sidecar = Sidecar::parse(&text, &json)?;
    Ok((bin, sidecar))
}

fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    let mut text = Vec::new();
    File::open(path)?.take(MAX_BYTES + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_BYTES {
        return Err(io::Error::other("larger than any backup sidecar"));
    }
    Ok(text)
}

/// Every saved region from the backup file, checked against its hash.
fn read_saved(bin: &Path, sidecar: &Sidecar) -> Result<Vec<Vec<u8>>, BackupError> {
    let file =
        File::open(bin).map_err(|source| BackupError::Open { path: bin.to_path_buf(), source })?;
    let io = |source| BackupError::Io { path: bin.to_path_buf(), source };
    sidecar.check_regions(bin, file.metadata().map_err(io)?.len())?;
    sidecar
        .regions
        .iter()
        .map(|r| {
            // check_regions bounds the length by MAX_BYTES.
            let mut buf = vec![0u8; r.length as usize];
            FileExt::read_exact_at(&file, &mut buf, r.backup_offset).map_err(io)?;
            if r.saved_sha256.as_ref().is_some_and(|h| *h != sha256_hex(&buf)) {
                return Err(BackupError::Mismatch {
                    path: bin.to_path_buf(),
                    what: r.what.clone(),
                });
            }
            Ok(buf)
        })
        .collect()
}

/// The partitions of a table read back from a disk, for the kernel.
pub fn kernel_parts(layout: &Layout) -> Vec<KernelPart> {
    let ss = layout.sector_size;
    let part = |p: &Partition| {
        KernelPart::from_sectors(p.number, p.start, p.size, p.kind == PartKind::Extended, ss)
    };
    layout.partitions.iter().filter_map(part).collect()
}

/// Make the kernel see the table now on `disk` after a restore, read with
/// sector size `ss` from its `size` bytes; an error when it does not read
/// back.
pub fn tell_restored(
    root: &SysRoot,
    target: &Target,
    disk: &DirectReader,
    ss: u64,
    size: u64,
) -> Result<Told, TableError> {
    let layout = table::read(disk, ss, size)?;
    Ok(kernel::tell(root, target, disk.file(), &kernel_parts(&layout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sidecar(regions: Vec<Region>) -> Sidecar {
        let identity = Identity { size_bytes: 4096, serial: None, wwid: None };
        Sidecar {
            format: FORMAT,
            target: "disk.img".into(),
            sector_size: 512,
            size_bytes: 4096,
            identity: Some(identity),
            regions,
        }
    }

    fn region(offset: u64, backup_offset: u64, old: &[u8], new: &[u8]) -> Region {
        Region {
            what: "mbr".into(),
            offset,
            length: old.len() as u64,
            backup_offset,
            restore: String::new(),
            saved_sha256: Some(sha256_hex(old)),
            written_sha256: Some(sha256_hex(new)),
        }
    }

    fn image(path: &Path) -> Target {
        Target { path: path.into(), name: None, kind: TargetKind::Image, selected_partition: None }
    }

    #[test]
    fn a_damaged_backup_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("b.bin");
        std::fs::write(&bin, [1u8; 512]).unwrap();
        let good = sidecar(vec![region(0, 0, &[1; 512], &[2; 512])]);
        assert_eq!(read_saved(&bin, &good).unwrap(), vec![vec![1u8; 512]]);
        let past_end = sidecar(vec![region(0, 512, &[1; 512], &[2; 512])]);
        let err = read_saved(&bin, &past_end).unwrap_err();
        assert!(matches!(err, BackupError::Outside { .. }), "{err}");
        assert!(err.to_string().contains("damaged backup") && err.to_string().contains("outside"));
        let other_hash = sidecar(vec![region(0, 0, &[7; 512], &[2; 512])]);
        let err = read_saved(&bin, &other_hash).unwrap_err();
        assert!(err.to_string().ends_with("does not match its hash"), "{err}");
    }

    #[test]
    fn each_region_is_restored_written_or_changed() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk.img");
        let mut bytes = vec![1u8; 512];
        bytes.extend([2u8; 512]);
        bytes.extend([3u8; 512]);
        std::fs::write(&disk, &bytes).unwrap();
        let regions = vec![
            region(0, 0, &[1; 512], &[9; 512]),
            region(512, 512, &[8; 512], &[2; 512]),
            region(1024, 1024, &[8; 512], &[9; 512]),
        ];
        let saved = vec![vec![1u8; 512], vec![8u8; 512], vec![8u8; 512]];
        let mut backup = Backup { bin: PathBuf::new(), sidecar: sidecar(regions), saved };
        let file = File::open(&disk).unwrap();
        let now = backup.compare(&file).unwrap();
        assert_eq!(now, [Now::Restored, Now::Written, Now::Changed]);
        let err = backup.to_restore(&file, &disk).unwrap_err();
        assert!(matches!(err, BackupError::Changed { offset: 1024, .. }), "{err}");
        // Without the hash of what was written, anything not saved is written.
        backup.sidecar.regions.iter_mut().for_each(|r| r.written_sha256 = None);
        let now = backup.compare(&file).unwrap();
        assert_eq!(now, [Now::Restored, Now::Written, Now::Written]);
        assert_eq!(backup.to_restore(&file, &disk).unwrap(), [1, 2]);
    }

    #[test]
    fn the_sidecar_is_found_from_either_name() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("b.bin");
        let json = dir.path().join("b.bin.json");
        std::fs::write(&json, serde_json::to_vec(&sidecar(Vec::new())).unwrap()).unwrap();
        assert_eq!(read_sidecar(&bin).unwrap().0, bin);
        assert_eq!(read_sidecar(&json).unwrap().0, bin);
        std::fs::write(&json, b"{}").unwrap();
        let err = read_sidecar(&bin).err().unwrap();
        assert!(matches!(err, BackupError::NotASidecar { .. }), "{err}");
        assert!(err.to_string().ends_with("is not a blkalign backup sidecar"), "{err}");
    }

    /// A backup of the first two sectors of a 4 KiB image, saved and read back.
    fn saved(dir: &Path) -> (PathBuf, PathBuf, File) {
        let disk = dir.join("disk.img");
        let mut bytes = vec![5u8; 512];
        bytes.extend([6u8; 3584]);
        std::fs::write(&disk, &bytes).unwrap();
        let regions = vec![
            ToSave::new("mbr", 0, bytes[..512].to_vec(), &[9; 512]),
            ToSave::new("gpt", 512, bytes[512..1024].to_vec(), &[8; 512]),
        ];
        let identity = Identity { size_bytes: 4096, serial: Some("S1".into()), wwid: None };
        let bin = dir.join("b.bin");
        let saved = save_backup(Some(&bin), &image(&disk), 512, identity, regions).unwrap();
        assert_eq!(saved.bin, bin);
        let file = File::options().read(true).write(true).open(&disk).unwrap();
        (bin, disk, file)
    }

    #[test]
    fn a_backup_reads_back_and_restores_what_it_saved() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, disk, file) = saved(dir.path());
        check_restorable(&bin, &file).unwrap();
        let backup = Backup::open(&bin).unwrap();
        assert_eq!(backup.sidecar.format, FORMAT);
        assert_eq!(backup.sidecar.target, std::fs::canonicalize(&disk).unwrap());
        assert!(backup.sidecar.regions[1].restore.ends_with("skip=1 seek=1 count=1 conv=notrunc"));
        assert_eq!(backup.to_restore(&file, &disk).unwrap(), Vec::<usize>::new());
        // What the writer said it would write, then put back.
        file.write_all_at(&[9; 512], 0).unwrap();
        file.write_all_at(&[8; 512], 512).unwrap();
        assert!(check_restorable(&bin, &file).is_err());
        let todo = backup.to_restore(&file, &disk).unwrap();
        assert_eq!(todo, [0, 1]);
        backup.put_back(&file, &disk, &todo).unwrap();
        check_restorable(&bin, &file).unwrap();
        // Never over an existing backup.
        let again = save_backup(
            Some(&bin),
            &image(&disk),
            512,
            backup.sidecar.identity.unwrap(),
            Vec::new(),
        );
        assert!(matches!(again, Err(BackupError::Create { .. })));
    }

    #[test]
    fn the_disk_must_be_the_one_backed_up() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, disk, _) = saved(dir.path());
        let backup = Backup::open(&bin).unwrap();
        let mut topology =
            crate::open::topology(&SysRoot::real(), &image(&disk), None, &Default::default())
                .unwrap();
        let same = Identity { size_bytes: 4096, serial: Some("S1".into()), wwid: None };
        let target = image(&std::fs::canonicalize(&disk).unwrap());
        assert_eq!(backup.same_disk(&target, &topology, &same).unwrap(), None);
        let other = Identity { serial: Some("S2".into()), ..same.clone() };
        let err = backup.same_disk(&target, &topology, &other).unwrap_err();
        assert!(err.to_string().ends_with("serial S2, the backup's S1"), "{err}");
        // A serial one side does not know is no mismatch (a sidecar from a
        // version that found none on this driver, or the reverse).
        let unknown = Identity { serial: None, ..same.clone() };
        assert_eq!(backup.same_disk(&target, &topology, &unknown).unwrap(), None);
        topology.size_bytes = 8192;
        let err = backup.same_disk(&target, &topology, &same).unwrap_err();
        assert!(matches!(err, BackupError::OtherSize { size: 8192, saved_size: 4096, .. }));
    }

    #[test]
    fn newer_truncated_and_tampered_backups_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, _, file) = saved(dir.path());
        let json = sidecar_path(&bin);
        let text = std::fs::read_to_string(&json).unwrap();
        std::fs::write(&json, text.replace("\"format\": 2", "\"format\": 3")).unwrap();
        let err = Backup::open(&bin).err().unwrap();
        assert!(matches!(err, BackupError::NewerFormat { format: 3, .. }), "{err}");
        assert!(err.to_string().ends_with("made by a newer blkalign (format 3)"), "{err}");
        std::fs::write(&json, &text).unwrap();

        let data = std::fs::read(&bin).unwrap();
        std::fs::write(&bin, &data[..1000]).unwrap();
        let err = check_restorable(&bin, &file).unwrap_err();
        assert!(matches!(&err, BackupError::Outside { what, .. } if what == "gpt"), "{err}");

        let mut tampered = data.clone();
        tampered[600] ^= 1;
        std::fs::write(&bin, &tampered).unwrap();
        let err = check_restorable(&bin, &file).unwrap_err();
        assert!(matches!(&err, BackupError::Mismatch { what, .. } if what == "gpt"), "{err}");

        std::fs::write(&bin, &data).unwrap();
        std::fs::write(&json, &text[..text.len() / 2]).unwrap();
        let err = check_restorable(&bin, &file).unwrap_err();
        assert!(matches!(err, BackupError::NotASidecar { .. }), "{err}");
    }
}
