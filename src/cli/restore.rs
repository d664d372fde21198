//! `blkalign restore`: put back the sectors `partition` saved before it
//! wrote a table, on the disk they came from. Dry run unless --yes.

use super::partition::{kernel_parts, tell_kernel};
use super::EXIT_OK;
use anyhow::{bail, Context};
use blkalign::device::exclusive;
use blkalign::device::{self, SysRoot, Target, TargetKind, Topology};
use blkalign::realign::{guard, Identity};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign restore ./blkalign-backup-sdb-1763800000.bin    # what goes back
  blkalign restore ./blkalign-backup-sdb-1763800000.bin --yes
  blkalign restore ./blkalign-backup-sdb-1763800000.bin /dev/sdc --yes # renamed

The disk's size, sector size, serial and WWN must match the backup's, and
the sectors must still hold what `partition` wrote.")]
pub struct Args {
    /// The backup file `partition` saved (its .json sidecar sits beside it).
    backup: PathBuf,

    /// The disk or image to restore to, when its name changed since (a
    /// disk renamed at boot); by default the one the sidecar names.
    target: Option<PathBuf>,

    /// Write. Without it, only what would be put back is printed.
    #[arg(long)]
    yes: bool,
}

/// The sidecar format that records the disk's identity and hashes.
pub const FORMAT: u32 = 2;

/// Far above any table's sectors (a GPT's arrays are 16 KiB); a sidecar
/// or region claiming more is not one `partition` wrote.
const MAX_BYTES: u64 = 64 << 20;

/// The sidecar of a backup: where each saved region goes back, on which
/// disk, and what `partition` wrote over it.
#[derive(Serialize, Deserialize)]
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

#[derive(Serialize, Deserialize)]
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

/// A region a writer is about to overwrite: the bytes there now, and the
/// SHA-256 of what it will write.
pub struct ToSave {
    pub what: String,
    pub offset: u64,
    pub old: Vec<u8>,
    pub written_sha256: String,
}

/// Save `regions` of `target` (sector size `ss`): the old bytes back to
/// back and a JSON sidecar naming their offsets, both flushed with the
/// directory holding them, before anything on the target changes. Never
/// overwrites; by default ./blkalign-backup-NAME-UNIXTIME.bin, with .N
/// added while taken. Says where it went and how to undo.
pub fn save_backup(
    chosen: Option<&Path>,
    target: &Target,
    ss: u64,
    identity: Identity,
    regions: Vec<ToSave>,
) -> anyhow::Result<PathBuf> {
    let (path, mut file) = match chosen {
        Some(path) => (path.to_path_buf(), create_new(path)?),
        None => (0..100)
            .map(|n| default_backup(target, n))
            .find_map(|p| create_new(&p).ok().map(|f| (p, f)))
            .context("cannot create a backup file in the current directory")?,
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
    let mut sidecar_path = path.as_os_str().to_owned();
    sidecar_path.push(".json");
    let mut json = create_new(Path::new(&sidecar_path))?;
    for (f, bytes) in [(&mut file, data), (&mut json, serde_json::to_vec_pretty(&sidecar)?)] {
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    // The sidecar sits beside the backup: one directory flush covers both.
    exclusive::sync_parent(&path).context("flushing the backup's directory")?;
    eprintln!(
        "saved the sectors to be overwritten to {} (restore: blkalign restore {})",
        path.display(),
        path.display()
    );
    Ok(path)
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

fn create_new(path: &Path) -> anyhow::Result<File> {
    let file = File::options().write(true).create_new(true).open(path);
    file.with_context(|| format!("creating backup {}", path.display()))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a region stands on the disk now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Now {
    /// Already holds the saved bytes.
    Restored,
    /// Holds what `partition` wrote (or, for an old sidecar, anything else).
    Written,
    Changed,
}

pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let (bin, sidecar) = read_sidecar(&args.backup)?;
    let saved = read_saved(&bin, &sidecar)?;
    let target = device::resolve(&root, args.target.as_deref().unwrap_or(&sidecar.target))?;
    if let Some(n) = target.selected_partition {
        bail!("{} is partition {n}; name the whole disk", target.path.display());
    }
    let file = if args.yes {
        exclusive::check_unused(&root, &target)?;
        exclusive::open_for_writing(&target)?
    } else {
        device::open(&target)?
    };
    let topology = device::topology(&root, &target, Some(&file), &Default::default())?;
    same_disk(&root, &target, &topology, &sidecar)?;
    let todo = to_restore(&file, &target, &sidecar, &saved)?;
    let path = target.path.display();
    if todo.is_empty() {
        eprintln!("{path} already holds every sector of the backup: nothing to do");
        return Ok(EXIT_OK);
    }
    for &i in &todo {
        let r = &sidecar.regions[i];
        let verb = if args.yes { "putting back" } else { "would put back" };
        eprintln!("{verb} {} bytes at byte {} ({})", r.length, r.offset, r.what);
    }
    if !args.yes {
        eprintln!("dry run: nothing written; add --yes to restore");
        return Ok(EXIT_OK);
    }
    for &i in &todo {
        file.write_all_at(&saved[i], sidecar.regions[i].offset)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("writing {path}"))?;
    }
    if target.kind == TargetKind::Disk {
        tell_kernel_restored(&root, &target, &file, sidecar.sector_size, topology.size_bytes);
    }
    eprintln!("restored {} regions of {} from {}", todo.len(), path, bin.display());
    Ok(EXIT_OK)
}

/// Make the kernel see the table now on the disk.
fn tell_kernel_restored(root: &SysRoot, target: &Target, file: &File, ss: u64, size: u64) {
    match blkalign::table::read(file, ss, size) {
        Ok(layout) => tell_kernel(root, target, file, &kernel_parts(&layout)),
        Err(e) => eprintln!(
            "warning: the restored table does not read back ({e}); run `partprobe {}`",
            target.path.display()
        ),
    }
}

/// The backup and its sidecar, named by either.
fn read_sidecar(given: &Path) -> anyhow::Result<(PathBuf, Sidecar)> {
    let bin = match given.to_str().and_then(|s| s.strip_suffix(".json")) {
        Some(stem) => PathBuf::from(stem),
        None => given.to_path_buf(),
    };
    let mut json = bin.clone().into_os_string();
    json.push(".json");
    let json = PathBuf::from(json);
    let text = read_bounded(&json).with_context(|| format!("reading {}", json.display()))?;
    let sidecar: Sidecar = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a blkalign backup sidecar", json.display()))?;
    if sidecar.format > FORMAT {
        bail!("{}: made by a newer blkalign (format {})", json.display(), sidecar.format);
    }
    Ok((bin, sidecar))
}

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut text = Vec::new();
    File::open(path)?.take(MAX_BYTES + 1).read_to_end(&mut text)?;
    if text.len() as u64 > MAX_BYTES {
        return Err(std::io::Error::other("larger than any backup sidecar"));
    }
    Ok(text)
}

/// Every saved region from the backup file, checked against its hash.
fn read_saved(bin: &Path, sidecar: &Sidecar) -> anyhow::Result<Vec<Vec<u8>>> {
    let file = File::open(bin).with_context(|| format!("opening {}", bin.display()))?;
    let len = file.metadata()?.len();
    let damaged = |why: String| anyhow::anyhow!("{}: damaged backup: {why}", bin.display());
    sidecar
        .regions
        .iter()
        .map(|r| {
            let end = r.backup_offset.checked_add(r.length);
            let fits = end.is_some_and(|end| end <= len) && r.length <= MAX_BYTES;
            if !fits || r.length % sidecar.sector_size.max(1) != 0 {
                return Err(damaged(format!("the {} region lies outside it", r.what)));
            }
            let mut buf = vec![0u8; usize::try_from(r.length)?];
            file.read_exact_at(&mut buf, r.backup_offset)?;
            if r.saved_sha256.as_ref().is_some_and(|h| *h != sha256_hex(&buf)) {
                return Err(damaged(format!("the {} region does not match its hash", r.what)));
            }
            Ok(buf)
        })
        .collect()
}

/// Refuse another disk: another size or logical sector size, serial or
/// WWN. A sidecar from before restore existed records only the size.
fn same_disk(
    root: &SysRoot,
    target: &Target,
    topology: &Topology,
    sidecar: &Sidecar,
) -> anyhow::Result<()> {
    let path = target.path.display();
    let size = topology.size_bytes;
    if size != sidecar.size_bytes {
        bail!(
            "{path} is not the disk the backup was taken from: {size} bytes, the backup's \
             {} bytes ({})",
            sidecar.size_bytes,
            sidecar.target.display()
        );
    }
    // An image has no sector size of its own; a block device's is fixed.
    let logical = topology.logical_sector_size.value;
    if target.kind == TargetKind::Disk && logical != sidecar.sector_size {
        bail!(
            "{path} has {logical}-byte sectors; the backup was taken from one with {}",
            sidecar.sector_size
        );
    }
    let Some(then) = sidecar.identity.as_ref().filter(|_| sidecar.format >= FORMAT) else {
        eprintln!(
            "warning: {} was made by an older blkalign: it records the disk's size only, so \
             whether {path} is that disk, and unchanged since, cannot be checked",
            sidecar.target.display()
        );
        return Ok(());
    };
    let now = guard::identity(root, target, topology);
    let differs = |what: &str, a: &Option<String>, b: &Option<String>| match (a, b) {
        (Some(a), Some(b)) if a != b => Some(format!("{what} {b}, the backup's {a}")),
        _ => None,
    };
    if let Some(why) = differs("serial", &then.serial, &now.serial)
        .or_else(|| differs("WWN", &then.wwid, &now.wwid))
    {
        bail!("{path} is not the disk the backup was taken from: {why}");
    }
    if sidecar.target != target.path {
        eprintln!("note: the backup was taken from {}", sidecar.target.display());
    }
    Ok(())
}

/// The regions to write back: those still holding what `partition` wrote.
/// Refused when any holds something else: the disk changed since.
fn to_restore(
    file: &File,
    target: &Target,
    sidecar: &Sidecar,
    saved: &[Vec<u8>],
) -> anyhow::Result<Vec<usize>> {
    let path = target.path.display();
    let now = compare(file, sidecar, saved).with_context(|| format!("reading {path}"))?;
    if let Some((r, _)) = sidecar.regions.iter().zip(&now).find(|(_, n)| **n == Now::Changed) {
        bail!(
            "{path} changed since the backup was taken: the {} at byte {} holds neither what \
             `partition` wrote nor the saved bytes; refusing to restore over it",
            r.what,
            r.offset
        );
    }
    Ok((0..now.len()).filter(|&i| now[i] == Now::Written).collect())
}

/// Where each region stands. Without the hash of what was written (an
/// old sidecar) anything but the saved bytes counts as written.
fn compare(file: &File, sidecar: &Sidecar, saved: &[Vec<u8>]) -> std::io::Result<Vec<Now>> {
    sidecar
        .regions
        .iter()
        .zip(saved)
        .map(|(r, old)| {
            let mut buf = vec![0u8; old.len()];
            file.read_exact_at(&mut buf, r.offset)?;
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

    #[test]
    fn a_damaged_backup_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("b.bin");
        std::fs::write(&bin, [1u8; 512]).unwrap();
        let good = sidecar(vec![region(0, 0, &[1; 512], &[2; 512])]);
        assert_eq!(read_saved(&bin, &good).unwrap(), vec![vec![1u8; 512]]);
        let past_end = sidecar(vec![region(0, 512, &[1; 512], &[2; 512])]);
        let err = read_saved(&bin, &past_end).unwrap_err().to_string();
        assert!(err.contains("damaged backup") && err.contains("outside"), "{err}");
        let other_hash = sidecar(vec![region(0, 0, &[7; 512], &[2; 512])]);
        let err = read_saved(&bin, &other_hash).unwrap_err().to_string();
        assert!(err.contains("does not match its hash"), "{err}");
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
        let mut old = sidecar(regions);
        let file = File::open(&disk).unwrap();
        let now = compare(&file, &old, &saved).unwrap();
        assert!(now == [Now::Restored, Now::Written, Now::Changed]);
        // Without the hash of what was written, anything not saved is written.
        old.regions.iter_mut().for_each(|r| r.written_sha256 = None);
        let now = compare(&file, &old, &saved).unwrap();
        assert!(now == [Now::Restored, Now::Written, Now::Written]);
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
        let err = format!("{:#}", read_sidecar(&bin).err().unwrap());
        assert!(err.contains("not a blkalign backup sidecar"), "{err}");
    }
}
