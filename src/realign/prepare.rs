//! Everything a move will write, worked out before anything is: the
//! contents fixups (FAT, NTFS, exFAT record their own start) and the new
//! table, each with the bytes it replaces.

use super::place::Placement;
use super::{Identity, Move, Write};
use crate::io::ReadAt;
use crate::stack;
use crate::table::edit::{self, EditError};
use crate::table::write::{self, TableBytes};
use crate::table::{self, Layout, PartKind, Partition, TableError};
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
pub(crate) struct Prepared {
    pub record: Move,
    /// Fixups made, in words.
    pub notes: Vec<String>,
}

pub(crate) fn prepare(
    dev: &dyn ReadAt,
    target: &Path,
    layout: &Layout,
    placement: &Placement,
    identity: Identity,
    chunk_bytes: u64,
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
            // Every partition where it was at every step: only an EBR moves.
            let size = identity.size_bytes;
            if !crash_safe(moved.base, layout.sector_size, size, &before, &[rows(layout)]) {
                let why = "moving its EBR would change how the table reads";
                return Err(EditError::Range(placement.partition.number, new_ebr, why).into());
            }
            relinked = table::read(dev, layout.sector_size, size)?;
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
    writes.extend(crash_safe_order(dev, layout, p, placement.new_start, &table, &identity)?);
    let record = Move {
        target: target.to_path_buf(),
        identity,
        partition: p.number,
        sector_size: ss,
        old_start: p.start,
        new_start: placement.new_start,
        sectors: p.size,
        chunk_bytes: super::chunk_for(chunk_bytes, new_offset.abs_diff(offset)),
        contents: contents.as_ref().map(|c| c.name.to_string()),
        before,
        writes,
    };
    Ok(Prepared { record, notes })
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
    for chunk in write::encode_table(table) {
        let mut old = vec![0u8; chunk.bytes.len()];
        dev.read_exact_at(&mut old, chunk.offset)?;
        out.push(Write { offset: chunk.offset, old, new: chunk.bytes, what: chunk.what.into() });
    }
    Ok(out)
}

/// What a reader makes of a table: (number, start, size, kind) of each
/// partition.
type Rows = Vec<(u32, u64, u64, PartKind)>;

fn rows(l: &Layout) -> Rows {
    l.partitions.iter().map(|q| (q.number, q.start, q.size, q.kind)).collect()
}

/// Whether a crash after any of `writes` (none, some, all) leaves `dev`
/// with a table that reads as one of `states`.
fn crash_safe(dev: &dyn ReadAt, ss: u64, size: u64, writes: &[Write], states: &[Rows]) -> bool {
    (0..=writes.len()).all(|n| {
        let view = Overlay { base: dev, writes: &writes[..n] };
        table::read(&view, ss, size).is_ok_and(|l| states.contains(&rows(&l)))
    })
}

/// `table`'s writes (`p` moved to `new_start`) in an order after any prefix
/// of which the table reads with `p` at its old start or its new one, every
/// other partition where it was: the writer's order, else with the EBRs
/// first-first (a logical in an EBR's third or fourth slot must fit its
/// link: one moving right needs the link grown first).
fn crash_safe_order(
    dev: &dyn ReadAt,
    layout: &Layout,
    p: &Partition,
    new_start: u64,
    table: &TableBytes,
    identity: &Identity,
) -> Result<Vec<Write>, PrepareError> {
    let old = rows(layout);
    let mut new = old.clone();
    new.iter_mut().filter(|r| r.0 == p.number).for_each(|r| r.1 = new_start);
    let states = [old, new];
    let writes = table_writes(dev, table)?;
    let mut ebrs_first_first = writes.clone();
    let at: Vec<usize> = (0..writes.len()).filter(|&i| writes[i].what == "ebr").collect();
    for (&i, &j) in at.iter().zip(at.iter().rev()) {
        ebrs_first_first[i] = writes[j].clone();
    }
    let (ss, size) = (layout.sector_size, identity.size_bytes);
    [writes, ebrs_first_first]
        .into_iter()
        .find(|w| crash_safe(dev, ss, size, w, &states))
        .ok_or_else(|| {
            let why = "no order of its table writes keeps every partition readable after a crash";
            EditError::Range(p.number, new_start, why).into()
        })
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
