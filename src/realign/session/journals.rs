//! Where a target's journals are: the default place of each partition's,
//! and the unfinished move a run resumes.

use super::error::{MoveRefusal, SessionError};
use super::open::Session;
use super::options::MoveOptions;
use crate::device::TargetKind;
use crate::realign::journal::{Journal, Phase};
use crate::realign::state;
use std::path::{Path, PathBuf};

impl Session {
    /// The unfinished move on this target: the one in `journal`, or the
    /// one a state record points at whose identity matches.
    pub fn unfinished(&self, journal: Option<&Path>) -> Result<Option<Journal>, SessionError> {
        if let Some(path) = journal.filter(|p| p.exists()) {
            let j = Journal::open(path)?;
            if j.state.phase.finished() {
                return Ok(None);
            }
            if !state::applies(&j.record, &self.reader, &self.identity) {
                let (journal, target) = (path.to_path_buf(), self.target.path.clone());
                return Err(MoveRefusal::OtherDisk { journal, target }.into());
            }
            return Ok(Some(j));
        }
        if let Some((_, j)) = self.store.unfinished_on(&self.reader, &self.identity) {
            return Ok(Some(j));
        }
        // A kill between creating the journal and recording it leaves a
        // journal at its default place with no record pointing at it.
        Ok(self.default_journals().into_iter().find_map(|path| {
            let j = Journal::open(&path).ok()?;
            let applies = state::applies(&j.record, &self.reader, &self.identity);
            (!j.state.phase.finished() && applies).then_some(j)
        }))
    }

    /// The move last undone on this target, when its journal is the newest
    /// of the target's: what a rerun of `--undo` meets once the undo has
    /// finished (or crashed at its very end).
    pub fn last_undone(&self, journal: Option<&Path>) -> Option<Journal> {
        let modified = |j: &Journal| std::fs::metadata(j.path()).and_then(|m| m.modified()).ok();
        let newest = self.journals(journal).into_iter().max_by_key(modified)?;
        (newest.state.phase == Phase::Undone).then_some(newest)
    }

    /// The journals of moves on this target, with `explicit` (if a
    /// journal): at its partitions' default places, or in the journal
    /// directory recording a move on this disk; never another disk's.
    pub fn journals(&self, explicit: Option<&Path>) -> Vec<Journal> {
        let mine = self.default_journals();
        let explicit: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
        let ours = |j: &Journal| {
            let at = j.path();
            mine.iter().chain(&explicit).any(|p| p == at)
                || state::applies(&j.record, &self.reader, &self.identity)
        };
        let listed = self.store.journals(mine.iter().chain(&explicit).cloned());
        listed.into_iter().filter(ours).collect()
    }

    /// Journals at the default places of this target's partitions.
    fn default_journals(&self) -> Vec<PathBuf> {
        let pattern = self.default_journal(0);
        let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
            return Vec::new();
        };
        let name = name.to_string_lossy();
        let (prefix, suffix) = name.split_once("-p0").unwrap_or((&name, ""));
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix("-p"))
                    .and_then(|rest| rest.strip_suffix(suffix))
                    .is_some_and(|num| num.parse::<u32>().is_ok())
            })
            .map(|n| pattern.with_file_name(n))
            .collect()
    }

    pub(super) fn journal_path(&self, opts: &MoveOptions, n: u32) -> PathBuf {
        opts.journal.clone().unwrap_or_else(|| self.default_journal(n))
    }

    /// A block device's journal is named by the kernel name, a
    /// device-mapper device's by its mapper name (dm-N is renumbered at
    /// boot; the journal must be found under the name the rerun uses).
    fn default_journal(&self, n: u32) -> PathBuf {
        let mapper = self.target.path.file_name().filter(|_| self.target.is_mapper());
        match (&self.target.kind, &self.target.name) {
            (TargetKind::Disk, Some(name)) => {
                let name = mapper.map_or(name.clone(), |m| m.to_string_lossy().into_owned());
                self.store.journal_dir().join(format!("{name}-p{n}.journal"))
            }
            _ => {
                let mut p = self.target.path.as_os_str().to_owned();
                p.push(format!(".blkalign-p{n}.journal"));
                PathBuf::from(p)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Target;
    use crate::realign::prepare::prepare;
    use crate::realign::session::lab::{assert_moved, lab, opts, Lab, Log};

    /// A device-mapper device's journal goes by its mapper name, which a
    /// reboot keeps, not by dm-N, which it renumbers.
    #[test]
    fn a_device_mapper_journal_is_named_by_its_mapper_name() {
        let mut lab = lab();
        let name = |lab: &Lab| lab.session.default_journal(2).file_name().map(|n| n.to_owned());
        lab.session.target = Target {
            path: PathBuf::from("/dev/mapper/vg-lv"),
            name: Some("dm-7".into()),
            kind: TargetKind::Disk,
            selected_partition: None,
        };
        assert_eq!(name(&lab).as_deref(), Some("vg-lv-p2.journal".as_ref()));
        lab.session.target.path = PathBuf::from("/dev/sdb");
        lab.session.target.name = Some("sdb".into());
        assert_eq!(name(&lab).as_deref(), Some("sdb-p2.journal".as_ref()));
    }

    /// The two crash windows of "record, then journal": a record whose
    /// journal was never made is ignored; a journal at its default place
    /// whose record was lost is still found.
    #[test]
    fn both_sides_of_the_record_journal_ordering_are_safe() {
        let lab = lab();
        let placement = lab.session.place_all(&opts(), &[1]).unwrap().remove(0).unwrap();
        let layout = lab.session.layout().unwrap();
        let identity = lab.session.identity.clone();
        let reader = lab.mem.clone();
        let path = lab.dir.path().join("disk.img");
        let prepared =
            prepare(&reader, &path, &layout, &placement, identity, opts().chunk_bytes).unwrap();
        let journal = lab.session.default_journal(1);
        lab.session.store.add(&journal, &prepared.record).unwrap();
        assert!(lab.session.unfinished(None).unwrap().is_none(), "a record with no journal");
        lab.session.store.remove(&journal).unwrap();
        Journal::create(&journal, prepared.record.clone()).unwrap();
        let found = lab.session.unfinished(None).unwrap().expect("a journal with no record");
        assert_eq!(found.path(), journal);
        lab.session.finish(found, false, &mut Log::default()).unwrap();
        assert_moved(&lab);
    }
}
