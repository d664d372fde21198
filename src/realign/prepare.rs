//! Everything a move will write, worked out before anything is: the
//! contents fixups (FAT, NTFS, exFAT record their own start) and the new
//! table, each with the bytes it replaces.

use super::place::Placement;
use super::{Identity, Move, Write, CHUNK_BYTES};
use crate::io::ReadAt;
use crate::stack::{self, Contents};
use crate::table::edit::{self, EditError};
use crate::table::write::{self, TableBytes};
use crate::table::{self, Layout, Partition, TableError};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error("partition {0}: {1}")]
    Contents(u32, stack::StackError),
    #[error("cannot read the bytes a write would replace: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Table(#[from] TableError),
}

/// A move ready to journal, with what the partition holds.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub record: Move,
    pub contents: Option<Contents>,
    /// Fixups made, in words.
    pub notes: Vec<String>,
}

pub fn prepare(
    dev: &dyn ReadAt,
    target: &Path,
    layout: &Layout,
    placement: &Placement,
    identity: Identity,
) -> Result<Prepared, PrepareError> {
    let before = match placement.ebr {
        Some(new_ebr) => ebr_writes(dev, layout, &placement.partition, new_ebr)?,
        None => Vec::new(),
    };
    // Everything after is worked out on the disk as the EBR's move leaves it.
    let moved = Overlay { base: dev, writes: &before };
    let dev: &dyn ReadAt = &moved;
    let relinked;
    let (layout, p) = match placement.ebr {
        None => (layout, &placement.partition),
        Some(new_ebr) => {
            relinked = table::read(dev, layout.sector_size, identity.size_bytes)?;
            // Every partition where it was, read the same way: only an EBR moved.
            let rows = |l: &Layout| -> Vec<_> {
                l.partitions.iter().map(|q| (q.number, q.start, q.size, q.kind)).collect()
            };
            if rows(&relinked) != rows(layout) || relinked.problems.len() != layout.problems.len() {
                let why = "moving its EBR would change how the table reads";
                return Err(EditError::Range(placement.partition.number, new_ebr, why).into());
            }
            let n = placement.partition.number;
            let p = relinked.partitions.iter().find(|q| q.number == n && q.ebr == placement.ebr);
            let p = p.ok_or(EditError::Stale(n))?;
            (&relinked, p)
        }
    };
    let ss = layout.sector_size;
    let overflow = || EditError::Range(p.number, placement.new_start, "beyond any byte offset");
    let offset = p.start.checked_mul(ss).ok_or_else(overflow)?;
    let new_offset = placement.new_start.checked_mul(ss).ok_or_else(overflow)?;
    let bytes = p.size.checked_mul(ss).ok_or_else(overflow)?;
    let contents = stack::identify(dev, offset, bytes)?;
    let (patches, notes) =
        stack::start_fixups(dev, offset, bytes, ss, p.start, placement.new_start)
            .map_err(|e| PrepareError::Contents(p.number, e))?;
    let mut writes: Vec<Write> = patches
        .into_iter()
        .map(|patch| Write {
            offset: new_offset + patch.offset,
            old: patch.old,
            new: patch.new,
            what: patch.what,
        })
        .collect();
    let mut table = edit::read_bytes(dev, layout)?;
    table.move_start(p, placement.new_start)?;
    writes.extend(table_writes(dev, &table)?);
    let record = Move {
        target: target.to_path_buf(),
        identity,
        partition: p.number,
        sector_size: ss,
        old_start: p.start,
        new_start: placement.new_start,
        sectors: p.size,
        chunk_bytes: CHUNK_BYTES,
        contents: contents.as_ref().map(|c| c.name.to_string()),
        before,
        writes,
    };
    Ok(Prepared { record, contents, notes })
}

/// The writes that move `p`'s EBR to `new_ebr`, the partition staying put:
/// the EBR's copy first, then the link to it.
fn ebr_writes(
    dev: &dyn ReadAt,
    layout: &Layout,
    p: &Partition,
    new_ebr: u64,
) -> Result<Vec<Write>, PrepareError> {
    let ext = super::place::extended(layout, p).ok_or(EditError::Stale(p.number))?;
    let mut table = edit::read_bytes(dev, layout)?;
    table.move_ebr(p, new_ebr, ext)?;
    let mut writes = table_writes(dev, &table)?;
    writes.retain(|w| w.old != w.new);
    Ok(writes)
}

/// `table`'s writes in the writer's order, each with the bytes it
/// replaces (checked again before it is made).
fn table_writes(dev: &dyn ReadAt, table: &TableBytes) -> Result<Vec<Write>, PrepareError> {
    let mut out = Vec::new();
    for chunk in write::encode(table) {
        let mut old = vec![0u8; chunk.bytes.len()];
        dev.read_exact_at(&mut old, chunk.offset)?;
        out.push(Write { offset: chunk.offset, old, new: chunk.bytes, what: chunk.what.into() });
    }
    Ok(out)
}

/// `base` as it will read once `writes` are made.
struct Overlay<'a> {
    base: &'a dyn ReadAt,
    writes: &'a [Write],
}

impl ReadAt for Overlay<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.base.read_exact_at(buf, offset)?;
        let end = offset.saturating_add(buf.len() as u64);
        for w in self.writes {
            let w_end = w.offset.saturating_add(w.new.len() as u64);
            let (from, to) = (offset.max(w.offset), end.min(w_end));
            if from < to {
                let src = (from - w.offset) as usize..(to - w.offset) as usize;
                buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(&w.new[src]);
            }
        }
        Ok(())
    }
}
