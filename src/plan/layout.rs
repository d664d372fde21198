//! The layout arithmetic: the usable LBAs of each label, and a cursor that
//! puts each partition on the next grain boundary and sizes it; a GPT is
//! laid out with nothing more.

use super::error::PlanError;
use super::grain::Disk;
use super::planned::{planned, PlannedPartition, Role};
use super::request::{NewLabel, PartitionRequest, Size};
use crate::align::{align_down, align_up};
use crate::table;

/// MBR fields are 32-bit sector counts.
const MBR_LIMIT: u64 = u32::MAX as u64;

/// GPT entry array: 128 entries of 128 bytes, as every tool writes it.
pub const GPT_ENTRIES_BYTES: u64 = table::gpt::NEW_ARRAY_BYTES;

/// First and last LBA a partition may use.
pub(super) fn usable(label: NewLabel, total: u64, logical: u64) -> Result<(u64, u64), PlanError> {
    match label {
        NewLabel::Gpt => {
            let array = GPT_ENTRIES_BYTES.div_ceil(logical);
            let first = 2 + array;
            let last = total.checked_sub(2 + array).filter(|&l| l > first);
            last.map(|l| (first, l)).ok_or(PlanError::TooSmall(label))
        }
        NewLabel::Mbr => {
            if total > MBR_LIMIT + 1 {
                return Err(PlanError::MbrTooLarge(total, logical));
            }
            let last = total.checked_sub(1).filter(|&l| l > 1);
            last.map(|l| (1, l)).ok_or(PlanError::TooSmall(label))
        }
    }
}

pub(super) struct Layouter<'a> {
    pub(super) disk: &'a Disk,
    pub(super) grain: u64,
    /// The first LBA not yet used.
    pub(super) cursor: u64,
    pub(super) last: u64,
    pub(super) total: u64,
    /// A fixed first start (the track-1 start of cylinder-compatible MBRs).
    pub(super) first: Option<u64>,
}

impl Layouter<'_> {
    pub(super) fn gpt(
        &mut self,
        requests: &[PartitionRequest],
    ) -> Result<Vec<PlannedPartition>, PlanError> {
        let mut out = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            let start = self.next_start(self.cursor.max(r.min_start.unwrap_or(0)));
            let number = i as u32 + 1;
            let size = self.size_at(number, r.size, start)?;
            self.cursor = start + size;
            out.push(planned(number, start, size, Role::Gpt, r, None).of(i));
        }
        Ok(out)
    }

    /// The first grain boundary at or after `lba`.
    pub(super) fn next_start(&self, lba: u64) -> u64 {
        let bytes = lba.saturating_mul(self.disk.logical);
        align_up(bytes, self.grain, self.disk.alignment_offset)
            .map_or(u64::MAX, |b| b.div_ceil(self.disk.logical))
    }

    /// One past the last grain boundary within the usable area: `rest` ends
    /// there so the next layer (LUKS, LVM, a later partition) stays aligned.
    fn rest_end(&self) -> u64 {
        let logical = self.disk.logical;
        let end = self.last.saturating_add(1).saturating_mul(logical);
        align_down(end, self.grain, self.disk.alignment_offset).map_or(0, |b| b / logical)
    }

    /// Sectors for partition `number` starting at `start`: fixed sizes
    /// exact, `rest` to the last usable LBA, ends kept before the last usable.
    pub(super) fn size_at(&self, number: u32, size: Size, start: u64) -> Result<u64, PlanError> {
        let logical = self.disk.logical;
        let wanted = match size {
            Size::Bytes(b) => b.div_ceil(logical),
            Size::Sectors(n) => n,
            Size::Percent(p) if (1..=100).contains(&p) => {
                let bytes = u128::from(self.total) * u128::from(logical) * u128::from(p) / 100;
                let rounded = align_down(u64::try_from(bytes).unwrap_or(u64::MAX), self.grain, 0)
                    .unwrap_or(0);
                rounded / logical
            }
            Size::Percent(p) => return Err(PlanError::Percent(p)),
            Size::Rest => self.rest_end().saturating_sub(start),
        };
        let end = start.checked_add(wanted).filter(|&e| wanted > 0 && e <= self.last + 1);
        end.map(|_| wanted).ok_or(PlanError::NoRoom(number as usize, wanted, start, self.last))
    }
}
