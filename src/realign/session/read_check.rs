//! The read before any write: every sector a move will read, read once
//! before its journal exists, and what the unreadable ones hold.

use super::error::{io_error, SessionError};
use super::events::Events;
use super::open::Session;
use super::options::MoveOptions;
use crate::io::AlignedBuf;
use crate::realign::scan::{self, Keep, Scan};
use crate::realign::{rescue, Move};
use crate::units::human_size;
use std::cell::RefCell;
use std::ops::Range;
use std::time::Instant;

impl Session {
    /// Read every sector `m` will read, before any journal exists: an
    /// unreadable one refuses the move with nothing written, unless
    /// rescuing (then it is said, and the move reads around it). Its first
    /// chunk in copy order is read last and its bytes kept, when all read
    /// (not when rescuing: the rescue map lists what the move reads).
    pub(super) fn read_check(
        &self,
        opts: &MoveOptions,
        m: &Move,
        events: &mut dyn Events,
    ) -> Result<(Scan, Option<AlignedBuf>), SessionError> {
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
            let keep = (!opts.rescue).then(|| first_chunk(m));
            scan::scan(&*reader, m.old_start, m.sectors, m.sector_size, keep, &mut progress, &stop)
        };
        events.stopped();
        let (found, kept) =
            found.map_err(io_error(format!("reading partition {}", m.partition)))?;
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
                Ok((Scan::Done(bad), None))
            }
            other => Ok((other, kept)),
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

/// Chunk 0 of `m` in copy order, for the read check to keep: in a buffer
/// of a whole chunk, as the move's own reads use.
fn first_chunk(m: &Move) -> Keep {
    let (rel, len) = m.chunk(0);
    let ss = m.sector_size.max(1);
    let lba = m.old_start.saturating_add(rel / ss);
    let size = usize::try_from(m.chunk_bytes.max(len)).unwrap_or(0);
    Keep { lbas: lba..lba.saturating_add(len / ss), buf: AlignedBuf::new(size, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::session::lab::{
        assert_moved, image, lab, opts, Lab, Log, OLD, SECTORS, SS,
    };

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

    /// The first chunk in copy order is read once, by the check: the move
    /// takes the check's bytes, read last, and the partition moves whole.
    /// Not when rescuing, whose map lists what the move itself reads.
    #[test]
    fn the_move_takes_its_first_chunk_from_the_read_check() {
        let whole = |lab: &Lab| {
            let reads = lab.mem.reads.lock().unwrap();
            let at = OLD * SS as u64;
            reads.iter().filter(|&&(o, len)| o == at && len == SECTORS as usize * SS).count()
        };
        for (options, reads) in [
            (opts(), 1),
            (MoveOptions { read_check: false, ..opts() }, 1),
            (MoveOptions { rescue: true, ..opts() }, 2),
        ] {
            let lab = lab();
            lab.session.move_all(&options, &[1], &mut Log::default()).unwrap();
            assert_moved(&lab);
            assert_eq!(whole(&lab), reads, "reads of the whole partition, {options:?}");
        }
        // Moving right in chunks: chunk 0 is the partition's last.
        let lab = lab();
        let chunked = MoveOptions { chunk_bytes: 256 << 10, ..opts() };
        lab.session.move_all(&chunked, &[1], &mut Log::default()).unwrap();
        assert!(assert_moved(&lab) > OLD);
        let last = (OLD + SECTORS) * SS as u64 - (256 << 10);
        let reads = lab.mem.reads.lock().unwrap();
        assert_eq!(reads.iter().filter(|&&(o, len)| o == last && len == 256 << 10).count(), 0);
        assert!(reads.iter().any(|&(o, len)| o <= last && o + len as u64 >= last + (256 << 10)));
    }
}
