//! Moving a misaligned partition to an aligned start in place, so that a
//! crash, kill, I/O error or power cut at any moment leaves a state the
//! next run completes.
//!
//! Order: choose where the partition goes ([`place`]) → create the journal
//! ([`journal`]) → copy chunk by chunk, backwards when moving right, each
//! chunk whose source the destination overlaps saved in the journal first
//! ([`copy`]), each chunk reread from its destination (on a thread beside
//! the copy) against a checksum taken while reading; once every chunk
//! matches → write the contents fixups and the new table → tell the kernel
//! → mark the journal done. A logical partition whose destination covers
//! its EBR has the EBR moved first ([`Move::before`]): a table change that
//! leaves every partition where it is, so any crash during it is harmless.

pub mod boot;
pub mod copy;
pub mod disk;
pub mod grub;
pub mod guard;
pub mod initramfs;
pub mod journal;
pub mod layers;
pub mod place;
pub mod prepare;
pub mod rescue;
pub mod scan;
pub mod session;
pub mod state;
pub mod undo;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Bytes copied per step: large enough that flushes cost little, small
/// enough that memory stays bounded whatever the partition size.
pub(crate) const CHUNK_BYTES: u64 = 16 << 20;

pub use crate::device::Identity;

/// Bytes to write at a byte offset of the target once the copy is verified,
/// and what was there before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub offset: u64,
    #[serde(with = "hex")]
    pub old: Vec<u8>,
    #[serde(with = "hex")]
    pub new: Vec<u8>,
    pub what: String,
}

/// One partition's move, as recorded in its journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The target as named when the move began (information only).
    pub target: PathBuf,
    pub identity: Identity,
    pub partition: u32,
    pub sector_size: u64,
    pub old_start: u64,
    pub new_start: u64,
    pub sectors: u64,
    pub chunk_bytes: u64,
    /// What the partition holds (libblkid's name), when recognised.
    pub contents: Option<String>,
    /// Before the copy, in order: a logical's EBR moved out of the way of
    /// its destination (the copy, then the link to it), the partition
    /// still where it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<Write>,
    /// After the copy, in order: the contents fixups, then the new table.
    pub writes: Vec<Write>,
}

/// Why a move record cannot be trusted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidMove {
    #[error("sector size {0}")]
    SectorSize(u64),
    #[error("chunk size {0}")]
    ChunkSize(u64),
    #[error("the partition lies beyond the disk")]
    BeyondDisk,
    #[error("the {what} write at byte {offset} is malformed")]
    MalformedWrite { what: String, offset: u64 },
}

/// Which direction bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Left,
    Right,
}

impl Move {
    /// Check a record before trusting it (one read back from a journal may
    /// be anything): every offset the move computes must lie on the disk,
    /// so the arithmetic that follows cannot overflow.
    pub(crate) fn validate(&self) -> Result<(), InvalidMove> {
        let ss = self.sector_size;
        if !crate::units::is_sector_size(ss, 4096) {
            return Err(InvalidMove::SectorSize(ss));
        }
        if self.chunk_bytes == 0 || self.chunk_bytes % ss != 0 || self.chunk_bytes > 64 << 20 {
            return Err(InvalidMove::ChunkSize(self.chunk_bytes));
        }
        let disk = self.identity.size_bytes;
        let fits = |start: u64| {
            start
                .checked_add(self.sectors)
                .and_then(|e| e.checked_mul(ss))
                .is_some_and(|e| e <= disk)
        };
        if self.sectors == 0 || !fits(self.old_start) || !fits(self.new_start) {
            return Err(InvalidMove::BeyondDisk);
        }
        for w in self.before.iter().chain(&self.writes) {
            let len = w.old.len() as u64;
            let end = w.offset.checked_add(len);
            if w.new.len() != w.old.len()
                || len % ss != 0
                || w.offset % ss != 0
                || end.is_none_or(|e| e > disk)
            {
                return Err(InvalidMove::MalformedWrite { what: w.what.clone(), offset: w.offset });
            }
        }
        Ok(())
    }

    pub fn bytes(&self) -> u64 {
        self.sectors.saturating_mul(self.sector_size)
    }

    pub fn chunks(&self) -> u64 {
        self.bytes().div_ceil(self.chunk_bytes.max(1))
    }

    pub(crate) fn direction(&self) -> Direction {
        if self.new_start > self.old_start {
            Direction::Right
        } else {
            Direction::Left
        }
    }

    /// The shift in bytes.
    pub fn shift_bytes(&self) -> u64 {
        self.new_start.abs_diff(self.old_start).saturating_mul(self.sector_size)
    }

    /// Chunk `k` in copy order as (offset inside the partition, length):
    /// from the end when moving right, so no source is overwritten before
    /// it is read, from the start when moving left.
    pub fn chunk(&self, k: u64) -> (u64, u64) {
        let (len, c) = (self.bytes(), self.chunk_bytes.max(1));
        let from = k.saturating_mul(c).min(len);
        let to = from.saturating_add(c).min(len);
        match self.direction() {
            Direction::Left => (from, to - from),
            Direction::Right => (len - to, to - from),
        }
    }

    fn source(&self, k: u64) -> std::ops::Range<u64> {
        let (rel, len) = self.chunk(k);
        let at = self.old_start * self.sector_size + rel;
        at..at + len
    }

    fn destination(&self, k: u64) -> std::ops::Range<u64> {
        let (rel, len) = self.chunk(k);
        let at = self.new_start * self.sector_size + rel;
        at..at + len
    }

    /// `w` lands on the source of chunk 0 (in copy order).
    pub(crate) fn first_source_meets(&self, w: &Write) -> bool {
        let len = u64::try_from(w.new.len()).unwrap_or(u64::MAX);
        overlap(&(w.offset..w.offset.saturating_add(len)), &self.source(0))
    }

    /// Writing chunk `k` overwrites its own source: its bytes must be in
    /// the journal first.
    pub fn needs_save(&self, k: u64) -> bool {
        overlap(&self.source(k), &self.destination(k))
    }

    /// Writing chunk `k` overwrites the source of a chunk in
    /// `committed..k`, which must therefore be recorded done first.
    pub fn needs_commit(&self, committed: u64, k: u64) -> bool {
        if committed >= k {
            return false;
        }
        let (a, b) = (self.source(committed), self.source(k - 1));
        let done = a.start.min(b.start)..a.end.max(b.end);
        overlap(&done, &self.destination(k))
    }

    /// The least cursor that lets chunk `k` be written after `committed`:
    /// the chunks before it are those whose sources `k`'s destination
    /// overwrites, so the ones after may still be copied again from their
    /// sources, and their verification can trail `k`'s write. Always past a
    /// saved chunk: its own write overwrote its source.
    pub fn cursor_for(&self, committed: u64, k: u64) -> u64 {
        let saved = (committed..k).rev().find(|&j| self.needs_save(j)).map_or(committed, |j| j + 1);
        (saved..k).find(|&j| !self.needs_commit(j, k)).unwrap_or(k)
    }
}

/// The chunk of a move of `shift` bytes, at most `max`. Where the shift is
/// one to two chunks, each write would overwrite the tail of the chunk
/// before it, which would then have to be verified first: the chunk is cut
/// to half the shift (in 4 KiB), so that only the one before that must.
pub(crate) fn chunk_for(max: u64, shift: u64) -> u64 {
    let half = shift / 2 / 4096 * 4096;
    if shift >= max && shift < max.saturating_mul(2) && half >= 4096 {
        half
    } else {
        max
    }
}

fn overlap(a: &std::ops::Range<u64>, b: &std::ops::Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Byte strings as hexadecimal text in the journal's JSON record.
mod hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::units::hex(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        let digits = text.as_bytes();
        if digits.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd number of hex digits"));
        }
        digits
            .chunks_exact(2)
            .map(|pair| {
                let pair = std::str::from_utf8(pair).map_err(serde::de::Error::custom)?;
                u8::from_str_radix(pair, 16).map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_move() -> Move {
        Move {
            target: "disk.img".into(),
            identity: Identity { size_bytes: 1 << 30, serial: None, wwid: None },
            partition: 1,
            sector_size: 512,
            old_start: 63,
            new_start: 64,
            sectors: 100_000,
            chunk_bytes: 1 << 20,
            contents: Some("ext4".into()),
            before: Vec::new(),
            writes: vec![Write {
                offset: 0,
                old: [&[0, 0xAB][..], &[0; 510]].concat(),
                new: [&[1, 2][..], &[0; 510]].concat(),
                what: "mbr".into(),
            }],
        }
    }

    #[test]
    fn the_record_survives_json() {
        let m = sample_move();
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"old\":\"00ab00"), "{json}");
        assert_eq!(serde_json::from_str::<Move>(&json).unwrap(), m);
        assert!(serde_json::from_str::<Move>(&json.replace("00ab", "0ab")).is_err());
        m.validate().unwrap();
    }

    #[test]
    fn records_that_would_overflow_are_rejected() {
        let m = sample_move();
        for bad in [
            Move { sector_size: 100, ..m.clone() },
            Move { chunk_bytes: 0, ..m.clone() },
            Move { chunk_bytes: 1 << 30, ..m.clone() },
            Move { new_start: u64::MAX - 5, ..m.clone() },
            Move { sectors: u64::MAX / 2, ..m.clone() },
            Move { sectors: 0, ..m.clone() },
            Move {
                writes: vec![Write { offset: u64::MAX - 100, ..m.writes[0].clone() }],
                ..m.clone()
            },
            Move { writes: vec![Write { new: vec![1], ..m.writes[0].clone() }], ..m.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    /// A shift of one to two chunks gets chunks of half the shift, in 4 KiB;
    /// any other keeps the chunk asked for.
    #[test]
    fn a_shift_under_two_chunks_halves_the_chunk() {
        let mib = 1 << 20;
        assert_eq!(chunk_for(16 * mib, 32 * mib - 63 * 512), 16 * mib - 16 * 1024);
        assert_eq!(chunk_for(16 * mib, 16 * mib), 8 * mib);
        for shift in [512, 16 * mib - 512, 32 * mib, 1 << 40] {
            assert_eq!(chunk_for(16 * mib, shift), 16 * mib, "{shift}");
        }
        assert_eq!(chunk_for(4096, 6144), 4096, "no chunk under 4 KiB");
    }

    /// The cursor goes only past the chunks whose sources the next write
    /// overwrites, and never leaves a saved chunk behind it.
    #[test]
    fn the_cursor_passes_only_the_chunks_a_write_overwrites() {
        let m = |new: u64| Move {
            old_start: 63,
            new_start: new,
            sectors: 40,
            chunk_bytes: 1024,
            ..sample_move()
        };
        // 2.5 chunks: chunk 5 overwrites the sources of chunks 2 and 3.
        assert_eq!(m(68).cursor_for(0, 5), 4);
        assert_eq!(m(68).cursor_for(4, 5), 4);
        // 1.5 chunks: chunk 5 overwrites chunk 4's source too.
        assert_eq!(m(66).cursor_for(0, 5), 5);
        // Half a chunk: every chunk is saved, the cursor on the last written.
        assert_eq!(m(64).cursor_for(3, 5), 5);
    }

    #[test]
    fn chunks_cover_the_partition_once_in_copy_order() {
        for (old, new, sectors) in [(63, 64, 5000), (2048, 63, 4097), (34, 2048, 1), (63, 56, 2048)]
        {
            let m = Move {
                old_start: old,
                new_start: new,
                sectors,
                chunk_bytes: 4096,
                ..sample_move()
            };
            let mut seen = vec![false; m.bytes() as usize / 512];
            for k in 0..m.chunks() {
                let (rel, len) = m.chunk(k);
                for s in rel / 512..(rel + len) / 512 {
                    assert!(!std::mem::replace(&mut seen[s as usize], true));
                }
            }
            assert!(seen.iter().all(|&s| s), "{old}->{new}");
        }
    }

    /// Simulates the copy on sector labels, with the engine's rules, and
    /// checks no chunk reads a source that was overwritten before it was
    /// either recorded done or saved, and that a crash after any write
    /// resumes at a cursor from which every chunk not saved finds its
    /// source whole.
    #[test]
    fn commit_and_save_rules_never_read_a_clobbered_source() {
        let shifts = [
            (63, 64),
            (64, 63),
            (63, 2048),
            (2048, 63),
            (10, 17),
            (17, 10),
            (0, 3),
            (63, 68),
            (68, 63),
        ];
        for (old, new) in shifts {
            for chunk in [512, 1024, 4096] {
                let m = Move {
                    old_start: old,
                    new_start: new,
                    sectors: 40,
                    chunk_bytes: chunk,
                    ..sample_move()
                };
                let mut disk: Vec<i64> = (0..3000).map(|i| -i - 1).collect();
                for s in 0..40 {
                    disk[(old + s) as usize] = s as i64;
                }
                let mut committed = 0;
                for k in 0..m.chunks() {
                    if m.needs_save(k) {
                        committed = k;
                    } else if m.needs_commit(committed, k) {
                        committed = m.cursor_for(committed, k);
                    }
                    let src = m.source(k);
                    let data: Vec<i64> =
                        (src.start / 512..src.end / 512).map(|s| disk[s as usize]).collect();
                    let dst = m.destination(k);
                    for (i, s) in (dst.start / 512..dst.end / 512).enumerate() {
                        disk[s as usize] = data[i];
                    }
                    for j in (committed..m.chunks()).filter(|&j| !m.needs_save(j)) {
                        let src = m.source(j);
                        let whole = (src.start / 512..src.end / 512)
                            .all(|s| disk[s as usize] == (s - old * 512 / 512) as i64);
                        assert!(whole, "{old}->{new} by {chunk}: chunk {j} after {k}");
                    }
                }
                let moved: Vec<i64> = (new..new + 40).map(|s| disk[s as usize]).collect();
                assert_eq!(moved, (0..40).collect::<Vec<_>>(), "{old}->{new} by {chunk}");
            }
        }
    }
}
