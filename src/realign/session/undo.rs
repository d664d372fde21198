//! `--undo`: a stopped move taken back under its own journal, then the
//! first journal marked undone and its record forgotten.

use super::error::{io_error, GoneDisk, MoveRefusal, SessionError, Stop, WayOn};
use super::events::{Events, Outcome};
use super::host::hold;
use super::open::Session;
use super::status::Status;
use crate::realign::copy::{self, MoveError};
use crate::realign::journal::Journal;
use crate::realign::journal::Phase;
use crate::realign::undo::{self, BeginError};
use crate::realign::Move;
use std::cell::RefCell;
use std::path::Path;

impl Session {
    /// Move back what the unfinished move in `forward` has moved, so the
    /// partition is as it was before it: its own journaled move (resumed
    /// where an earlier undo stopped), then the first journal marked
    /// undone and its record forgotten. A journal already marked undone
    /// (a rerun after a crash at the end) only has its record forgotten
    /// and its saved chunks scrubbed.
    pub fn undo(
        &self,
        mut forward: Journal,
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        let undo_path = undo::path(forward.path());
        if forward.state.phase != Phase::Undone {
            if let Some(stop) = self.move_back(&forward, &undo_path, events)? {
                return Ok(stop);
            }
            let cursor = forward.state.cursor;
            forward.commit(Phase::Undone, cursor, &[])?;
        }
        let absolute = std::fs::canonicalize(forward.path())
            .map_err(io_error(format!("finding {}", forward.path().display())))?;
        self.store.remove(&absolute).map_err(io_error("removing the move's state record"))?;
        if let Err(e) = forward.scrub() {
            events.unscrubbed(forward.path(), &e);
        }
        if let Err(e) = Journal::open(&undo_path).and_then(|mut back| back.scrub()) {
            if undo_path.exists() {
                events.unscrubbed(&undo_path, &e);
            }
        }
        match std::fs::remove_file(&undo_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                events.note(&format!("warning: removing {}: {e}", undo_path.display()));
            }
            _ => {}
        }
        events.undone(&Status::of(&forward));
        Ok(Outcome::Finished)
    }

    /// The undo's own journaled move, begun or resumed; Some when it
    /// stopped on a request.
    fn move_back(
        &self,
        forward: &Journal,
        undo_path: &Path,
        events: &mut dyn Events,
    ) -> Result<Option<Outcome>, SessionError> {
        let writer = hold(&*self.host, &[forward.record.partition])?;
        let back = if undo_path.exists() {
            Some(Journal::open(undo_path)?)
        } else {
            undo::begin(forward, &*writer).map_err(|e| match e {
                BeginError::Undo(e) => MoveRefusal::Undo(e).into(),
                BeginError::Journal(e) => SessionError::Journal(e),
                BeginError::Io { lba, source } => SessionError::Move {
                    source: MoveError::Io { what: "writing", lba, source },
                    journal: forward.path().to_path_buf(),
                    way_on: self.undo_way_on(&forward.record),
                },
            })?
        };
        if let Some(mut back) = back {
            if back.state.sequence > 1 {
                events.note(&format!(
                    "resuming the undo at {} of {} chunks",
                    back.state.cursor,
                    back.record.chunks()
                ));
            }
            events.started(2 * back.record.bytes());
            let result = {
                let shared = RefCell::new(&mut *events);
                let stop = || shared.borrow().stop_requested();
                let mut tick = |n| shared.borrow_mut().progress(n);
                copy::run_until(&*writer, &mut back, &mut tick, &stop, None, None)
            };
            events.stopped();
            match result {
                Err(MoveError::Interrupted { .. }) => {
                    return Ok(Some(Outcome::Stopped(Stop::Undoing {
                        target: self.target.path.clone(),
                        partition: forward.record.partition,
                        journal: undo_path.to_path_buf(),
                    })));
                }
                Err(source) => {
                    let way_on = self.undo_way_on(&forward.record);
                    let journal = undo_path.to_path_buf();
                    return Err(SessionError::Move { source, journal, way_on });
                }
                Ok(()) => back.commit(Phase::Done, back.record.chunks(), &[])?,
            }
        }
        Ok(None)
    }

    /// How an undo stopped by an I/O error goes on.
    fn undo_way_on(&self, m: &Move) -> WayOn {
        let (target, partition) = (self.target.path.clone(), m.partition);
        match self.host.present() {
            true => WayOn::FinishUndo { target, partition },
            false => {
                let identity = m.identity.clone();
                WayOn::Vanished(Box::new(GoneDisk { target, partition, identity, undoing: true }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::session::lab::{image, lab, opts, Log};
    use crate::realign::session::options::MoveOptions;

    /// A move stopped by a failing write (its chunk half-written over its
    /// own source, saved in the journal) is undone: every byte back, the
    /// table untouched, the move recorded undone and nothing left to
    /// finish. A rerun of the move is refused while an undo is under way.
    #[test]
    fn a_stopped_move_is_undone_exactly() {
        let lab = lab();
        let to_64 = MoveOptions { to: Some(64), ..opts() };
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        let err = lab.session.move_all(&to_64, &[1], &mut Log::default()).unwrap_err();
        let names_undo = matches!(err, SessionError::Move { way_on: WayOn::Rerun { .. }, .. });
        assert!(names_undo, "names the way back: {err:?}");
        assert_ne!(*lab.mem.bytes.lock().unwrap(), image(), "the failed write landed half");
        let journal = lab.session.unfinished(None).unwrap().expect("stopped half-way");
        let path = journal.path().to_path_buf();
        // The undo itself stops on the same fault, then resumes.
        let err = lab.session.undo(journal, &mut Log::default()).unwrap_err();
        let undo_way = matches!(err, SessionError::Move { way_on: WayOn::FinishUndo { .. }, .. });
        assert!(undo_way, "{err:?}");
        *lab.mem.writes_left.lock().unwrap() = None;
        let journal = lab.session.unfinished(None).unwrap().expect("still unfinished");
        let mut log = Log::default();
        assert_eq!(lab.session.undo(journal, &mut log).unwrap(), Outcome::Finished);
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "every byte as before the move");
        assert!(lab.session.unfinished(None).unwrap().is_none());
        assert!(lab.session.store.unfinished().is_empty(), "the record is gone");
        assert_eq!(Journal::open(&path).unwrap().state.phase, Phase::Undone);
        assert!(!undo::path(&path).exists(), "the undo's journal is gone");
        assert!(std::fs::metadata(&path).unwrap().len() < 64 << 10, "saved chunks scrubbed");
        // A rerun (after a crash at the very end, say) finds the undone
        // move and only forgets it again.
        let again = lab.session.last_undone(None).expect("the last move was undone");
        assert_eq!(again.path(), path);
        assert_eq!(lab.session.undo(again, &mut Log::default()).unwrap(), Outcome::Finished);
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "untouched by the rerun");
    }

    /// An undo on a disk that is gone says so (and that the undo is what
    /// goes on); back, the undo finishes.
    #[test]
    fn an_undo_on_a_vanished_disk_goes_on_once_it_is_back() {
        let lab = lab();
        let to_64 = MoveOptions { to: Some(64), ..opts() };
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        lab.session.move_all(&to_64, &[1], &mut Log::default()).unwrap_err();
        *lab.mem.writes_left.lock().unwrap() = None;
        let journal = lab.session.unfinished(None).unwrap().expect("stopped half-way");
        lab.mem.gone.store(true, std::sync::atomic::Ordering::Relaxed);
        let err = lab.session.undo(journal, &mut Log::default()).unwrap_err();
        let SessionError::Move { way_on: WayOn::Vanished(gone), .. } = &err else {
            panic!("{err:?}")
        };
        assert!(gone.undoing && gone.partition == 1, "{gone:?}");
        lab.mem.gone.store(false, std::sync::atomic::Ordering::Relaxed);
        let journal = lab.session.unfinished(None).unwrap().expect("still unfinished");
        assert_eq!(lab.session.undo(journal, &mut Log::default()).unwrap(), Outcome::Finished);
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "every byte as before the move");
    }
}
