//! A run: the refusals before anything is written ([`Session::preflight`]),
//! then each wanted partition placed, read, journaled (the state record
//! first) and moved to the end.

use super::error::{io_error, MoveRefusal, SessionError, Stop};
use super::events::{Events, Outcome};
use super::open::Session;
use super::options::MoveOptions;
use crate::realign::journal::Journal;
use crate::realign::place::{PlaceError, Placement};
use crate::realign::prepare::{prepare, Prepared};
use crate::realign::scan::Scan;
use crate::realign::undo;
use std::path::{Path, PathBuf};

impl Session {
    /// What a move refuses before anything is written (the dry run asks
    /// too): a journal where a crash would lose it, a target in use.
    /// Returns the first journal's path.
    pub fn preflight(&self, opts: &MoveOptions, wanted: &[u32]) -> Result<PathBuf, SessionError> {
        let first = self.journal_path(opts, wanted.first().copied().unwrap_or(1));
        self.host.check_journal(&first, wanted)?;
        self.host.check_unused(wanted)?;
        Ok(first)
    }

    /// Move each of `wanted` in turn, each to the end (or to where `events`
    /// asked to stop).
    pub fn move_all(
        &self,
        opts: &MoveOptions,
        wanted: &[u32],
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        // Every refusal comes before any journal exists, so none leaves an
        // "unfinished" move behind. All journals of a run share a directory.
        let first = self.preflight(opts, wanted)?;
        if let Some(dir) = first.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(io_error(format!("creating {}", dir.display())))?;
        }
        // Nothing is written until the first journal: the planning reads
        // each sector once, up to the first move and after each one.
        let mut span = Some(self.reader.keep());
        for placed in self.place_all(opts, wanted)? {
            let planning = span.take().unwrap_or_else(|| self.reader.keep());
            let placement = match placed {
                Ok(p) => p,
                Err(err @ PlaceError::AlreadyAligned(..)) => {
                    events.note(&err.to_string());
                    continue;
                }
                Err(error) => {
                    let why =
                        self.refusal(&self.layout()?, error.clone()).refused.unwrap_or_default();
                    return Err(MoveRefusal::Unplaceable { error, why }.into());
                }
            };
            // The table changed after each move: read it again.
            let layout = self.layout()?;
            let n = placement.partition.number;
            let Some(current) = layout.partitions.iter().find(|p| p.number == n) else {
                return Err(MoveRefusal::Vanished(n).into());
            };
            let placement = Placement { partition: current.clone(), ..placement };
            let untouched = || {
                Outcome::Stopped(Stop::Untouched { target: self.target.path.clone(), partition: n })
            };
            if events.stop_requested() {
                return Ok(untouched());
            }
            let prepared = prepare(
                &self.reader,
                &self.target.path,
                &layout,
                &placement,
                self.identity.clone(),
                opts.chunk_bytes,
            )?;
            drop(planning);
            let mut first = None;
            if opts.read_check {
                let (scan, kept) = self.read_check(opts, &prepared.record, events)?;
                if scan == Scan::Stopped {
                    return Ok(untouched());
                }
                first = kept;
            }
            let journal = self.create_journal(opts, &prepared)?;
            for note in placement.note.iter().chain(&prepared.notes) {
                events.note(&format!("note: {note}"));
            }
            if let Outcome::Stopped(why) = self.run_journal(journal, opts.rescue, first, events)? {
                return Ok(Outcome::Stopped(why));
            }
        }
        Ok(Outcome::Finished)
    }

    /// The state record first, then the journal: a record pointing at a
    /// journal not yet made is ignored, while a journal with no record
    /// could be missed.
    fn create_journal(
        &self,
        opts: &MoveOptions,
        prepared: &Prepared,
    ) -> Result<Journal, SessionError> {
        let path = self.journal_path(opts, prepared.record.partition);
        if path.exists() {
            if !Journal::open(&path)?.state.phase.finished() {
                return Err(MoveRefusal::JournalTaken(path).into());
            }
            std::fs::remove_file(&path)
                .map_err(io_error(format!("removing {}", path.display())))?;
        }
        // Left by a crash after an undo recorded itself finished.
        let stale = undo::path(&path);
        if stale.exists() {
            std::fs::remove_file(&stale)
                .map_err(io_error(format!("removing {}", stale.display())))?;
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let absolute = std::fs::canonicalize(dir)
            .map_err(io_error(format!("finding {}", dir.display())))?
            .join(path.file_name().unwrap_or_default());
        self.store
            .add(&absolute, &prepared.record)
            .map_err(io_error("recording the move in the state directory"))?;
        Ok(Journal::create(&path, prepared.record.clone())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::journal::Phase;
    use crate::realign::session::lab::{
        assert_moved, image, lab, lab_with, opts, partition, Log, DISK, OLD, SECTORS, SS,
    };
    use crate::table;

    #[test]
    fn plan_then_move_finishes_and_forgets_the_record() {
        let lab = lab();
        let wanted = lab.session.wanted(&[]).unwrap();
        assert_eq!(wanted, [1]);
        let plan = lab.session.plan(&opts(), &wanted).unwrap();
        assert_eq!((plan[0].old_start, plan[0].refused.as_deref()), (Some(OLD), None));
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "planning writes nothing");
        let mut log = Log::default();
        let outcome = lab.session.move_all(&opts(), &wanted, &mut log).unwrap();
        assert_eq!(outcome, Outcome::Finished);
        let new = assert_moved(&lab);
        assert_eq!((log.done.len(), log.done[0].new_start), (1, new));
        assert_eq!(*lab.mem.told.lock().unwrap(), [1], "the kernel was told");
        assert!(lab.session.unfinished(None).unwrap().is_none());
        assert!(lab.session.store.unfinished().is_empty(), "the record is gone");
        assert!(lab.session.wanted(&[]).unwrap().is_empty(), "nothing left to move");
        // The journal keeps its record, not the partition's bytes it saved.
        let journal = std::fs::read(&log.done[0].journal).unwrap();
        assert!(journal.len() < 64 << 10, "{} bytes", journal.len());
        let original = image();
        let sector = &partition(&original, OLD)[SS..2 * SS];
        assert!(!journal.windows(SS).any(|w| w == sector), "a saved sector is left");
        assert!(Journal::open(&log.done[0].journal).unwrap().state.phase == Phase::Done);
    }

    /// Extended 2048+7000: logical 5 at 2111+1000, then free space, then
    /// EBR 4100 and logical 6 at 4163 (in the EBR's `slot`, the link to it
    /// spanning to its end) holding numbered sectors. Its 1 MiB
    /// start, 4096, covers its EBR, and there is no room at 6144.
    fn extended_image(slot: usize) -> Vec<u8> {
        use crate::table::fixtures::mbr_entry;
        let mut img = vec![0u8; DISK];
        mbr_entry(&mut img, 0, 0, 0x05, 2048, 7000);
        mbr_entry(&mut img, 2048 * SS, 0, 0x83, 63, 1000);
        mbr_entry(&mut img, 2048 * SS, 1, 0x05, 4100 - 2048, 63 + SECTORS as u32);
        mbr_entry(&mut img, 4100 * SS, slot, 0x83, 63, SECTORS as u32);
        for s in 0..SECTORS as usize {
            let at = (4163 + s) * SS;
            img[at..at + SS].fill((s % 251) as u8 + 1);
            img[at..at + 8].copy_from_slice(&(s as u64).to_le_bytes());
        }
        img
    }

    /// (number, start, size, EBR) of each partition as a reader sees them.
    fn rows(img: &[u8]) -> Vec<(u32, u64, u64, Option<u64>)> {
        let layout = table::read(&img.to_vec(), 512, DISK as u64).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        layout.partitions.iter().map(|p| (p.number, p.start, p.size, p.ebr)).collect()
    }

    /// A logical whose destination covers its EBR takes the EBR along,
    /// written before the copy; a failure at any write leaves a table that
    /// reads clean with the logical at its old or new start, and the next
    /// run finishes the move.
    #[test]
    fn a_logical_moves_its_ebr_first_and_survives_a_failure_at_every_write() {
        let before = rows(&extended_image(0));
        let moved =
            [(1, 2048, 7000, None), (5, 2111, 1000, Some(2048)), (6, 4096, SECTORS, Some(4095))];
        for fail_at in 0.. {
            let lab = lab_with(extended_image(0));
            let plan = lab.session.plan(&opts(), &[6]).unwrap();
            assert_eq!(plan[0].new_start, Some(4096), "{:?}", plan[0]);
            assert!(plan[0]
                .notes
                .iter()
                .any(|n| n.contains("EBR moves from LBA 4100 to LBA 4095")));
            *lab.mem.writes_left.lock().unwrap() = Some(fail_at);
            let first = lab.session.move_all(&opts(), &[6], &mut Log::default());
            let finished = first.is_ok();
            if !finished {
                let now = rows(&lab.mem.bytes.lock().unwrap());
                let relinked = [before[0], before[1], (6, 4163, SECTORS, Some(4095))];
                assert!(now == before || now == relinked || now == moved, "{fail_at}: {now:?}");
                *lab.mem.writes_left.lock().unwrap() = None;
                let journal = lab.session.unfinished(None).unwrap().expect("an unfinished move");
                lab.session.finish(journal, false, &mut Log::default()).unwrap();
            }
            let img = lab.mem.bytes.lock().unwrap();
            assert_eq!(rows(&img), moved, "failing at write {fail_at}");
            let data = |start: usize| &img[start * SS..(start + SECTORS as usize) * SS];
            assert_eq!(data(4096), &extended_image(0)[4163 * SS..(4163 + SECTORS as usize) * SS]);
            if finished {
                assert!(fail_at > 3, "the move needs more than {fail_at} writes");
                break;
            }
        }
    }

    /// A logical in an EBR's third slot must fit its link: moving right,
    /// the link grows before the EBR says where the logical went, so a
    /// failure at any write leaves it readable at its old or new start.
    #[test]
    fn a_third_slot_logical_moving_right_is_readable_after_every_write() {
        let before = rows(&extended_image(2));
        let mut moved = before.clone();
        moved[2].1 = 4168;
        let to = MoveOptions { to: Some(4168), ..opts() };
        for fail_at in 0.. {
            let lab = lab_with(extended_image(2));
            *lab.mem.writes_left.lock().unwrap() = Some(fail_at);
            let finished = lab.session.move_all(&to, &[6], &mut Log::default()).is_ok();
            let now = rows(&lab.mem.bytes.lock().unwrap());
            assert!(now == before || now == moved, "failing at write {fail_at}: {now:?}");
            if finished {
                assert_eq!(now, moved);
                break;
            }
            *lab.mem.writes_left.lock().unwrap() = None;
            let journal = lab.session.unfinished(None).unwrap().expect("an unfinished move");
            lab.session.finish(journal, false, &mut Log::default()).unwrap();
            assert_eq!(
                rows(&lab.mem.bytes.lock().unwrap()),
                moved,
                "resumed after write {fail_at}"
            );
        }
    }
}
