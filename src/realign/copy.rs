//! Carrying out a journaled move from wherever its journal says it stands:
//! copy, verify, write the fixups and the table. Every step can be cut
//! short at any moment and run again.

use super::disk::Disk;
use super::journal::{Journal, JournalError, Phase, SavedChunk, SavedChunks};
use super::rescue::{self, Map};
use super::{Move, Write};
use crate::io::AlignedBuf;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::time::{Duration, Instant};

/// Record progress at least this often, so a rerun redoes little.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("I/O error {what} LBA {lba}: {source}")]
    Io { what: &'static str, lba: u64, source: io::Error },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(
        "verification failed: the {len} bytes moved to LBA {lba} differ from what was read \
         (checksum {found:08x}, expected {expected:08x})"
    )]
    Verify { lba: u64, len: u64, found: u32, expected: u32 },
    #[error(
        "the target changed under the move: the {what} at byte {offset} holds neither the old \
         nor the new bytes"
    )]
    Changed { what: String, offset: u64 },
    /// Acknowledged and flushed, yet not on the disk: a disk or bridge that
    /// drops writes. The journal still says the region is to be written.
    #[error(
        "the disk does not return the {what} written at byte {offset}: it acknowledged the write \
         and dropped it"
    )]
    Dropped { what: String, offset: u64 },
    #[error("writing the rescue map {}: {source}", path.display())]
    Map { path: std::path::PathBuf, source: io::Error },
    /// `stop` asked to stop; the journal records how far, durably.
    #[error("interrupted after {chunks} chunks (verifying: {verifying})")]
    Interrupted { verifying: bool, chunks: u64 },
}

fn io_at(what: &'static str, offset: u64, m: &Move, source: io::Error) -> MoveError {
    MoveError::Io { what, lba: offset / m.sector_size.max(1), source }
}

/// Read `buf` from `offset`; on failure, find the first sector that fails,
/// so the error names the bad LBA rather than the chunk's first.
fn read(
    disk: &dyn Disk,
    buf: &mut [u8],
    offset: u64,
    m: &Move,
    what: &'static str,
) -> Result<(), MoveError> {
    let len = buf.len();
    disk.read_at(buf, offset).map_err(|e| {
        first_bad(m, len, offset, e, |piece, at| disk.read_at(&mut buf[piece], at), what)
    })
}

/// Write `buf` at `offset`, naming the first failing sector on failure;
/// rewriting pieces of the same bytes is harmless.
fn write(disk: &dyn Disk, buf: &[u8], offset: u64, m: &Move) -> Result<(), MoveError> {
    disk.write_at(buf, offset).map_err(|e| {
        first_bad(m, buf.len(), offset, e, |piece, at| disk.write_at(&buf[piece], at), "writing")
    })
}

/// Find the first failing sector by halving: the first half is tried
/// again, and the search goes on in it if it fails, else in the second
/// half (which failed with it). A handful of operations, not one per
/// sector: on a failing drive each costs a seek, under TCG a SCSI command.
/// Pieces start a whole sector into the buffer, so aligned buffers stay
/// aligned. The last sector is tried once more for its own error; one that
/// no longer fails is named with the first error.
fn first_bad(
    m: &Move,
    len: usize,
    offset: u64,
    first: io::Error,
    mut op: impl FnMut(std::ops::Range<usize>, u64) -> io::Result<()>,
    what: &'static str,
) -> MoveError {
    let ss = m.sector_size.max(512) as usize;
    let (mut lo, mut hi) = (0, len);
    while hi - lo > ss {
        // At least a sector, so a last partial sector cannot stall it.
        let mid = lo + ((hi - lo) / ss / 2).max(1) * ss;
        match op(lo..mid, offset + lo as u64) {
            Err(_) => hi = mid,
            Ok(()) => lo = mid,
        }
    }
    let at = offset + lo as u64;
    io_at(what, at, m, op(lo..hi, at).err().unwrap_or(first))
}

/// Run the move in `journal` from where it stands up to and including the
/// table. `tick` hears of every byte copied or verified.
pub fn run(
    disk: &dyn Disk,
    journal: &mut Journal,
    tick: &mut dyn FnMut(u64),
) -> Result<(), MoveError> {
    run_until(disk, journal, tick, &|| false, None, None)
}

/// [`run`], but polling `stop` between chunks: when it says so, the move
/// stops with [`MoveError::Interrupted`] once the journal records every
/// chunk written so far, so a rerun redoes nothing. The table writes, a
/// few sectors, are never cut short. With `rescue`, sectors that stay
/// unreadable are zero-filled and listed in its map (see [`rescue`]).
/// `first` holds chunk 0's source bytes where the caller has just read
/// them all (the read check, before the journal was made): a move not yet
/// begun takes them instead of reading the chunk again, unless a write
/// made before the copy lands on them.
pub fn run_until(
    disk: &dyn Disk,
    journal: &mut Journal,
    tick: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
    mut rescue: Option<&mut Map>,
    first: Option<AlignedBuf>,
) -> Result<(), MoveError> {
    if journal.state.phase == Phase::Copying {
        let m = &journal.record;
        let unbegun = journal.state.cursor == 0
            && journal.state.saved.iter().all(Option::is_none)
            && rescue.is_none()
            && !m.before.iter().any(|w| m.first_source_meets(w));
        let first = first.filter(|buf| unbegun && buf.bytes().len() as u64 >= m.chunk_bytes);
        // Again on every resume: writes already made are skipped.
        write_all(disk, &journal.record, &journal.record.before)?;
        copy_and_verify(disk, journal, tick, stop, rescue.as_deref_mut(), first)?;
        if let Some(map) = rescue {
            map.finish().map_err(|source| map_error(map, source))?;
        }
        journal.commit(Phase::Verified, journal.record.chunks(), &[])?;
    }
    if journal.state.phase == Phase::Verified {
        write_all(disk, &journal.record, &journal.record.writes)?;
        journal.commit(Phase::TableWritten, journal.record.chunks(), &[])?;
    }
    Ok(())
}

/// The threads beside the copy: a reader one chunk ahead of it, a verifier
/// behind it. Neither can meet the copy's writes: in copy order no
/// destination overlaps a later chunk's source, nor another destination.
/// Four chunk buffers in all (64 MiB at 16 MiB chunks), whatever the size:
/// one written, the next one saved beside it, one read, one verified.
struct Pipe {
    /// Buffers back to the reader once written.
    free: Sender<AlignedBuf>,
    /// Each chunk's source bytes in copy order, with the sectors
    /// zero-filled in it when rescuing and the time that took.
    full: Receiver<Read>,
    /// Chunks on the disk, for the verifier: index and expected checksum.
    written: Sender<(u64, Option<u32>)>,
    /// The verifier's findings: bytes verified, or why not.
    checked: Receiver<Result<u64, MoveError>>,
    verified: u64,
}

/// Copy the chunks after the cursor and verify every chunk, those before
/// the cursor too (a resume rereads them all).
fn copy_and_verify(
    disk: &dyn Disk,
    j: &mut Journal,
    tick: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
    rescue: Option<&mut Map>,
    kept: Option<AlignedBuf>,
) -> Result<(), MoveError> {
    let m = j.record.clone();
    let first = j.state.cursor;
    j.checksums.truncate(first as usize);
    let size = m.chunk_bytes as usize;
    // The chunks the journal saved (the one at the cursor, perhaps the
    // next): their bytes come from it, their sources possibly overwritten.
    let saved = j.saved_chunks()?;
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (m, abort) = (&m, &abort);
        let (free, free_rx) = mpsc::channel();
        let (full_tx, full) = mpsc::sync_channel(1);
        let (written, written_rx) = mpsc::channel();
        let (checked_tx, checked) = mpsc::channel();
        let rescuing = rescue.is_some();
        // The kept chunk's buffer is one of the three.
        let fresh = 3 - usize::from(kept.is_some());
        let from = (first, kept);
        s.spawn(move || read_ahead(disk, m, from, &saved, rescuing, free_rx, full_tx));
        s.spawn(move || verify_behind(disk, m, written_rx, checked_tx, abort));
        for _ in 0..fresh {
            let _ = free.send(AlignedBuf::new(size, 0));
        }
        for k in 0..first {
            let _ = written.send((k, j.checksums.get(k as usize).copied()));
        }
        let mut pipe = Pipe { free, full, written, checked, verified: 0 };
        let result = copy(disk, j, &mut pipe, tick, stop, rescue);
        abort.store(true, Ordering::Relaxed);
        result
    })
}

/// Copy the chunks after the cursor. Before a destination write may
/// clobber a source not yet recorded as moved, the device is flushed, the
/// chunks whose sources it clobbers are verified and the cursor committed
/// past them and no further ([`Move::cursor_for`]); a chunk that clobbers
/// its own source is saved in the journal (and committed) first.
///
/// Where every chunk is saved (a shift under a chunk) and the journal can
/// name two, that work runs beside the write before it: once chunk k-1's
/// write is flushed, chunk k is written while chunk k+1 is saved, chunk k-1
/// verified and the commit made that names chunks k and k+1, with the
/// cursor on k. Chunk k+1's write then starts at once.
fn copy(
    disk: &dyn Disk,
    j: &mut Journal,
    pipe: &mut Pipe,
    tick: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
    mut rescue: Option<&mut Map>,
) -> Result<(), MoveError> {
    let m = j.record.clone();
    let first = j.state.cursor;
    let mut committed = first;
    let (mut dirty, mut last_commit) = (false, Instant::now());
    // A resumed move's first commit keeps naming the chunk after the
    // cursor if the journal saved it: its source may be overwritten.
    let mut ahead = j.state.saved.into_iter().flatten().find(|s| s.chunk == first + 1);
    // The last chunk saved and named, if not yet known verified.
    let mut trailing: Option<SavedChunk> = None;
    // The next chunk, received during this one's write, and its save when
    // the commit made then names it (its write may start at once). Not
    // when rescuing: zero-filled sectors are listed before they are saved.
    let (mut next, mut ready): (Option<Read>, Option<SavedChunk>) = (None, None);
    for k in first..m.chunks() {
        let (rel, len) = m.chunk(k);
        let src = m.old_start * m.sector_size + rel;
        let read = match next.take() {
            Some(read) => read,
            None => pipe.full.recv().map_err(|_| gone("reading", &m))?,
        };
        let (buf, crc, around) = match read {
            Ok(read) => read,
            Err(e) => return Err(keep_progress(disk, j, pipe, k, committed, tick, e)),
        };
        if let (Some(map), Some((bad, took))) = (rescue.as_deref_mut(), around) {
            // Listed before the zeros are written anywhere.
            let lba = src / m.sector_size;
            map.spent += took;
            map.read(lba..lba + len / m.sector_size, &bad).map_err(|e| map_error(map, e))?;
        }
        let data = &buf.bytes()[..len as usize];
        let ready_now = ready.take().filter(|s| s.chunk == k);
        j.checksums.push(crc);
        let save = m.needs_save(k);
        if ready_now.is_none() && (save || m.needs_commit(committed, k)) {
            // The flush first: the verifier rereads beside it.
            if dirty {
                disk.flush().map_err(|e| io_at("flushing after", src, &m, e))?;
                dirty = false;
            }
            let mine = if save { Some(j.save(k, data, crc)?) } else { None };
            let before = trailing.filter(|t| t.chunk + 1 == k && mine.is_some() && j.keeps() > 1);
            let cursor = match (before, mine) {
                (Some(_), _) => k - 1,
                (None, Some(_)) => k,
                (None, None) => m.cursor_for(committed, k),
            };
            pipe.verified_before(cursor, &m, tick)?;
            let next = ahead.take().filter(|a| a.chunk == k + 1);
            let saved: Vec<SavedChunk> = before.into_iter().chain(mine).chain(next).collect();
            j.commit(Phase::Copying, cursor, &saved)?;
            (committed, last_commit, trailing) = (cursor, Instant::now(), mine);
        }
        let dst = m.new_start * m.sector_size + rel;
        let written = if rescue.is_none() && names_last(j, k) && m.needs_save(k + 1) {
            let read = pipe.full.recv().map_err(|_| gone("reading", &m))?;
            // Chunk k-1's write made durable before chunk k's begins: a
            // flush would wait for that one too.
            if dirty {
                disk.flush().map_err(|e| io_at("flushing after", src, &m, e))?;
            }
            let (written, committing) = std::thread::scope(|s| {
                let writing = s.spawn(|| write(disk, data, dst, &m));
                let committing = commit_next(j, pipe, &read, k, tick);
                (writing.join().unwrap_or_else(|_| Err(gone("writing", &m))), committing)
            });
            next = Some(read);
            if let Some(saved) = committing? {
                (committed, last_commit, trailing) = (k, Instant::now(), Some(saved));
                ready = Some(saved);
            }
            written
        } else {
            write(disk, data, dst, &m)
        };
        if let Err(e) = written {
            return Err(keep_progress(disk, j, pipe, k, committed, tick, e));
        }
        dirty = true;
        tick(len);
        let _ = pipe.written.send((k, Some(crc)));
        let _ = pipe.free.send(buf);
        // The next chunk's commit needs this write durable: flushed now,
        // beside the reads in flight, not after the next chunk's read.
        if k + 1 < m.chunks() && (m.needs_save(k + 1) || m.needs_commit(committed, k + 1)) {
            disk.flush().map_err(|e| io_at("flushing after", dst, &m, e))?;
            dirty = false;
        }
        pipe.drain(tick)?;
        let stopping = stop();
        if stopping || last_commit.elapsed() >= COMMIT_EVERY {
            if dirty {
                disk.flush().map_err(|e| io_at("flushing after", dst, &m, e))?;
            }
            pipe.verified_before(k + 1, &m, tick)?;
            // Chunk k+1 stays named if it is: its write may start at once.
            j.commit(Phase::Copying, k + 1, &named_from(j, k + 1))?;
            (committed, last_commit, dirty, trailing) = (k + 1, Instant::now(), false, None);
        }
        if stopping {
            let last = k + 1 == m.chunks();
            return Err(MoveError::Interrupted { verifying: last, chunks: k + 1 });
        }
    }
    // Every chunk verified and durable: the commit of `Verified` that
    // follows lets the last saved chunks go (nothing could copy them again).
    disk.flush().map_err(|e| io_at("flushing after", m.new_start * m.sector_size, &m, e))?;
    pipe.finish(&m, tick, stop)
}

/// Whether the last commit names chunk `k` and at most the one before it
/// (a journal that can name two): chunk `k + 1`'s save area is then one it
/// does not name, the areas going round by three.
fn names_last(j: &Journal, k: u64) -> bool {
    let mut named = j.state.saved.into_iter().flatten().map(|s| s.chunk);
    j.keeps() > 1
        && k + 1 < j.record.chunks()
        && named.clone().any(|c| c == k)
        && named.all(|c| c == k || c + 1 == k)
}

/// The saved chunks the last commit names from chunk `k` on.
fn named_from(j: &Journal, k: u64) -> Vec<SavedChunk> {
    j.state.saved.into_iter().flatten().filter(|s| s.chunk >= k).collect()
}

/// Beside chunk `k`'s write, chunk `k - 1`'s flushed: save chunk `k + 1`
/// (from `read`), wait for chunk `k - 1`'s verification, then commit the
/// cursor at `k` naming chunks `k` and `k + 1`. None when the save fails:
/// the next chunk's own commit makes it again and says why.
fn commit_next(
    j: &mut Journal,
    pipe: &mut Pipe,
    read: &Read,
    k: u64,
    tick: &mut dyn FnMut(u64),
) -> Result<Option<SavedChunk>, MoveError> {
    let m = j.record.clone();
    let Ok((buf, crc, _)) = read else { return Ok(None) };
    let Ok(next) = j.save(k + 1, &buf.bytes()[..m.chunk(k + 1).1 as usize], *crc) else {
        return Ok(None);
    };
    pipe.verified_before(k, &m, tick)?;
    let mut saved = named_from(j, k);
    saved.push(next);
    j.commit(Phase::Copying, k, &saved)?;
    Ok(Some(next))
}

/// `error` at chunk `k`, once the chunks before it are verified, flushed
/// and committed, so that a rerun, `--undo` or `--rescue` goes on from
/// there, not from the last commit. Where that fails too (the disk is
/// going), the last commit stands: it is as safe, only further back.
fn keep_progress(
    disk: &dyn Disk,
    j: &mut Journal,
    pipe: &mut Pipe,
    k: u64,
    committed: u64,
    tick: &mut dyn FnMut(u64),
    error: MoveError,
) -> MoveError {
    let m = j.record.clone();
    if k > committed && pipe.verified_before(k, &m, tick).is_ok() && disk.flush().is_ok() {
        // Chunk k's saved bytes stay named: its write may have begun.
        let saved = j.state.saved.into_iter().flatten().filter(|s| s.chunk >= k);
        let saved: Vec<SavedChunk> = saved.collect();
        // The error said is the one that stopped the move, not a commit's.
        let _ = j.commit(Phase::Copying, k, &saved);
    }
    error
}

/// Sectors zero-filled in a chunk (none when it read whole), and the time
/// the reads took; None when not rescuing or not read from the disk.
type Around = Option<(Vec<std::ops::Range<u64>>, Duration)>;

/// A chunk's source bytes as the reader hands them over, with their
/// checksum (taken there, beside the copy's writes).
type Read = Result<(AlignedBuf, u32, Around), MoveError>;

fn map_error(map: &Map, source: io::Error) -> MoveError {
    MoveError::Map { path: map.path().to_path_buf(), source }
}

/// A helper thread ended without a word: it panicked (the scope says so).
fn gone(what: &'static str, m: &Move) -> MoveError {
    io_at(what, m.new_start * m.sector_size, m, io::Error::other("the thread doing it ended"))
}

impl Pipe {
    fn heard(
        &mut self,
        found: Result<u64, MoveError>,
        tick: &mut dyn FnMut(u64),
    ) -> Result<(), MoveError> {
        tick(found?);
        self.verified += 1;
        Ok(())
    }

    /// Hear what the verifier has found so far, without waiting.
    fn drain(&mut self, tick: &mut dyn FnMut(u64)) -> Result<(), MoveError> {
        while let Ok(found) = self.checked.try_recv() {
            self.heard(found, tick)?;
        }
        Ok(())
    }

    /// Wait until the chunks before `k` in copy order are verified: a
    /// commit past them lets later writes overwrite their sources, so a
    /// write the disk dropped must be found while its source still holds
    /// the bytes (a rerun then copies the chunk again).
    fn verified_before(
        &mut self,
        k: u64,
        m: &Move,
        tick: &mut dyn FnMut(u64),
    ) -> Result<(), MoveError> {
        while self.verified < k {
            let found = self.checked.recv().map_err(|_| gone("verifying", m))?;
            self.heard(found, tick)?;
        }
        Ok(())
    }

    /// Wait until all of `m`'s chunks are verified, polling `stop`: the
    /// rest are only reads, so stopping here loses nothing.
    fn finish(
        &mut self,
        m: &Move,
        tick: &mut dyn FnMut(u64),
        stop: &dyn Fn() -> bool,
    ) -> Result<(), MoveError> {
        while self.verified < m.chunks() {
            if stop() {
                return Err(MoveError::Interrupted { verifying: true, chunks: self.verified });
            }
            match self.checked.recv_timeout(Duration::from_millis(50)) {
                Ok(found) => self.heard(found, tick)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(gone("verifying", m)),
            }
        }
        Ok(())
    }
}

/// Read the sources of chunks `first..` in copy order into buffers from
/// `free`, handing each to `full`; those `saved` holds intact come from the
/// journal, and the first from `kept` when given (already read).
/// `rescuing` reads around unreadable sectors instead of failing on them.
fn read_ahead(
    disk: &dyn Disk,
    m: &Move,
    (first, mut kept): (u64, Option<AlignedBuf>),
    saved: &SavedChunks,
    rescuing: bool,
    free: Receiver<AlignedBuf>,
    full: SyncSender<Read>,
) {
    for k in first..m.chunks() {
        let read_already = kept.is_some();
        let Some(mut buf) = kept.take().or_else(|| free.recv().ok()) else { return };
        let (rel, len) = m.chunk(k);
        let src = m.old_start * m.sector_size + rel;
        let data = &mut buf.bytes_mut()[..len as usize];
        // Already in memory: kept, or saved in the journal.
        let held = if read_already { Ok(true) } else { saved.read(k, data) };
        let got = match held {
            Err(e) => Err(e.into()),
            Ok(true) => Ok(None),
            Ok(false) if rescuing => {
                let started = Instant::now();
                rescue::read_around(disk, data, src, m.sector_size)
                    .map(|bad| Some((bad, started.elapsed())))
                    .map_err(|e| io_at("reading", src, m, e))
            }
            Ok(false) => read(disk, data, src, m, "reading").map(|()| None),
        };
        let got = got.map(|around| (crc32fast::hash(data), around));
        let failed = got.is_err();
        if full.send(got.map(|(crc, around)| (buf, crc, around))).is_err() || failed {
            return;
        }
    }
}

/// Reread each chunk named on `written` at its destination and compare it
/// with the checksum taken when it was read from its source; stop at the
/// first that differs, at `abort`, or when `written` closes.
fn verify_behind(
    disk: &dyn Disk,
    m: &Move,
    written: Receiver<(u64, Option<u32>)>,
    checked: Sender<Result<u64, MoveError>>,
    abort: &AtomicBool,
) {
    let mut buf = None;
    for (k, expected) in written {
        if abort.load(Ordering::Relaxed) {
            return;
        }
        let buf = buf.get_or_insert_with(|| AlignedBuf::new(m.chunk_bytes as usize, 0));
        let (rel, len) = m.chunk(k);
        let data = &mut buf.bytes_mut()[..len as usize];
        let dst = m.new_start * m.sector_size + rel;
        let found = read(disk, data, dst, m, "verifying").and_then(|()| {
            let found = crc32fast::hash(data);
            match expected {
                Some(crc) if crc == found => Ok(len),
                _ => Err(MoveError::Verify {
                    lba: dst / m.sector_size,
                    len,
                    found,
                    expected: expected.unwrap_or(!found),
                }),
            }
        });
        let failed = found.is_err();
        if checked.send(found).is_err() || failed {
            return;
        }
    }
}

/// `writes` of `m` in the recorded order, each flushed before the next,
/// then all read back (past any cache): the table is the last word of a
/// verified copy, and a dropped table write would leave the partition
/// where its bytes no longer are. A region already holding its new bytes
/// was written before a crash; one holding neither old nor new means the
/// disk is not the one the journal was made for, or something else wrote
/// to it: checked for every region before any is written, so such a disk
/// is left as it was found.
fn write_all(disk: &dyn Disk, m: &Move, writes: &[Write]) -> Result<(), MoveError> {
    let mut pending = Vec::new();
    for w in writes {
        let mut now = AlignedBuf::new(w.old.len(), 0);
        disk.read_at(now.bytes_mut(), w.offset).map_err(|e| io_at("reading", w.offset, m, e))?;
        if now.bytes() == w.new.as_slice() {
            continue;
        }
        if now.bytes() != w.old.as_slice() || w.old.len() != w.new.len() {
            return Err(MoveError::Changed { what: w.what.clone(), offset: w.offset });
        }
        now.bytes_mut().copy_from_slice(&w.new);
        pending.push((w, now));
    }
    for (w, bytes) in &pending {
        disk.write_at(bytes.bytes(), w.offset).map_err(|e| io_at("writing", w.offset, m, e))?;
        disk.flush().map_err(|e| io_at("flushing after", w.offset, m, e))?;
    }
    for (w, bytes) in &pending {
        let mut back = AlignedBuf::new(bytes.bytes().len(), 0);
        disk.read_at(back.bytes_mut(), w.offset)
            .map_err(|e| io_at("reading back", w.offset, m, e))?;
        if back.bytes() != bytes.bytes() {
            return Err(MoveError::Dropped { what: w.what.clone(), offset: w.offset });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::realign::tests::sample_move;
    use crate::realign::Write;
    use std::sync::Mutex;

    /// A disk that forgets unflushed writes at a power cut, and stops
    /// (as a kill would) after a given number of writes and flushes. Reads
    /// change nothing and come from the copy's helper threads in no set
    /// order, so they do not count: a given count is the same crash point
    /// on every run. One lock over it all.
    pub(crate) struct Flaky(Mutex<FlakyState>);

    struct FlakyState {
        durable: Vec<u8>,
        cache: Vec<(u64, Vec<u8>)>,
        ops_left: u64,
    }

    impl FlakyState {
        fn alive(&self) -> io::Result<()> {
            match self.ops_left {
                0 => Err(io::Error::other("killed")),
                _ => Ok(()),
            }
        }

        fn tick(&mut self) -> io::Result<()> {
            self.alive()?;
            self.ops_left -= 1;
            Ok(())
        }

        /// What a power cut leaves: durable bytes plus some unflushed writes.
        fn power_cut(&self, keep_every: usize) -> Vec<u8> {
            let mut img = self.durable.clone();
            for (i, (at, bytes)) in self.cache.iter().enumerate() {
                if keep_every > 0 && i % keep_every == 0 {
                    img[*at as usize..*at as usize + bytes.len()].copy_from_slice(bytes);
                }
            }
            img
        }
    }

    impl Flaky {
        pub(crate) fn new(image: Vec<u8>, ops: u64) -> Flaky {
            Flaky(Mutex::new(FlakyState { durable: image, cache: Vec::new(), ops_left: ops }))
        }

        pub(crate) fn power_cut(&self, keep_every: usize) -> Vec<u8> {
            self.0.lock().unwrap().power_cut(keep_every)
        }
    }

    impl Disk for Flaky {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let d = self.0.lock().unwrap();
            d.alive()?;
            buf.copy_from_slice(&d.power_cut(1)[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }

        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            let mut d = self.0.lock().unwrap();
            d.tick()?;
            d.cache.push((offset, buf.to_vec()));
            Ok(())
        }

        fn flush(&self) -> io::Result<()> {
            let mut d = self.0.lock().unwrap();
            d.tick()?;
            d.durable = d.power_cut(1);
            d.cache.clear();
            Ok(())
        }
    }

    fn image() -> Vec<u8> {
        let mut img = vec![0u8; 300 * 512];
        for (i, b) in img.iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        img
    }

    /// Crash after every number of writes and flushes until the move
    /// finishes, losing a varying share of unflushed writes, then resume
    /// with no limit: the partition's bytes always arrive whole. Shifts
    /// under a chunk pass every chunk through the journal, two named at a
    /// time (or one, in a version 1 journal).
    #[test]
    fn any_crash_then_resume_moves_every_byte() {
        let cases = [
            (63, 64, 512, 2),
            (64, 63, 1024, 2),
            (64, 63, 1024, 1),
            (63, 64, 4096, 2),
            (63, 64, 4096, 1),
            (63, 66, 2048, 2),
            (63, 56, 2048, 2),
            (40, 120, 4096, 2),
            (120, 7, 512, 2),
            (63, 68, 1024, 2),
            (68, 63, 1024, 2),
            (63, 66, 1024, 2),
        ];
        // Side by side: each case on a thread (a panic in one fails the test).
        std::thread::scope(|s| {
            for (old, new, chunk, version) in cases {
                s.spawn(move || {
                    let table_old = vec![1u8; 512];
                    let table_new = vec![2u8; 512];
                    let m = Move {
                        old_start: old,
                        new_start: new,
                        sectors: 100,
                        chunk_bytes: chunk,
                        writes: vec![Write {
                            offset: 0,
                            old: table_old.clone(),
                            new: table_new.clone(),
                            what: "mbr".into(),
                        }],
                        ..sample_move()
                    };
                    let mut original = image();
                    original[..512].copy_from_slice(&table_old);
                    let want = original[old as usize * 512..(old as usize + 100) * 512].to_vec();
                    let mut two_named = false;
                    for crash_after in 0.. {
                        let mut finished = false;
                        for keep in [0, 1, 2] {
                            // tmpfs: thousands of journal flushes, none of them slow.
                            let dir =
                                tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir());
                            let path = dir.as_ref().unwrap().path().join("j");
                            let mut j = match version {
                                1 => super::super::journal::create_version_1(&path, m.clone()),
                                _ => Journal::create(&path, m.clone()).unwrap(),
                            };
                            let disk = Flaky::new(original.clone(), crash_after);
                            // Every other point, chunk 0 as a read check kept it.
                            let kept = (crash_after % 2 == 1).then(|| {
                                let (rel, len) = m.chunk(0);
                                let at = (old * 512 + rel) as usize;
                                let mut buf = AlignedBuf::new(chunk as usize, 0);
                                buf.bytes_mut()[..len as usize]
                                    .copy_from_slice(&original[at..at + len as usize]);
                                buf
                            });
                            let never = || false;
                            finished =
                                run_until(&disk, &mut j, &mut |_| {}, &never, None, kept).is_ok();
                            drop(j);
                            let survivor =
                                if finished { disk.power_cut(1) } else { disk.power_cut(keep) };
                            let disk = Flaky::new(survivor, u64::MAX);
                            let mut j = Journal::open(&path).unwrap();
                            assert_eq!(j.keeps(), version);
                            two_named |= j.state.saved[1].is_some();
                            run(&disk, &mut j, &mut |_| {}).unwrap_or_else(|e| {
                                panic!("{old}->{new}/{chunk} at {crash_after}: {e}")
                            });
                            let img = disk.power_cut(1);
                            let got = &img[new as usize * 512..(new as usize + 100) * 512];
                            assert!(
                                got == want.as_slice(),
                                "{old}->{new}/{chunk} crash at {crash_after}"
                            );
                            assert_eq!(img[..512], table_new[..]);
                            assert_eq!(j.state.phase, Phase::TableWritten);
                        }
                        if finished {
                            break;
                        }
                    }
                    // A chunk's verification trailed the next one's write.
                    let pipelined = version == 2 && m.needs_save(0) && m.chunks() > 2;
                    assert_eq!(two_named, pipelined, "{old}->{new}/{chunk}, version {version}");
                });
            }
        });
    }

    /// A stop request between chunks leaves the journal at the chunk after
    /// the last one written, and the rerun finishes the move.
    #[test]
    fn a_stop_commits_where_it_stopped_and_the_rerun_finishes() {
        let (m, original) = one_sector_right();
        let want = original[63 * 512..163 * 512].to_vec();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::create(&path, m.clone()).unwrap();
        let disk = Flaky::new(original, u64::MAX);
        let ticks = std::cell::Cell::new(0);
        let err = run_until(
            &disk,
            &mut j,
            &mut |_| ticks.set(ticks.get() + 1),
            &|| ticks.get() >= 3,
            None,
            None,
        )
        .unwrap_err();
        // Verified chunks tick too, so the third tick may come after two copied.
        let MoveError::Interrupted { verifying: false, chunks } = err else { panic!("{err}") };
        assert!((2..=3).contains(&chunks), "{chunks}");
        let mut j = Journal::open(&path).unwrap();
        assert_eq!((j.state.phase, j.state.cursor), (Phase::Copying, chunks));
        let survivor = Flaky::new(disk.power_cut(0), u64::MAX);
        run(&survivor, &mut j, &mut |_| {}).unwrap();
        assert!(survivor.power_cut(1)[64 * 512..164 * 512] == want[..]);
    }

    /// What a [`BadSector`] does to the I/O that covers it.
    #[derive(PartialEq)]
    enum Fault {
        /// Reads fail with EIO, as for a pending sector.
        Unreadable,
        /// Writes fail with EIO, as for a sector the drive cannot remap.
        Unwritable,
        /// Writes are acknowledged and dropped, as a lying bridge does.
        Dropped,
    }

    struct BadSector {
        disk: Flaky,
        lba: u64,
        fault: Fault,
    }

    impl BadSector {
        fn covers(&self, len: usize, offset: u64) -> bool {
            (offset..offset + len as u64).contains(&(self.lba * 512))
        }
    }

    fn eio() -> io::Error {
        io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error())
    }

    impl Disk for BadSector {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            if self.fault == Fault::Unreadable && self.covers(buf.len(), offset) {
                return Err(eio());
            }
            self.disk.read_at(buf, offset)
        }

        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            match (&self.fault, self.covers(buf.len(), offset)) {
                (Fault::Unwritable, true) => Err(eio()),
                (Fault::Dropped, true) => Ok(()),
                _ => self.disk.write_at(buf, offset),
            }
        }

        fn flush(&self) -> io::Result<()> {
            self.disk.flush()
        }
    }

    /// An I/O error half-way (a chunk's destination unwritable, or its
    /// source unreadable), in a move whose writes never overwrite a source
    /// (so nothing forced a commit): the journal keeps every chunk before
    /// it, verified, and the rerun goes on from there.
    #[test]
    fn an_io_error_commits_the_chunks_before_it() {
        let m = Move {
            old_start: 63,
            new_start: 200,
            sectors: 100,
            chunk_bytes: 4096,
            ..sample_move()
        };
        let mut original = image();
        original[..512].copy_from_slice(&m.writes[0].old);
        let want = original[63 * 512..163 * 512].to_vec();
        for (fault, start, what) in
            [(Fault::Unwritable, 200, "writing"), (Fault::Unreadable, 63, "reading")]
        {
            let lba = start + m.chunk(5).0 / 512 + 3;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("j");
            let mut j = Journal::create(&path, m.clone()).unwrap();
            let disk = BadSector { disk: Flaky::new(original.clone(), u64::MAX), lba, fault };
            let err = run(&disk, &mut j, &mut |_| {}).unwrap_err().to_string();
            assert!(err.contains(&format!("{what} LBA {lba}")), "{err}");
            let mut j = Journal::open(&path).unwrap();
            assert_eq!((j.state.phase, j.state.cursor), (Phase::Copying, 5), "{what}");
            let survivor = Flaky::new(disk.disk.power_cut(0), u64::MAX);
            run(&survivor, &mut j, &mut |_| {}).unwrap();
            assert!(survivor.power_cut(1)[200 * 512..300 * 512] == want[..], "{what}");
        }
    }

    /// The table's write acknowledged and dropped: the move stops naming
    /// it, still before `TableWritten`, and a rerun writes it.
    #[test]
    fn a_dropped_table_write_is_found_and_the_rerun_writes_it() {
        let (m, original) = one_sector_right();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::create(&path, m.clone()).unwrap();
        let disk =
            BadSector { disk: Flaky::new(original, u64::MAX), lba: 0, fault: Fault::Dropped };
        let err = run(&disk, &mut j, &mut |_| {}).unwrap_err();
        assert!(matches!(&err, MoveError::Dropped { offset: 0, what } if what == "mbr"), "{err}");
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.state.phase, Phase::Verified);
        let survivor = Flaky::new(disk.disk.power_cut(1), u64::MAX);
        run(&survivor, &mut j, &mut |_| {}).unwrap();
        assert_eq!(survivor.power_cut(1)[..512], m.writes[0].new[..]);
        assert_eq!(j.state.phase, Phase::TableWritten);
    }

    /// One sector right in 8-sector chunks: chunk 0 goes to LBAs 156-163,
    /// chunk 1 to 148-155.
    fn one_sector_right() -> (Move, Vec<u8>) {
        let m =
            Move { old_start: 63, new_start: 64, sectors: 100, chunk_bytes: 4096, ..sample_move() };
        let mut original = image();
        original[..512].copy_from_slice(&m.writes[0].old);
        (m, original)
    }

    /// Chunk 1's write is dropped; chunk 2's overwrites the first sector of
    /// chunk 1's source, whose bytes the journal still names. Verification
    /// stops the move before chunk 3's commit would let them go, so a rerun
    /// on an honest disk copies chunk 1 again from the journal and loses
    /// nothing.
    #[test]
    fn a_dropped_write_is_found_before_its_source_is_overwritten() {
        let (m, original) = one_sector_right();
        let want = original[63 * 512..163 * 512].to_vec();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::create(&path, m.clone()).unwrap();
        let disk =
            BadSector { disk: Flaky::new(original, u64::MAX), lba: 150, fault: Fault::Dropped };
        let err = run(&disk, &mut j, &mut |_| {}).unwrap_err();
        assert!(matches!(err, MoveError::Verify { lba: 148, len: 4096, .. }), "{err}");
        let mut j = Journal::open(&path).unwrap();
        // Found after chunk 1's write (cursor 0) or chunk 2's (cursor 1).
        assert!(matches!((j.state.phase, j.state.cursor), (Phase::Copying, 0 | 1)));
        assert!(j.state.saved.iter().flatten().any(|s| s.chunk == 1), "{:?}", j.state);
        let honest = Flaky::new(disk.disk.power_cut(1), u64::MAX);
        assert_eq!(honest.power_cut(1)[..512], m.writes[0].old[..], "the old table stays");
        run(&honest, &mut j, &mut |_| {}).unwrap();
        assert!(honest.power_cut(1)[64 * 512..164 * 512] == want[..]);
    }

    /// A resume verifies the chunks copied before it too: one changed since
    /// is found.
    #[test]
    fn a_resume_rereads_the_chunks_copied_before_it() {
        let (m, original) = one_sector_right();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::create(&path, m.clone()).unwrap();
        let disk = Flaky::new(original, u64::MAX);
        let ticks = std::cell::Cell::new(0);
        let stop = || ticks.get() >= 3;
        run_until(&disk, &mut j, &mut |_| ticks.set(ticks.get() + 1), &stop, None, None)
            .unwrap_err();
        let mut j = Journal::open(&path).unwrap();
        assert!(j.state.cursor >= 2, "chunks 0 and 1 copied");
        let mut survivor = disk.power_cut(0);
        survivor[150 * 512] ^= 0xFF;
        let err = run(&Flaky::new(survivor, u64::MAX), &mut j, &mut |_| {}).unwrap_err();
        assert!(matches!(err, MoveError::Verify { lba: 148, .. }), "{err}");
    }

    #[test]
    fn the_first_bad_sector_is_found_in_a_few_operations() {
        let m = sample_move();
        // Sectors 1000 and 1003 of a 32768-sector chunk fail, every time.
        let bad = [1000u64, 1003];
        for (first_bad_lba, fails) in [(1000, &bad[..]), (1003, &bad[1..]), (32767, &[32767][..])] {
            let mut ops = 0;
            let err = first_bad(
                &m,
                32768 * 512,
                0,
                io::Error::from_raw_os_error(libc::EIO),
                |piece, at| {
                    ops += 1;
                    assert_eq!(at, piece.start as u64, "offset and piece agree");
                    let lbas = at / 512..(at + piece.len() as u64) / 512;
                    match fails.iter().any(|b| lbas.contains(b)) {
                        true => Err(io::Error::from_raw_os_error(libc::ENODATA)),
                        false => Ok(()),
                    }
                },
                "reading",
            );
            assert!(
                matches!(err, MoveError::Io { lba, .. } if lba == first_bad_lba),
                "{err} (expected {first_bad_lba})"
            );
            assert!(err.to_string().contains("No data available"), "the sector's own error: {err}");
            assert!(ops <= 16, "{ops} operations for 32768 sectors");
        }
        // A buffer ending in part of a sector, failing there only.
        let err = first_bad(
            &m,
            3 * 512 + 100,
            0,
            io::Error::from_raw_os_error(libc::EIO),
            |piece, _| {
                if piece.end > 3 * 512 {
                    Err(io::Error::from_raw_os_error(libc::EIO))
                } else {
                    Ok(())
                }
            },
            "writing",
        );
        assert!(matches!(err, MoveError::Io { lba: 3, .. }), "{err}");
    }

    #[test]
    fn an_io_error_names_the_lba_and_a_changed_table_is_refused() {
        let m = Move { chunk_bytes: 4096, ..sample_move() };
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(&dir.path().join("j"), m.clone()).unwrap();
        let disk = Flaky::new(vec![0u8; 200_000 * 512], 0);
        let err = run(&disk, &mut j, &mut |_| {}).unwrap_err().to_string();
        assert!(err.contains("reading LBA 100055"), "{err}");
        let changed = Move {
            writes: vec![Write { old: vec![9; 512], new: vec![8; 512], ..m.writes[0].clone() }],
            ..m
        };
        let disk = Flaky::new(vec![0u8; 4096], u64::MAX);
        let err = write_all(&disk, &changed, &changed.writes).unwrap_err();
        assert!(matches!(err, MoveError::Changed { offset: 0, .. }), "{err}");
        // A region found changed stops the writes before any is made.
        let first =
            Write { offset: 512, old: vec![0; 512], new: vec![7; 512], ..m.writes[0].clone() };
        let writes = [first, changed.writes[0].clone()];
        let err = write_all(&disk, &changed, &writes).unwrap_err();
        assert!(matches!(err, MoveError::Changed { offset: 0, .. }), "{err}");
        assert_eq!(disk.power_cut(1), vec![0u8; 4096], "nothing written");
    }
}
