//! Carrying out a journaled move from wherever its journal says it stands:
//! copy, verify, write the fixups and the table. Every step can be cut
//! short at any moment and run again.

use super::journal::{Journal, JournalError, Phase};
use super::{Move, Write};
use crate::io::AlignedBuf;
use std::io;
use std::time::{Duration, Instant};

/// Record progress at least this often, so a rerun redoes little.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// Where a move's bytes go: a block device or an image file.
pub trait Disk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make every write so far durable (the drive's cache included).
    fn flush(&self) -> io::Result<()>;
}

impl Disk for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.sync_data()
    }
}

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

/// Retry sector by sector (aligned buffers stay aligned: each piece
/// starts a whole sector into the buffer) until one fails.
fn first_bad(
    m: &Move,
    len: usize,
    offset: u64,
    first: io::Error,
    mut op: impl FnMut(std::ops::Range<usize>, u64) -> io::Result<()>,
    what: &'static str,
) -> MoveError {
    let ss = m.sector_size.max(512) as usize;
    for at in (0..len).step_by(ss) {
        if let Err(source) = op(at..(at + ss).min(len), offset + at as u64) {
            return io_at(what, offset + at as u64, m, source);
        }
    }
    io_at(what, offset, m, first)
}

/// Run the move in `journal` from where it stands up to and including the
/// table. `tick` hears of every byte copied or verified.
pub fn run(
    disk: &dyn Disk,
    journal: &mut Journal,
    tick: &mut dyn FnMut(u64),
) -> Result<(), MoveError> {
    run_until(disk, journal, tick, &|| false)
}

/// [`run`], but polling `stop` between chunks: when it says so, the move
/// stops with [`MoveError::Interrupted`] once the journal records every
/// chunk written so far, so a rerun redoes nothing. The table writes, a
/// few sectors, are never cut short.
pub fn run_until(
    disk: &dyn Disk,
    journal: &mut Journal,
    tick: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
) -> Result<(), MoveError> {
    if journal.state.phase == Phase::Copying {
        // Again on every resume: writes already made are skipped.
        write_all(disk, &journal.record, &journal.record.before)?;
        copy(disk, journal, tick, stop)?;
        verify(disk, journal, tick, stop)?;
        journal.commit(Phase::Verified, journal.record.chunks(), None)?;
    }
    if journal.state.phase == Phase::Verified {
        write_all(disk, &journal.record, &journal.record.writes)?;
        journal.commit(Phase::TableWritten, journal.record.chunks(), None)?;
    }
    Ok(())
}

/// Copy the chunks after the cursor. Before a destination write may
/// clobber a source not yet recorded as moved, the device is flushed and
/// the cursor committed; a chunk that clobbers its own source is saved in
/// the journal (and committed) first.
fn copy(
    disk: &dyn Disk,
    j: &mut Journal,
    tick: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
) -> Result<(), MoveError> {
    let m = j.record.clone();
    let first = j.state.cursor;
    let mut committed = first;
    j.checksums.truncate(first as usize);
    let mut buf = AlignedBuf::new(m.chunk_bytes as usize, 0);
    let (mut dirty, mut last_commit) = (false, Instant::now());
    for k in first..m.chunks() {
        let (rel, len) = m.chunk(k);
        let data = &mut buf.bytes_mut()[..len as usize];
        let src = m.old_start * m.sector_size + rel;
        match j.saved(k)? {
            Some(saved) if saved.len() == data.len() => data.copy_from_slice(&saved),
            _ => read(disk, data, src, &m, "reading")?,
        }
        j.checksums.push(crc32fast::hash(data));
        let save = m.needs_save(k);
        if save || m.needs_commit(committed, k) {
            if dirty {
                disk.flush().map_err(|e| io_at("flushing after", src, &m, e))?;
            }
            let saved = if save { Some(j.save(k, data)?) } else { None };
            j.commit(Phase::Copying, k, saved)?;
            (committed, last_commit) = (k, Instant::now());
        }
        let dst = m.new_start * m.sector_size + rel;
        write(disk, data, dst, &m)?;
        dirty = true;
        tick(len);
        let stopping = stop();
        if stopping || last_commit.elapsed() >= COMMIT_EVERY {
            disk.flush().map_err(|e| io_at("flushing after", dst, &m, e))?;
            j.commit(Phase::Copying, k + 1, None)?;
            (committed, last_commit, dirty) = (k + 1, Instant::now(), false);
        }
        if stopping && k + 1 < m.chunks() {
            return Err(MoveError::Interrupted { verifying: false, chunks: k + 1 });
        }
    }
    disk.flush().map_err(|e| io_at("flushing after", m.new_start * m.sector_size, &m, e))?;
    j.commit(Phase::Copying, m.chunks(), None)?;
    Ok(())
}

/// Reread every chunk at its destination and compare it with the checksum
/// taken when it was read from its source.
fn verify(
    disk: &dyn Disk,
    j: &Journal,
    tick: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
) -> Result<(), MoveError> {
    let m = &j.record;
    let mut buf = AlignedBuf::new(m.chunk_bytes as usize, 0);
    for k in 0..m.chunks() {
        // Only reads so far: stopping anywhere here loses nothing.
        if stop() {
            return Err(MoveError::Interrupted { verifying: true, chunks: k });
        }
        let (rel, len) = m.chunk(k);
        let data = &mut buf.bytes_mut()[..len as usize];
        let dst = m.new_start * m.sector_size + rel;
        read(disk, data, dst, m, "verifying")?;
        let found = crc32fast::hash(data);
        let expected = j.checksums.get(k as usize).copied().unwrap_or(!found);
        if found != expected {
            return Err(MoveError::Verify { lba: dst / m.sector_size, len, found, expected });
        }
        tick(len);
    }
    Ok(())
}

/// `writes` of `m` in the recorded order, each flushed before the next. A
/// region already holding its new bytes was written before a crash; one
/// holding neither old nor new means the disk is not the one the journal
/// was made for, or something else wrote to it: checked for every region
/// before any is written, so such a disk is left as it was found.
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
        pending.push((w.offset, now));
    }
    for (offset, bytes) in pending {
        disk.write_at(bytes.bytes(), offset).map_err(|e| io_at("writing", offset, m, e))?;
        disk.flush().map_err(|e| io_at("flushing after", offset, m, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::tests::sample_move;
    use crate::realign::Write;
    use std::cell::RefCell;

    /// A disk that forgets unflushed writes at a power cut, and stops
    /// (as a kill would) after a given number of operations.
    struct Flaky {
        durable: RefCell<Vec<u8>>,
        cache: RefCell<Vec<(u64, Vec<u8>)>>,
        ops_left: RefCell<u64>,
    }

    impl Flaky {
        fn new(image: Vec<u8>, ops: u64) -> Flaky {
            Flaky {
                durable: RefCell::new(image),
                cache: RefCell::new(Vec::new()),
                ops_left: RefCell::new(ops),
            }
        }

        fn tick(&self) -> io::Result<()> {
            let mut left = self.ops_left.borrow_mut();
            if *left == 0 {
                return Err(io::Error::other("killed"));
            }
            *left -= 1;
            Ok(())
        }

        /// What a power cut leaves: durable bytes plus some unflushed writes.
        fn power_cut(&self, keep_every: usize) -> Vec<u8> {
            let mut img = self.durable.borrow().clone();
            for (i, (at, bytes)) in self.cache.borrow().iter().enumerate() {
                if keep_every > 0 && i % keep_every == 0 {
                    img[*at as usize..*at as usize + bytes.len()].copy_from_slice(bytes);
                }
            }
            img
        }
    }

    impl Disk for Flaky {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.tick()?;
            buf.copy_from_slice(&self.power_cut(1)[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }

        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.tick()?;
            self.cache.borrow_mut().push((offset, buf.to_vec()));
            Ok(())
        }

        fn flush(&self) -> io::Result<()> {
            self.tick()?;
            let img = self.power_cut(1);
            *self.durable.borrow_mut() = img;
            self.cache.borrow_mut().clear();
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

    /// Crash after every possible number of operations, losing a varying
    /// share of unflushed writes, then resume with unlimited operations:
    /// the partition's bytes always arrive whole.
    #[test]
    fn any_crash_then_resume_moves_every_byte() {
        let cases = [(63, 64, 512), (64, 63, 1024), (63, 56, 2048), (40, 120, 4096), (120, 7, 512)];
        for (old, new, chunk) in cases {
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
            for crash_after in (0..400).step_by(3) {
                for keep in [0, 1, 2] {
                    // tmpfs: thousands of journal flushes, none of them slow.
                    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir());
                    let path = dir.as_ref().unwrap().path().join("j");
                    let mut j = Journal::create(&path, m.clone()).unwrap();
                    let disk = Flaky::new(original.clone(), crash_after);
                    let finished = run(&disk, &mut j, &mut |_| {}).is_ok();
                    drop(j);
                    let survivor = if finished { disk.power_cut(1) } else { disk.power_cut(keep) };
                    let disk = Flaky::new(survivor, u64::MAX);
                    let mut j = Journal::open(&path).unwrap();
                    run(&disk, &mut j, &mut |_| {})
                        .unwrap_or_else(|e| panic!("{old}->{new}/{chunk} at {crash_after}: {e}"));
                    let img = disk.power_cut(1);
                    let got = &img[new as usize * 512..(new as usize + 100) * 512];
                    assert!(got == want.as_slice(), "{old}->{new}/{chunk} crash at {crash_after}");
                    assert_eq!(img[..512], table_new[..]);
                    assert_eq!(j.state.phase, Phase::TableWritten);
                }
            }
        }
    }

    /// A stop request between chunks leaves the journal at the chunk after
    /// the last one written, and the rerun finishes the move.
    #[test]
    fn a_stop_commits_where_it_stopped_and_the_rerun_finishes() {
        let m =
            Move { old_start: 63, new_start: 64, sectors: 100, chunk_bytes: 4096, ..sample_move() };
        let mut original = image();
        original[..512].copy_from_slice(&m.writes[0].old);
        let want = original[63 * 512..163 * 512].to_vec();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::create(&path, m.clone()).unwrap();
        let disk = Flaky::new(original, u64::MAX);
        let ticks = std::cell::Cell::new(0);
        let err =
            run_until(&disk, &mut j, &mut |_| ticks.set(ticks.get() + 1), &|| ticks.get() >= 3)
                .unwrap_err();
        assert!(matches!(err, MoveError::Interrupted { verifying: false, chunks: 3 }), "{err}");
        let mut j = Journal::open(&path).unwrap();
        assert_eq!((j.state.phase, j.state.cursor), (Phase::Copying, 3));
        let survivor = Flaky::new(disk.power_cut(0), u64::MAX);
        run(&survivor, &mut j, &mut |_| {}).unwrap();
        assert!(survivor.power_cut(1)[64 * 512..164 * 512] == want[..]);
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
