//! The read before any write: every sector a move will read, read once
//! before its journal exists, and what the unreadable ones hold.

use super::error::{io_error, SessionError};
use super::events::Events;
use super::open::Session;
use super::options::MoveOptions;
use crate::realign::scan::{self, Scan};
use crate::realign::{rescue, Move};
use crate::units::human_size;
use std::cell::RefCell;
use std::ops::Range;
use std::time::Instant;

impl Session {
    /// Read every sector `m` will read, before any journal exists: an
    /// unreadable one refuses the move with nothing written, unless
    /// rescuing (then it is said, and the move reads around it).
    pub(super) fn read_check(
        &self,
        opts: &MoveOptions,
        m: &Move,
        events: &mut dyn Events,
    ) -> Result<Scan, SessionError> {
        let reader = self.host.direct_reader()?;
        events.note(&format!(
            "reading every sector of partition {} ({}) before writing any",
            m.partition,
            human_size(m.bytes())
        ));
        events.started(m.bytes());
        let started = Instant::now();
        let found = {
            let shared = RefCell::new(&mut *events);
            let stop = || shared.borrow().stop_requested();
            let mut progress = |n| shared.borrow_mut().progress(n);
            scan::scan(&*reader, m.old_start, m.sectors, m.sector_size, &mut progress, &stop)
        };
        events.stopped();
        let found = found.map_err(io_error(format!("reading partition {}", m.partition)))?;
        if let Scan::Done(bad) = &found {
            let seconds = started.elapsed().as_secs_f64();
            events.note(&format!(
                "read check: {} read in {seconds:.2} s ({}/s), {}",
                human_size(m.bytes()),
                human_size((m.bytes() as f64 / seconds.max(1e-6)) as u64),
                if bad.is_empty() { "every sector readable".into() } else { scan::describe(bad) }
            ));
        }
        match found {
            Scan::Done(bad) if !bad.is_empty() => {
                let holders = self.holders(m, &bad);
                if !opts.rescue {
                    return Err(SessionError::Unreadable { partition: m.partition, holders, bad });
                }
                events.note(&format!(
                    "partition {}: {} cannot be read{}: --rescue reads each {} more times during \
                     the move and writes zeros where it still fails",
                    m.partition,
                    scan::describe(&bad),
                    holders.map(|h| format!(" ({h})")).unwrap_or_default(),
                    rescue::RETRIES
                ));
                Ok(Scan::Done(bad))
            }
            other => Ok(other),
        }
    }

    /// What the unreadable `bad` sectors of `m`'s partition hold: files by
    /// name in an ext2/3/4 (debugfs), else the bytes of the partition.
    pub(super) fn holders(&self, m: &Move, bad: &[Range<u64>]) -> Option<String> {
        let ss = m.sector_size;
        let at = m.old_start.checked_mul(ss)?;
        let layers = crate::stack::walk(&self.reader, at, m.bytes());
        let ext = layers.iter().find_map(|l| match l.details {
            crate::stack::Details::Ext { block_bytes, .. } if l.depth == 0 => Some(block_bytes),
            _ => None,
        });
        if self.image.is_none() {
            let path = &self.target.path;
            if let Some(said) = ext.and_then(|b| scan::ext_holders(path, at, ss, b, bad)) {
                return Some(said);
            }
        }
        let first = bad.first()?;
        let byte = first.start.checked_sub(m.old_start)?.checked_mul(ss)?;
        Some(format!("the first at byte {byte} of partition {}", m.partition))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::session::lab::{image, lab, opts, Log, OLD};

    /// An unreadable sector found by the read check refuses the move with
    /// nothing written and nothing left to finish; without the check the
    /// same disk stops the move half-way, leaving a journal.
    #[test]
    fn the_read_check_refuses_a_move_over_unreadable_sectors() {
        let lab = lab();
        *lab.mem.unreadable.lock().unwrap() = vec![OLD + 100, OLD + 101, OLD + 3000];
        let err = lab.session.move_all(&opts(), &[1], &mut Log::default()).unwrap_err();
        let SessionError::Unreadable { partition, bad, .. } = &err else { panic!("{err}") };
        assert_eq!(
            (*partition, bad.clone()),
            (1, vec![OLD + 100..OLD + 102, OLD + 3000..OLD + 3001])
        );
        assert!(err.to_string().contains("LBA 163-164, 3063 (3 sectors) cannot be read"), "{err}");
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "nothing written");
        assert!(lab.session.unfinished(None).unwrap().is_none(), "no move to finish");
        assert!(lab.session.store.unfinished().is_empty());
        let unchecked = MoveOptions { read_check: false, ..opts() };
        let err = lab.session.move_all(&unchecked, &[1], &mut Log::default()).unwrap_err();
        assert!(matches!(err, SessionError::Move { .. }), "{err}");
        assert!(lab.session.unfinished(None).unwrap().is_some(), "stopped half-way");
    }
}
