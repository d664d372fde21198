//! Records of unfinished moves, kept apart from the journals so that
//! `audit` and a later `realign` find a move whatever the target is called
//! by then: a record names its journal, and the journal's identity decides
//! whether it applies to a disk.

use super::journal::{Journal, JournalError};
use super::{Identity, Move};
use crate::io::ReadAt;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Where records and default journals live: $BLKALIGN_STATE_DIR, else
/// /var/lib/blkalign. A value, not a global, so that a library caller (or
/// a test) can keep its moves apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    base: PathBuf,
}

impl Default for Store {
    fn default() -> Store {
        let base = std::env::var_os("BLKALIGN_STATE_DIR")
            .map_or_else(|| "/var/lib/blkalign".into(), PathBuf::from);
        Store { base }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub journal: PathBuf,
    /// The target as named when the move began (information only).
    pub target: PathBuf,
    pub partition: u32,
}

impl Store {
    pub fn new(base: PathBuf) -> Store {
        Store { base }
    }

    /// Where records live.
    pub fn dir(&self) -> PathBuf {
        self.base.join("realign")
    }

    /// The plan of a move scheduled for the next boot (`realign --at-boot`).
    pub fn boot_plan(&self) -> PathBuf {
        self.base.join("at-boot.json")
    }

    /// The plan of the last move made at boot, once finished.
    pub fn last_boot_plan(&self) -> PathBuf {
        self.base.join("at-boot.last.json")
    }

    /// Where journals of block devices go unless --journal says otherwise.
    pub fn journal_dir(&self) -> PathBuf {
        self.base.join("journals")
    }

    /// The record file for a journal: one per journal, named by a hash of its
    /// absolute path.
    fn record_path(&self, journal: &Path) -> PathBuf {
        let key = crc32fast::hash(journal.as_os_str().as_encoded_bytes());
        self.dir().join(format!("{key:08x}.json"))
    }

    /// Note that the move in `journal` (an absolute path) is under way.
    pub fn add(&self, journal: &Path, m: &Move) -> std::io::Result<()> {
        fs::create_dir_all(self.dir())?;
        let record = Record {
            journal: journal.to_path_buf(),
            target: m.target.clone(),
            partition: m.partition,
        };
        let path = self.record_path(journal);
        let tmp = path.with_extension("tmp");
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(&record)?)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        crate::device::exclusive::sync_parent(&path)
    }

    /// Forget the record of a finished move.
    pub fn remove(&self, journal: &Path) -> std::io::Result<()> {
        match fs::remove_file(self.record_path(journal)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Delete the journal at `path` (and any record naming it) if its move is
    /// done: copied, verified, the table written, so it holds nothing a rerun
    /// needs. Returns the journal as it was when removed, None when the move
    /// is unfinished (then nothing is touched).
    pub fn remove_finished(&self, path: &Path) -> Result<Option<Journal>, JournalError> {
        let journal = Journal::open(path)?;
        if !journal.state.phase.finished() {
            return Ok(None);
        }
        let err = |source| JournalError::Io { path: path.to_path_buf(), source };
        let absolute = fs::canonicalize(path).map_err(err)?;
        self.remove(&absolute).map_err(err)?;
        fs::remove_file(path).map_err(err)?;
        crate::device::exclusive::sync_parent(path).map_err(err)?;
        Ok(Some(journal))
    }

    /// The journals in the journal directory and at `others` (each path
    /// once, sorted); files that are not journals are left out.
    pub fn journals(&self, others: impl IntoIterator<Item = PathBuf>) -> Vec<Journal> {
        let listed = fs::read_dir(self.journal_dir()).into_iter().flatten().flatten();
        let mut paths: Vec<PathBuf> = listed
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "journal"))
            .chain(others)
            .collect();
        paths.sort();
        paths.dedup();
        paths.iter().filter_map(|p| Journal::open(p).ok()).collect()
    }

    /// Every record whose journal exists and is not done.
    pub fn unfinished(&self) -> Vec<(Record, Journal)> {
        let Ok(entries) = fs::read_dir(self.dir()) else { return Vec::new() };
        let mut out: Vec<(Record, Journal)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice::<Record>(&fs::read(e.path()).ok()?).ok())
            .filter_map(|r| {
                let j = Journal::open(&r.journal).ok()?;
                (!j.state.phase.finished()).then_some((r, j))
            })
            .collect();
        out.sort_by(|a, b| a.0.journal.cmp(&b.0.journal));
        out
    }

    /// The unfinished move that applies to this disk, if any.
    pub(crate) fn unfinished_on(
        &self,
        dev: &dyn ReadAt,
        id: &Identity,
    ) -> Option<(Record, Journal)> {
        self.unfinished().into_iter().find(|(_, j)| applies(&j.record, dev, id))
    }
}

/// Whether the move in `m` was made on this disk: same size (and serial
/// and WWN where both sides know them), and each table region it writes
/// still holds the old or the new bytes of one of its writes there (an
/// EBR moved before the copy is written twice).
pub fn applies(m: &Move, dev: &dyn ReadAt, id: &Identity) -> bool {
    let same = |a: &Option<String>, b: &Option<String>| a.is_none() || b.is_none() || a == b;
    if m.identity.size_bytes != id.size_bytes
        || !same(&m.identity.serial, &id.serial)
        || !same(&m.identity.wwid, &id.wwid)
    {
        return false;
    }
    let inside = m.new_start * m.sector_size..(m.new_start + m.sectors) * m.sector_size;
    let writes: Vec<_> =
        m.before.iter().chain(&m.writes).filter(|w| !inside.contains(&w.offset)).collect();
    writes.iter().all(|w| {
        let mut now = vec![0u8; w.old.len()];
        let here = |v: &&&super::Write| v.offset == w.offset && v.old.len() == w.old.len();
        dev.read_exact_at(&mut now, w.offset).is_ok()
            && writes.iter().filter(here).any(|v| now == v.old || now == v.new)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::journal::Phase;
    use crate::realign::tests::sample_move;

    #[test]
    fn only_a_finished_journal_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::create(&path, sample_move()).unwrap();
        assert!(Store::new(dir.path().into()).remove_finished(&path).unwrap().is_none());
        assert!(path.exists(), "an unfinished move keeps its journal");
        j.checksums = vec![0; j.record.chunks() as usize];
        j.commit(Phase::Done, j.record.chunks(), &[]).unwrap();
        assert!(Store::new(dir.path().into()).remove_finished(&path).unwrap().is_some());
        assert!(!path.exists());
    }

    #[test]
    fn a_move_applies_to_its_disk_only() {
        let m = sample_move();
        let id = m.identity.clone();
        let mut disk = vec![0u8; 4096];
        disk[1] = 0xAB;
        assert!(applies(&m, &disk, &id), "old bytes");
        disk[..2].copy_from_slice(&[1, 2]);
        assert!(applies(&m, &disk, &id), "new bytes");
        disk[0] = 7;
        assert!(!applies(&m, &disk, &id), "neither");
        disk[..2].copy_from_slice(&[1, 2]);
        let other = Identity { size_bytes: 1, ..id.clone() };
        assert!(!applies(&m, &disk, &other));
        let serial = Identity { serial: Some("B".into()), ..id.clone() };
        // A journal from a version that found no serial here still applies.
        let old = Move { identity: Identity { serial: None, ..id.clone() }, ..m.clone() };
        assert!(applies(&old, &disk, &serial), "a missing serial is unknown");
        let m2 = Move { identity: Identity { serial: Some("A".into()), ..id }, ..m };
        assert!(!applies(&m2, &disk, &serial));
    }
}
