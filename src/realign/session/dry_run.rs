//! The dry run: what moving each wanted partition would do, or why it
//! cannot be made ([`PlannedMove`]), after every check a real move makes.

use super::error::SessionError;
use super::open::Session;
use super::options::MoveOptions;
use crate::device::TargetKind;
use crate::realign::layers::LayerShift;
use crate::realign::place::{PlaceError, Placement};
use crate::realign::prepare::prepare;
use crate::realign::{Direction, Move};
use crate::table::Layout;
use crate::units::human_size;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a partition's move would do, or why it cannot be made.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PlannedMove {
    pub partition: u32,
    pub contents: Option<String>,
    pub old_start: Option<u64>,
    pub new_start: Option<u64>,
    pub sectors: Option<u64>,
    pub direction: Option<Direction>,
    pub bytes: u64,
    pub shift_bytes: u64,
    /// Each chunk passes through the journal (the shift is under a chunk).
    pub journaled: bool,
    /// First and last free LBA the partition may use.
    pub room: Option<[u64; 2]>,
    pub journal: Option<PathBuf>,
    pub read_rate_bytes_per_second: Option<f64>,
    pub estimated_seconds: Option<f64>,
    pub notes: Vec<String>,
    /// Each layer inside, judged where it is and where the move puts it.
    pub layers: Vec<LayerShift>,
    /// Why this partition cannot be moved.
    pub refused: Option<String>,
}

impl PlannedMove {
    /// The plan for this partition in words, as `realign` prints it.
    pub fn describe(&self, target: &Path) -> String {
        let mut text = String::new();
        let head = format!("{}: partition {}", target.display(), self.partition);
        if let Some(why) = &self.refused {
            // A placement's refusal already names the partition.
            let own = format!("partition {} cannot be moved: ", self.partition);
            text += &format!("{head}: cannot move: {}\n", why.strip_prefix(&own).unwrap_or(why));
            return text;
        }
        if self.direction.is_none() {
            text += &format!("{head}: {}\n", self.notes.join("; "));
            return text;
        }
        let (Some(old_start), Some(new_start), Some(sectors)) =
            (self.old_start, self.new_start, self.sectors)
        else {
            return text;
        };
        let contents = self.contents.as_deref().unwrap_or("contents not recognised");
        let shift = new_start.abs_diff(old_start);
        let direction = if new_start > old_start { "right" } else { "left" };
        text += &format!(
            "{head} ({contents}, {}): LBA {} -> {} ({direction} by {shift} sector{})\n",
            human_size(self.bytes),
            old_start,
            new_start,
            if shift == 1 { "" } else { "s" }
        );
        if let Some([first, last]) = self.room {
            text += &format!(
                "  room: LBA {first}-{last} is free for it; it needs LBA {}-{}\n",
                new_start,
                new_start.saturating_add(sectors).saturating_sub(1)
            );
        }
        text += if self.journaled {
            "  the shift is smaller than a chunk: each chunk is saved in the journal before it is written\n"
        } else {
            "  the shift is at least a chunk: chunks go straight to their destination\n"
        };
        if let Some(j) = &self.journal {
            text += &format!("  journal: {}\n", j.display());
        }
        if let (Some(secs), Some(rate)) = (self.estimated_seconds, self.read_rate_bytes_per_second)
        {
            text += &format!(
                "  estimated {secs:.1} s (the partition reads at {}/s here)\n",
                human_size(rate as u64)
            );
        }
        for note in &self.notes {
            text += &format!("  note: {note}\n");
        }
        text
    }
}

impl Session {
    /// What moving `wanted` would do, refusals included, after every check
    /// a real move makes first: `Err` only for what refuses the whole run.
    pub fn plan(
        &self,
        opts: &MoveOptions,
        wanted: &[u32],
    ) -> Result<Vec<PlannedMove>, SessionError> {
        let _span = self.reader.keep();
        let layout = self.layout()?;
        let mut report = Vec::new();
        for placed in self.place_all(opts, wanted)? {
            report.push(match placed {
                Ok(placement) => self.planned(opts, &layout, &placement)?,
                Err(err @ PlaceError::AlreadyAligned(n, _, start)) => PlannedMove {
                    partition: n,
                    old_start: Some(start),
                    notes: vec![err.to_string()],
                    ..PlannedMove::default()
                },
                Err(err) => self.refusal(&layout, err),
            });
        }
        Ok(report)
    }

    fn planned(
        &self,
        opts: &MoveOptions,
        layout: &Layout,
        placement: &Placement,
    ) -> Result<PlannedMove, SessionError> {
        let identity = self.identity.clone();
        let target = &self.target.path;
        let prepared =
            prepare(&self.reader, target, layout, placement, identity, opts.chunk_bytes)?;
        let m = &prepared.record;
        let journaled = m.shift_bytes() < m.chunk_bytes && m.chunks() > 0;
        let rate = self.host.read_rate(m.old_start * m.sector_size, m.bytes());
        let passes = if journaled { 4.0 } else { 3.0 } + f64::from(u8::from(opts.read_check));
        let mut notes: Vec<String> = placement.note.iter().cloned().collect();
        if let (Some(to), Some(from)) = (placement.ebr, placement.partition.ebr) {
            notes.push(format!(
                "its EBR moves from LBA {from} to LBA {to}, just before the new start, ahead of \
                 the copy (the partition stays where it is until the copy is done)"
            ));
        }
        notes.extend(prepared.notes.iter().cloned());
        notes.extend(self.image.as_ref().map(|(format, _)| growth(format, m)));
        notes.extend(self.fat_warning(m.partition, m.old_start, m.sectors));
        if self.image.is_none() && self.target.kind == TargetKind::Disk {
            let health = crate::device::drive::smart::read(&self.target.path);
            notes.extend(health.and_then(|h| h.warning()));
        }
        if opts.read_check {
            let cost = rate.map(|r| format!(", about {:.1} s here", m.bytes() as f64 / r));
            notes.push(format!(
                "before writing, every sector it will read is read once ({}{}): {} \
                 (--no-read-check skips this)",
                human_size(m.bytes()),
                cost.unwrap_or_default(),
                if opts.rescue {
                    "unreadable ones are named, then read around and written as zeros (--rescue)"
                } else {
                    "an unreadable one refuses the move with nothing written"
                }
            ));
        }
        let shifts = self.layer_shifts(placement);
        let changed = shifts.iter().filter(|s| s.off_before != s.off_after);
        notes.extend(changed.map(LayerShift::describe));
        Ok(PlannedMove {
            partition: m.partition,
            contents: m.contents.clone(),
            old_start: Some(m.old_start),
            new_start: Some(m.new_start),
            sectors: Some(m.sectors),
            direction: Some(m.direction()),
            bytes: m.bytes(),
            shift_bytes: m.shift_bytes(),
            journaled,
            room: Some([placement.room.start, placement.room.end.saturating_sub(1)]),
            journal: Some(self.journal_path(opts, m.partition)),
            read_rate_bytes_per_second: rate,
            estimated_seconds: rate.map(|r| passes * m.bytes() as f64 / r),
            notes,
            layers: shifts,
            refused: None,
        })
    }

    pub(super) fn refusal(&self, layout: &Layout, err: PlaceError) -> PlannedMove {
        let mut why = err.to_string();
        let (partition, missing) = match &err {
            PlaceError::NoRoom { partition, missing_sectors, .. } => (*partition, *missing_sectors),
            PlaceError::NotFound(n)
            | PlaceError::CannotMove(n, _)
            | PlaceError::AlreadyAligned(n, ..) => (*n, None),
        };
        let p = layout.partitions.iter().find(|p| p.number == partition);
        if let (Some(p), Some(missing)) = (p, missing) {
            let ss = layout.sector_size;
            let (at, len) = (p.start.saturating_mul(ss), p.size.saturating_mul(ss));
            let contents = crate::stack::identify(&self.reader, at, len).ok().flatten();
            let node = crate::advise::Node::of(&self.target, partition);
            why += &format!(
                ". To make room, shrink it by at least {} ({missing} sectors): {}; then shrink \
                 partition {partition} to match and rerun",
                human_size(missing.saturating_mul(ss)),
                crate::advise::shrink_node(
                    contents.as_ref(),
                    &node,
                    len,
                    missing.saturating_mul(ss)
                )
            );
        }
        PlannedMove {
            partition,
            old_start: p.map(|p| p.start),
            sectors: p.map(|p| p.size),
            refused: Some(why),
            ..PlannedMove::default()
        }
    }
}

/// How much a move may grow a VM image: data landing on clusters the
/// format has not allocated takes new ones; zeros stay unallocated.
fn growth(format: &str, m: &Move) -> String {
    format!(
        "{format} image: the move writes {} through QEMU; where data lands on clusters the \
         image has not allocated it grows, by at most that, usually about the shift ({}); \
         zeros are written as unallocated clusters",
        human_size(m.bytes()),
        human_size(m.shift_bytes().min(m.bytes()))
    )
}
