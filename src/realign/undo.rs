//! Putting back what a stopped move has moved. The chunks already at their
//! new place go back by a move of their own, journaled beside the first
//! ([`path`]), so an undo survives whatever a move survives. The table
//! changes only once the copy is verified, so until then the partition is,
//! once its bytes are back, exactly what it was.

use super::disk::Disk;
use super::journal::{Journal, JournalError, Phase};
use super::{Direction, Move, Write};
use crate::io::AlignedBuf;
use std::path::{Path, PathBuf};

/// Why a move cannot be undone.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UndoError {
    #[error("the move is already {0}")]
    Finished(&'static str),
    #[error(
        "the new table is already written (only telling the kernel is left): the partition is \
         at its new start; finish the move instead"
    )]
    TableWritten,
}

/// The undo's journal for the move journaled at `journal`.
pub fn path(journal: &Path) -> PathBuf {
    let mut p = journal.as_os_str().to_owned();
    p.push(".undo");
    PathBuf::from(p)
}

/// The bytes of the partition at their new place, as (offset inside the
/// partition, length): the chunks before the cursor, in copy order from
/// the end when moving right and from the start when moving left.
pub fn moved(m: &Move, phase: Phase, cursor: u64) -> (u64, u64) {
    let len = m.bytes();
    let done = match phase {
        Phase::Copying => cursor.saturating_mul(m.chunk_bytes).min(len),
        _ => len,
    };
    match m.direction() {
        Direction::Right => (len - done, done),
        Direction::Left => (0, done),
    }
}

/// The move that takes what `j`'s move has moved back to where it was
/// (None when nothing has moved). A verified copy may have some of its
/// fixups and table written: the undo puts their old bytes back first.
pub fn reverse(j: &Journal) -> Result<Option<Move>, UndoError> {
    let m = &j.record;
    match j.state.phase {
        Phase::Copying | Phase::Verified => {}
        Phase::TableWritten => return Err(UndoError::TableWritten),
        Phase::Done => return Err(UndoError::Finished("done")),
        Phase::Undone => return Err(UndoError::Finished("undone")),
    }
    let (rel, len) = moved(m, j.state.phase, j.state.cursor);
    if len == 0 {
        return Ok(None);
    }
    let ss = m.sector_size;
    // In the copy phase no fixup has been written, and a fixup's region
    // inside the destination may still hold what was there before.
    let writes = if j.state.phase == Phase::Verified { &m.writes[..] } else { &[] };
    let before = writes
        .iter()
        .rev()
        .map(|w| Write {
            offset: w.offset,
            old: w.new.clone(),
            new: w.old.clone(),
            what: format!("{} put back", w.what),
        })
        .collect();
    Ok(Some(Move {
        old_start: m.new_start + rel / ss,
        new_start: m.old_start + rel / ss,
        sectors: len / ss,
        before,
        writes: Vec::new(),
        ..m.clone()
    }))
}

/// The chunks at and after `j`'s cursor whose source bytes are saved in
/// the journal: their own writes, or the next chunk's, may have
/// overwritten those sources, so the undo writes them back there first.
/// Each as (byte offset, bytes).
pub(crate) fn saved_chunks(j: &Journal) -> Result<Vec<(u64, AlignedBuf)>, JournalError> {
    let m = &j.record;
    if j.state.phase != Phase::Copying {
        return Ok(Vec::new());
    }
    let saved = j.saved_chunks()?;
    let mut found = Vec::new();
    for k in (j.state.cursor..m.chunks()).take(j.keeps()) {
        let (rel, len) = m.chunk(k);
        let mut buf = AlignedBuf::new(len as usize, 0);
        if saved.read(k, buf.bytes_mut())? {
            found.push((m.old_start * m.sector_size + rel, buf));
        }
    }
    Ok(found)
}

/// Why an undo could not begin.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    #[error(transparent)]
    Undo(#[from] UndoError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("I/O error writing LBA {lba}: {source}")]
    Io { lba: u64, source: std::io::Error },
}

/// Begin undoing the move in `forward` on `disk`: the chunks whose sources
/// may be overwritten get their saved bytes back there, flushed (again on a
/// rerun after a crash here: `forward` still holds them), then the undo's
/// journal is made beside `forward`. None when nothing had moved: then the
/// partition is already as it was.
pub fn begin(forward: &Journal, disk: &dyn Disk) -> Result<Option<Journal>, BeginError> {
    let back = reverse(forward)?;
    let saved = saved_chunks(forward)?;
    for (at, bytes) in &saved {
        let lba = at / forward.record.sector_size.max(1);
        disk.write_at(bytes.bytes(), *at).map_err(|source| BeginError::Io { lba, source })?;
    }
    if let Some((at, _)) = saved.first() {
        let lba = at / forward.record.sector_size.max(1);
        disk.flush().map_err(|source| BeginError::Io { lba, source })?;
    }
    let Some(back) = back else { return Ok(None) };
    Ok(Some(Journal::create(&path(forward.path()), back)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::copy;
    use crate::realign::copy::tests::Flaky;
    use crate::realign::tests::sample_move;
    use std::sync::Mutex;

    /// An in-memory disk whose writes fail once a budget runs out, the
    /// failing one landing half-way (as a cut-off request may).
    struct Mem {
        bytes: Mutex<Vec<u8>>,
        writes_left: Mutex<u64>,
    }

    impl Disk for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            let b = self.bytes.lock().unwrap();
            buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }

        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            let mut left = self.writes_left.lock().unwrap();
            let len = if *left == 0 { buf.len() / 2 } else { buf.len() };
            self.bytes.lock().unwrap()[offset as usize..offset as usize + len]
                .copy_from_slice(&buf[..len]);
            if *left == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            *left -= 1;
            Ok(())
        }

        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Stop a move after every possible number of writes, undo it, and
    /// find every byte of the disk as it was (the partition and the
    /// sectors the move claimed alike hold their bytes again where the
    /// partition was; only the claimed room may differ).
    #[test]
    fn an_undo_after_any_stop_puts_every_byte_back() {
        for (old, new, sectors, chunk) in [
            (63, 64, 40, 1024),
            (63, 2048, 3000, 65536),
            (2048, 63, 3000, 65536),
            (17, 10, 40, 512),
        ] {
            let m = Move {
                old_start: old,
                new_start: new,
                sectors,
                chunk_bytes: chunk,
                writes: Vec::new(),
                identity: crate::realign::Identity {
                    size_bytes: 6000 * 512,
                    serial: None,
                    wwid: None,
                },
                ..sample_move()
            };
            let original: Vec<u8> =
                (0..6000u32 * 512).map(|i| (i / 512 * 7 + i % 251) as u8).collect();
            let part = (old * 512) as usize..((old + sectors) * 512) as usize;
            for budget in 0..m.chunks() * 2 + 1 {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("j");
                let disk =
                    Mem { bytes: Mutex::new(original.clone()), writes_left: Mutex::new(budget) };
                let mut j = Journal::create(&path, m.clone()).unwrap();
                if copy::run(&disk, &mut j, &mut |_| {}).is_ok() {
                    break;
                }
                let j = Journal::open(&path).unwrap();
                *disk.writes_left.lock().unwrap() = u64::MAX;
                if let Some(mut u) = begin(&j, &disk).unwrap() {
                    copy::run(&disk, &mut u, &mut |_| {}).unwrap();
                }
                let now = disk.bytes.lock().unwrap();
                assert!(
                    now[part.clone()] == original[part.clone()],
                    "{old}->{new} by {chunk}, stopped after {budget} writes"
                );
            }
        }
    }

    /// A power cut at every write and flush of the move, then at every
    /// write and flush of its undo (a varying share of unflushed writes
    /// lost each time), then the undo run again from its journals: the
    /// partition's bytes are always back where they were.
    #[test]
    fn any_power_cut_during_an_undo_then_its_rerun_puts_every_byte_back() {
        let image: Vec<u8> = (0..300 * 512).map(|i| (i * 7 % 251) as u8).collect();
        let cases = [
            (63, 64, 1024),
            (64, 63, 1024),
            (40, 120, 1024),
            (120, 7, 2048),
            // 2.5 chunks: the cursor trails a written chunk.
            (63, 68, 1024),
            (68, 63, 1024),
        ];
        for (old, new, chunk) in cases {
            let m = Move {
                old_start: old,
                new_start: new,
                sectors: 24,
                chunk_bytes: chunk,
                writes: Vec::new(),
                ..sample_move()
            };
            let part = old as usize * 512..(old as usize + 24) * 512;
            let mut cuts = 0u64;
            for move_cut in 0.. {
                let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir());
                let path = dir.as_ref().unwrap().path().join("j");
                let disk = Flaky::new(image.clone(), move_cut);
                if copy::run(&disk, &mut Journal::create(&path, m.clone()).unwrap(), &mut |_| {})
                    .is_ok()
                {
                    break;
                }
                let stopped = disk.power_cut(2);
                for undo_cut in 0.. {
                    let disk = Flaky::new(stopped.clone(), undo_cut);
                    let forward = Journal::open(&path).unwrap();
                    let done = begin(&forward, &disk).is_ok_and(|u| {
                        u.is_none_or(|mut u| copy::run(&disk, &mut u, &mut |_| {}).is_ok())
                    });
                    // The rerun: the undo's journal resumed, or begun again.
                    let disk = Flaky::new(disk.power_cut(undo_cut as usize % 3), u64::MAX);
                    let undo = self::path(&path);
                    let mut u = match undo.exists() {
                        true => Some(Journal::open(&undo).unwrap()),
                        false => begin(&forward, &disk).unwrap(),
                    };
                    if let Some(u) = u.as_mut() {
                        copy::run(&disk, u, &mut |_| {}).unwrap();
                    }
                    let now = disk.power_cut(1);
                    assert!(
                        now[part.clone()] == image[part.clone()],
                        "{old}->{new}/{chunk}: move cut at {move_cut}, undo cut at {undo_cut}"
                    );
                    let _ = std::fs::remove_file(&undo);
                    cuts += 1;
                    if done {
                        break;
                    }
                }
            }
            // At least a cut at each chunk's write, whatever else a run writes.
            assert!(cuts >= m.chunks(), "{old}->{new}/{chunk}: only {cuts} cuts");
        }
    }

    #[test]
    fn a_written_table_or_a_finished_move_is_not_undone() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(&dir.path().join("j"), sample_move()).unwrap();
        assert_eq!(reverse(&j).unwrap(), None, "nothing moved yet");
        j.checksums = vec![0; j.record.chunks() as usize];
        j.commit(Phase::Verified, j.record.chunks(), &[]).unwrap();
        let back = reverse(&j).unwrap().unwrap();
        assert_eq!((back.old_start, back.new_start, back.sectors), (64, 63, 100_000));
        assert_eq!(back.before[0].new, j.record.writes[0].old, "the table put back first");
        j.commit(Phase::TableWritten, j.record.chunks(), &[]).unwrap();
        assert_eq!(reverse(&j), Err(UndoError::TableWritten));
        j.commit(Phase::Done, j.record.chunks(), &[]).unwrap();
        assert_eq!(reverse(&j), Err(UndoError::Finished("done")));
    }
}
