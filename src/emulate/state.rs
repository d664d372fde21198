//! The record of each drive: `STATE/ID.json` plus a working directory
//! `STATE/ID/` holding the socket, pidfiles, logs and the FUSE mount.

use super::{EmulateError, EmulatedGeometry, LbaRange, Spec};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

const DEFAULT_STATE_DIR: &str = "/run/blkalign/emulate";

/// Where records live: `$BLKALIGN_EMULATE_DIR` (for isolated tests) or
/// /run/blkalign/emulate, which a reboot empties along with the drives.
pub fn state_dir() -> PathBuf {
    std::env::var_os("BLKALIGN_EMULATE_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_STATE_DIR), PathBuf::from)
}

/// One emulated drive. Fields past `fail_lba` are filled in as the stack
/// comes up and saved at each step, so a half-started drive can be stopped.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EmulatedDrive {
    pub id: String,
    pub preset: String,
    pub geometry: EmulatedGeometry,
    /// Bytes the host sees.
    pub size: u64,
    pub file: Option<PathBuf>,
    pub volatile_cache: bool,
    pub fail_lba: Option<LbaRange>,
    /// The failing sectors are pending ones: a write remaps them.
    #[serde(default)]
    pub until_written: bool,
    /// The drive's working directory: always [`state_dir`]/ID, whatever
    /// the record on disk says (see [`load`]).
    pub dir: PathBuf,
    pub nbdkit_command: Vec<String>,
    pub nbdkit_pid: Option<i32>,
    pub nbdfuse_pid: Option<i32>,
    pub device: Option<PathBuf>,
    /// What the kernel says the loop device's physical sector size is.
    pub reported_physical_sector_size: Option<u32>,
}

impl EmulatedDrive {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("nbd.sock")
    }

    pub(crate) fn mount_dir(&self) -> PathBuf {
        self.dir.join("mnt")
    }

    /// The file nbdfuse serves and the loop device is attached to.
    pub(crate) fn fuse_file(&self) -> PathBuf {
        self.mount_dir().join("disk")
    }

    /// The platter when it is neither in memory nor in the user's file.
    /// The pending sectors written since the drive started (platter byte
    /// offsets, one a line), which read again.
    pub(crate) fn remapped_file(&self) -> PathBuf {
        self.dir.join("remapped")
    }

    pub(crate) fn scratch_file(&self) -> PathBuf {
        self.dir.join("platter.img")
    }

    /// STATE/ID.json, derived from the id rather than from `dir`.
    fn record(&self) -> PathBuf {
        record_path(&state_dir(), &self.id)
    }

    /// Writes the record atomically: readers never see half of it.
    pub fn save(&self) -> Result<(), EmulateError> {
        let path = self.record();
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self)
            .map_err(|source| EmulateError::Record { path: path.clone(), source })?;
        fs::write(&tmp, text).map_err(EmulateError::io(format!("writing {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(EmulateError::io(format!("writing {}", path.display())))
    }

    /// Deletes the working directory, then the record. Both paths come from
    /// the state directory and the id, never from the record's `dir`.
    pub(crate) fn forget(&self) -> Result<(), EmulateError> {
        remove(&work_dir(&state_dir(), &self.id), |p| fs::remove_dir_all(p))?;
        remove(&self.record(), |p| fs::remove_file(p))
    }
}

/// Removes `path` with `how`; already gone is fine.
pub fn remove(path: &Path, how: fn(&Path) -> std::io::Result<()>) -> Result<(), EmulateError> {
    match how(path) {
        Err(err) if err.kind() != ErrorKind::NotFound => {
            Err(EmulateError::io(format!("removing {}", path.display()))(err))
        }
        _ => Ok(()),
    }
}

fn record_path(root: &Path, id: &str) -> PathBuf {
    root.join(format!("{id}.json"))
}

fn work_dir(root: &Path, id: &str) -> PathBuf {
    root.join(id)
}

/// Claims a fresh id (creating its record is the lock, so concurrent
/// starts never share one) and saves the first record.
pub fn create(spec: &Spec, size: u64) -> Result<EmulatedDrive, EmulateError> {
    let root = state_dir();
    fs::create_dir_all(&root).map_err(EmulateError::io(format!("creating {}", root.display())))?;
    let base = format!("emu{}", std::process::id());
    let id = (0..)
        .map(|n| if n == 0 { base.clone() } else { format!("{base}-{n}") })
        .find_map(|id| claim(&root, &id).transpose())
        .unwrap_or_else(|| unreachable!("ids are endless"))?;
    let drive = EmulatedDrive {
        dir: work_dir(&root, &id),
        id,
        preset: spec.preset.clone(),
        geometry: spec.geometry,
        size,
        file: spec.file.clone(),
        volatile_cache: spec.volatile_cache,
        fail_lba: spec.fail_lba,
        until_written: spec.until_written,
        nbdkit_command: Vec::new(),
        nbdkit_pid: None,
        nbdfuse_pid: None,
        device: None,
        reported_physical_sector_size: None,
    };
    drive.save()?;
    Ok(drive)
}

/// Some(id) when the record was created, None when the id is taken.
fn claim(root: &Path, id: &str) -> Result<Option<String>, EmulateError> {
    let path = record_path(root, id);
    match fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(_) => Ok(Some(id.to_string())),
        Err(err) if err.kind() == ErrorKind::AlreadyExists => Ok(None),
        Err(err) => Err(EmulateError::io(format!("creating {}", path.display()))(err)),
    }
}

/// The drive recorded as `id`. Its id and working directory are those of
/// the record's name, not what the file says: a stop removes that
/// directory, so a tampered or stale `dir` must not point anywhere else.
pub fn load(id: &str) -> Result<EmulatedDrive, EmulateError> {
    load_in(&state_dir(), id)
}

fn load_in(root: &Path, id: &str) -> Result<EmulatedDrive, EmulateError> {
    if id.is_empty() || id.contains(['/', '.']) {
        return Err(EmulateError::NoSuchDrive(id.to_string()));
    }
    let path = record_path(root, id);
    let text = match fs::read_to_string(&path) {
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(EmulateError::NoSuchDrive(id.to_string()))
        }
        other => other.map_err(EmulateError::io(format!("reading {}", path.display())))?,
    };
    let drive: EmulatedDrive =
        serde_json::from_str(&text).map_err(|source| EmulateError::Record { path, source })?;
    Ok(EmulatedDrive { id: id.to_string(), dir: work_dir(root, id), ..drive })
}

/// Every recorded drive, by id. Records being written right now (empty)
/// are skipped.
pub fn list() -> Result<Vec<EmulatedDrive>, EmulateError> {
    Ok(ids()?.iter().filter_map(|id| load(id).ok()).collect())
}

/// Ids of all records, readable or not, sorted.
pub fn ids() -> Result<Vec<String>, EmulateError> {
    let root = state_dir();
    let entries = match fs::read_dir(&root) {
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.map_err(EmulateError::io(format!("reading {}", root.display())))?,
    };
    let mut ids: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".json").map(str::to_string))
        .collect();
    ids.sort();
    Ok(ids)
}

/// Working directories whose record is gone (a crash between the two).
pub(crate) fn orphan_dirs() -> Vec<PathBuf> {
    let root = state_dir();
    let Ok(entries) = fs::read_dir(&root) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir() && !path.with_extension("json").exists())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_cannot_redirect_its_directory_or_id() {
        let root = tempfile::tempdir().unwrap();
        let record = serde_json::json!({
            "id": "../victim", "preset": "wd-ears",
            "geometry": {"logical": 512, "physical": 4096, "alignment_offset": 0, "latency_ms": 1},
            "size": 16777216, "file": null, "volatile_cache": false, "fail_lba": null,
            "dir": "/etc", "nbdkit_command": [], "nbdkit_pid": null, "nbdfuse_pid": null,
            "device": null, "reported_physical_sector_size": null,
        });
        fs::write(root.path().join("emu7.json"), record.to_string()).unwrap();
        let drive = load_in(root.path(), "emu7").unwrap();
        assert_eq!(drive.id, "emu7");
        assert_eq!(drive.dir, root.path().join("emu7"));
        assert!(matches!(load_in(root.path(), "../emu7"), Err(EmulateError::NoSuchDrive(_))));
    }
}
