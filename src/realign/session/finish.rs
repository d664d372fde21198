//! Running a journaled move to the end: copy, verify, table, tell the
//! kernel, commit Done, remove the record; and what a stop or an error
//! leaves, in words, with the ways on.

use super::error::{io_error, GoneDisk, MoveRefusal, SessionError, Stop, WayOn};
use super::events::{Done, Events, Outcome, Rescued};
use super::host::hold;
use super::open::Session;
use crate::io::AlignedBuf;
use crate::realign::copy::{self, MoveError};
use crate::realign::journal::{Journal, Phase};
use crate::realign::rescue::{self, Map};
use crate::realign::{scan, undo, Move};
use std::cell::RefCell;
use std::ops::Range;
use std::time::Instant;

impl Session {
    /// Run (or resume) the move in `journal` to the end: copy, verify,
    /// table, tell the kernel, mark it done, forget its record.
    /// With `rescue`, sectors that stay unreadable are written as zeros and
    /// listed in a map beside the journal.
    pub fn finish(
        &self,
        journal: Journal,
        rescue: bool,
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        self.run_journal(journal, rescue, None, events)
    }

    /// [`Session::finish`], given the bytes of the move's first chunk when
    /// the read check just read them (see [`copy::run_until`]).
    pub(super) fn run_journal(
        &self,
        mut journal: Journal,
        rescue: bool,
        first: Option<AlignedBuf>,
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        let undoing = undo::path(journal.path());
        if undoing.exists() {
            let (target, partition) = (self.target.path.clone(), journal.record.partition);
            return Err(MoveRefusal::BeingUndone { target, partition, journal: undoing }.into());
        }
        let writer = hold(&*self.host, &[journal.record.partition])?;
        let m = journal.record.clone();
        if journal.state.sequence > 1 {
            events.resumed(&m, journal.state.phase, journal.state.cursor);
        }
        let mut map = match rescue {
            true => Some(Map::open(rescue::map_path(journal.path()), &m).map_err(io_error(
                format!("reading {}", rescue::map_path(journal.path()).display()),
            ))?),
            false => None,
        };
        events.started(2 * m.bytes());
        let started = Instant::now();
        let result = {
            // Called in turn, never at once: one RefCell serves both.
            let shared = RefCell::new(&mut *events);
            let stop = || shared.borrow().stop_requested();
            let mut tick = |n| shared.borrow_mut().progress(n);
            copy::run_until(&*writer, &mut journal, &mut tick, &stop, map.as_mut(), first)
        };
        events.stopped();
        match result {
            Err(MoveError::Interrupted { verifying, chunks }) => {
                return Ok(Outcome::Stopped(self.stop(&journal, verifying, chunks)));
            }
            Err(source) => return Err(self.move_error(source, &journal)),
            Ok(()) => {}
        }
        if let Some(warning) = writer.tell_kernel(&m) {
            events.note(&format!("warning: {warning}"));
        }
        journal.commit(Phase::Done, m.chunks(), &[])?;
        let absolute = std::fs::canonicalize(journal.path())
            .map_err(io_error(format!("finding {}", journal.path().display())))?;
        self.store.remove(&absolute).map_err(io_error("removing the move's state record"))?;
        // After the record goes: a kill while scrubbing leaves a done
        // journal (which --clean removes), never a record to trip over.
        if let Err(e) = journal.scrub() {
            events.unscrubbed(journal.path(), &e);
        }
        // Direct writes dropped the reader's cached pages: this sees the moved bytes.
        let warnings = self.fat_warning(m.partition, m.new_start, m.sectors).into_iter().collect();
        events.finished(&Done {
            target: self.target.path.clone(),
            partition: m.partition,
            old_start: m.old_start,
            new_start: m.new_start,
            bytes: m.bytes(),
            seconds: started.elapsed().as_secs_f64(),
            contents: m.contents.clone(),
            journal: journal.path().to_path_buf(),
            verified: true,
            rescued: map.map(|map| self.rescued(&m, &map)),
            warnings,
        });
        Ok(Outcome::Finished)
    }

    /// What `--rescue` wrote as zeros, and the files they hit (the file
    /// system read where the move put it).
    fn rescued(&self, m: &Move, map: &Map) -> Rescued {
        let bad = map.bad();
        // The map keeps only ranges inside the partition: no underflow.
        let at_new = |lba: u64| lba.saturating_sub(m.old_start).saturating_add(m.new_start);
        let moved: Vec<Range<u64>> = bad.iter().map(|r| at_new(r.start)..at_new(r.end)).collect();
        let at_new = Move { old_start: m.new_start, ..m.clone() };
        Rescued {
            map: map.path().to_path_buf(),
            zero_filled: bad.iter().map(|r| [r.start, r.end - 1]).collect(),
            holders: if bad.is_empty() { None } else { self.holders(&at_new, &moved) },
            retries: rescue::RETRIES,
            seconds: map.spent.as_secs_f64(),
        }
    }

    /// A move that stopped on an error, with the ways on: an unreadable
    /// sector stays unreadable, so a rerun alone would stop there again.
    fn move_error(&self, source: MoveError, journal: &Journal) -> SessionError {
        let m = &journal.record;
        let (target, partition) = (self.target.path.clone(), m.partition);
        let (_, moved) = undo::moved(m, journal.state.phase, journal.state.cursor);
        let way_on = match &source {
            MoveError::Io { .. } if !self.host.present() => {
                let identity = m.identity.clone();
                WayOn::Vanished(Box::new(GoneDisk { target, partition, identity, undoing: false }))
            }
            MoveError::Io { what: "reading", source: e, .. } if scan::unreadable(e) => {
                WayOn::Unreadable { target, partition, moved, retries: rescue::RETRIES }
            }
            _ => WayOn::Rerun { target, partition },
        };
        SessionError::Move { source, journal: journal.path().to_path_buf(), way_on }
    }

    /// What a stopped move left.
    fn stop(&self, journal: &Journal, verifying: bool, chunks: u64) -> Stop {
        let m = &journal.record;
        Stop::Moving {
            target: self.target.path.clone(),
            partition: m.partition,
            journal: journal.path().to_path_buf(),
            verifying,
            copied: chunks.saturating_mul(m.chunk_bytes).min(m.bytes()),
            bytes: m.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::session::lab::{assert_moved, image, lab, opts, partition, Log, OLD, SS};
    use crate::realign::session::options::MoveOptions;
    use std::sync::atomic::Ordering;

    /// A failing write stops the move with its journal and record intact;
    /// the next run finds it by the record and finishes it.
    #[test]
    fn a_failed_copy_resumes_from_its_record() {
        let lab = lab();
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        let err = lab.session.move_all(&opts(), &[1], &mut Log::default()).unwrap_err();
        let way_on = match &err {
            SessionError::Move { way_on, .. } => way_on,
            _ => panic!("{err}"),
        };
        assert!(matches!(way_on, WayOn::Rerun { partition: 1, .. }), "{way_on:?}");
        assert_eq!(lab.session.store.unfinished().len(), 1);
        *lab.mem.writes_left.lock().unwrap() = None;
        let journal = lab.session.unfinished(None).unwrap().expect("found by its record");
        let outcome = lab.session.finish(journal, false, &mut Log::default()).unwrap();
        assert_eq!(outcome, Outcome::Finished);
        assert_moved(&lab);
        assert!(lab.session.store.unfinished().is_empty());
    }

    /// A disk unplugged mid-move: the error says it is gone and knows it by
    /// what it is; once it is back, the move found by its record finishes.
    #[test]
    fn a_disk_that_vanishes_mid_move_is_finished_once_back() {
        let lab = lab();
        let mut log = Log { unplug: Some(lab.mem.gone.clone()), ..Log::default() };
        let no_check = MoveOptions { read_check: false, ..opts() };
        let err = lab.session.move_all(&no_check, &[1], &mut log).unwrap_err();
        let way_on = match &err {
            SessionError::Move { way_on, .. } => way_on,
            _ => panic!("{err}"),
        };
        let vanished = WayOn::Vanished(Box::new(GoneDisk {
            target: lab.session.target.path.clone(),
            partition: 1,
            identity: lab.session.identity.clone(),
            undoing: false,
        }));
        assert_eq!(way_on, &vanished);
        lab.mem.gone.store(false, Ordering::Relaxed);
        let journal = lab.session.unfinished(None).unwrap().expect("found by its record");
        let outcome = lab.session.finish(journal, false, &mut Log::default()).unwrap();
        assert_eq!(outcome, Outcome::Finished);
        assert_moved(&lab);
    }

    /// An undo under way is finished by --undo, never by a rerun of the
    /// move, which would copy from sources the undo has overwritten.
    #[test]
    fn a_rerun_is_refused_while_an_undo_is_under_way() {
        let lab = lab();
        let to_64 = MoveOptions { to: Some(64), ..opts() };
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        lab.session.move_all(&to_64, &[1], &mut Log::default()).unwrap_err();
        let journal = lab.session.unfinished(None).unwrap().unwrap();
        std::fs::write(undo::path(journal.path()), b"an undo's journal").unwrap();
        *lab.mem.writes_left.lock().unwrap() = None;
        let err = lab.session.finish(journal, false, &mut Log::default()).unwrap_err();
        assert!(err.to_string().contains("being undone"), "{err}");
    }

    /// With rescue, sectors that stay unreadable are written as zeros at
    /// the new place and listed in the map; every other byte moves.
    #[test]
    fn a_rescue_moves_around_unreadable_sectors_and_maps_them() {
        let lab = lab();
        let bad = [OLD + 100, OLD + 101, OLD + 3000];
        *lab.mem.unreadable.lock().unwrap() = bad.to_vec();
        let rescue = MoveOptions { rescue: true, ..opts() };
        let mut log = Log::default();
        assert_eq!(lab.session.move_all(&rescue, &[1], &mut log).unwrap(), Outcome::Finished);
        assert!(log.notes.iter().any(|n| n.contains("cannot be read")), "{:?}", log.notes);
        let done = &log.done[0];
        let rescued = done.rescued.as_ref().expect("rescued");
        assert_eq!(rescued.zero_filled, [[OLD + 100, OLD + 101], [OLD + 3000, OLD + 3000]]);
        let map = std::fs::read_to_string(&rescued.map).unwrap();
        let dashes: Vec<&str> = map.lines().filter(|l| l.ends_with(" -")).collect();
        assert_eq!(dashes, ["0x00014600  0x00000400  -", "0x0017EE00  0x00000200  -"], "{map}");
        let img = lab.mem.bytes.lock().unwrap();
        let mut expected = partition(&image(), OLD).to_vec();
        for lba in bad {
            let at = (lba - OLD) as usize * SS;
            expected[at..at + SS].fill(0);
        }
        assert_eq!(partition(&img, done.new_start), &expected[..]);
    }

    /// The kernel refusing is a warning: the disk is right, the move done.
    #[test]
    fn a_kernel_that_refuses_only_warns() {
        let lab = lab();
        lab.mem.kernel_refuses.store(true, Ordering::Relaxed);
        let mut log = Log::default();
        assert_eq!(lab.session.move_all(&opts(), &[1], &mut log).unwrap(), Outcome::Finished);
        assert!(log.notes.iter().any(|n| n.contains("warning: injected")), "{:?}", log.notes);
        assert_moved(&lab);
        assert!(lab.session.store.unfinished().is_empty());
    }

    /// Asked to stop, a move says how far it got and how to finish; a
    /// rerun finishes it.
    #[test]
    fn a_stopped_move_says_what_it_left() {
        let lab = lab();
        let mut log = Log { stop_after_progress: true, ..Log::default() };
        let Outcome::Stopped(why) = lab.session.move_all(&opts(), &[1], &mut log).unwrap() else {
            panic!("not stopped")
        };
        assert!(matches!(why, Stop::Moving { partition: 1, .. }), "{why:?}");
        assert!(why.to_string().contains("unusable until the move is finished"), "{why}");
        let journal = lab.session.unfinished(None).unwrap().expect("unfinished");
        lab.session.finish(journal, false, &mut Log::default()).unwrap();
        assert_moved(&lab);
    }
}
