//! Everything a move will write, worked out before anything is: the
//! contents fixups (FAT, NTFS, exFAT record their own start) and the new
//! table, each with the bytes it replaces.

use super::place::Placement;
use super::{Identity, Move, Write, CHUNK_BYTES};
use crate::io::ReadAt;
use crate::stack::{self, Contents};
use crate::table::edit::{self, EditError};
use crate::table::{write, Layout};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error("partition {0}: {1}")]
    Contents(u32, stack::StackError),
    #[error("cannot read the bytes a write would replace: {0}")]
    Io(#[from] std::io::Error),
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
    let p = &placement.partition;
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
    for chunk in write::encode(&table) {
        let mut old = vec![0u8; chunk.bytes.len()];
        dev.read_exact_at(&mut old, chunk.offset)?;
        writes.push(Write { offset: chunk.offset, old, new: chunk.bytes, what: chunk.what.into() });
    }
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
        writes,
    };
    Ok(Prepared { record, contents, notes })
}
