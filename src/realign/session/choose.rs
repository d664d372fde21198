//! Choosing what moves and where: the partitions wanted, each placed in an
//! order that makes room, refused where a boot loader or an aligned layer
//! inside would suffer.

use super::error::{MoveRefusal, SessionError};
use super::open::Session;
use super::options::MoveOptions;
use crate::align::Class;
use crate::io::ReadAt;
use crate::realign::guard;
use crate::realign::layers::{self, LayerShift};
use crate::realign::place::{self, PlaceError, PlaceRequest, Placement};
use crate::table::{Layout, PartKind, Partition};
use std::cell::Cell;
use std::ops::Range;

impl Session {
    /// The partitions to move: those named, or every misaligned one whose
    /// contents do not make up for its start (see [`Session::compensated`]).
    pub fn wanted(&self, named: &[u32]) -> Result<Vec<u32>, SessionError> {
        let _span = self.reader.keep();
        let layout = self.layout()?;
        if !named.is_empty() {
            if let Some(n) =
                named.iter().find(|n| !layout.partitions.iter().any(|p| p.number == **n))
            {
                let disk = self.target.path.clone();
                return Err(MoveRefusal::NoSuchPartition { number: *n, disk }.into());
            }
            return Ok(named.to_vec());
        }
        let compensated = self.compensated()?;
        let misaligned = self.misaligned(&layout).filter(|p| !compensated.contains(&p.number));
        Ok(misaligned.map(|p| p.number).collect())
    }

    /// The partitions whose start is off a physical boundary while every
    /// data area inside is on one: a move would misalign their data, so
    /// they are moved only when named, with `misalign_layers`.
    pub fn compensated(&self) -> Result<Vec<u32>, SessionError> {
        let _span = self.reader.keep();
        let layout = self.layout()?;
        let ss = self.geometry.logical;
        let kept = self
            .misaligned(&layout)
            .filter(|p| layers::compensated(&layers::of(&self.reader, p, ss), &self.geometry));
        Ok(kept.map(|p| p.number).collect())
    }

    fn misaligned<'a>(&self, layout: &'a Layout) -> impl Iterator<Item = &'a Partition> + 'a {
        let geometry = self.geometry;
        layout.partitions.iter().filter(move |p| {
            p.kind != PartKind::Extended
                && geometry.judge(p.start, p.size).is_some_and(|v| v.verdict == Class::Misaligned)
        })
    }

    /// Place each partition in turn, in an order that makes room: the first
    /// that fits goes, and the others are placed against the table as it
    /// will be after it.
    pub(super) fn place_all(
        &self,
        opts: &MoveOptions,
        wanted: &[u32],
    ) -> Result<Vec<Result<Placement, PlaceError>>, SessionError> {
        let mut layout = self.layout()?;
        let mut pending: Vec<u32> = wanted.to_vec();
        let mut out = Vec::new();
        while !pending.is_empty() {
            let tries: Vec<(usize, Result<Placement, PlaceError>)> = pending
                .iter()
                .enumerate()
                .map(|(i, &n)| (i, self.place_one(&layout, opts, n)))
                .collect();
            let Some((i, Ok(placement))) = tries.iter().find(|(_, r)| r.is_ok()).cloned() else {
                out.extend(tries.into_iter().map(|(_, r)| r));
                break;
            };
            pending.remove(i);
            let moved =
                layout.partitions.iter_mut().find(|p| p.number == placement.partition.number);
            if let Some(p) = moved {
                p.start = placement.new_start;
                p.ebr = placement.ebr.or(p.ebr);
            }
            if let (Some(mbr), Some(from), Some(to)) =
                (layout.mbr.as_mut(), placement.partition.ebr, placement.ebr)
            {
                mbr.ebrs.iter_mut().filter(|e| **e == from).for_each(|e| *e = to);
            }
            out.push(Ok(placement));
        }
        Ok(out)
    }

    fn place_one(
        &self,
        layout: &Layout,
        opts: &MoveOptions,
        n: u32,
    ) -> Result<Placement, PlaceError> {
        let req = request(opts, n);
        let ss = layout.sector_size;
        let part = layout.partitions.iter().find(|p| p.number == n);
        // Bytes an earlier move of this very partition left behind are ours
        // to overwrite, not a boot loader's.
        let stale = Cell::new(None);
        let nonzero = |lbas: Range<u64>| {
            if !holds_data(&self.reader, lbas.clone(), ss) {
                return false;
            }
            let ours = part.is_some_and(|p| stale_copy(&self.reader, lbas.clone(), p, ss));
            if ours {
                stale.set(Some(lbas));
            }
            !ours
        };
        let sectors = self.topology.size_bytes / ss.max(1);
        let mut placed = place::place(layout, &self.geometry, sectors, &req, &nonzero)?;
        if let Some(gap) = stale.take().filter(|g| placed.new_start <= g.start) {
            let note = format!(
                "sectors {}-{} hold a stale copy of partition {n}'s first sectors, left by an \
                 earlier move: not boot-loader data, overwritten",
                gap.start,
                gap.end.saturating_sub(1)
            );
            placed.note = Some(match placed.note.take() {
                Some(first) => format!("{first}; {note}"),
                None => note,
            });
        }
        if !req.force {
            if let Some(why) = guard::boot_loader(
                &self.reader,
                &placed.partition,
                self.geometry.logical,
                &self.target.path,
            ) {
                return Err(PlaceError::CannotMove(n, format!("{why}; --force moves it anyway")));
            }
        }
        if !opts.misalign_layers {
            let shifts = self.layer_shifts(&placed);
            if let Some(why) = layers::refusal(n, placed.new_start, &shifts) {
                return Err(PlaceError::CannotMove(n, why));
            }
        }
        Ok(placed)
    }

    /// What moving the partition as `placed` says does to each layer in it.
    pub(super) fn layer_shifts(&self, placed: &Placement) -> Vec<LayerShift> {
        let p = &placed.partition;
        let found = layers::of(&self.reader, p, self.geometry.logical);
        layers::shifts(&found, &self.geometry, p.start, placed.new_start)
    }
}

fn request(opts: &MoveOptions, partition: u32) -> PlaceRequest {
    PlaceRequest { partition, to: opts.to, align: opts.align, force: opts.force }
}

/// Whether any of sectors `lbas` holds a non-zero byte, read a MiB at a
/// time; unreadable counts as holding data.
fn holds_data(dev: &dyn ReadAt, lbas: Range<u64>, ss: u64) -> bool {
    let (Some(mut at), Some(end)) = (lbas.start.checked_mul(ss), lbas.end.checked_mul(ss)) else {
        return true;
    };
    let mut buf = vec![0u8; 1 << 20];
    while at < end {
        let len = (end - at).min(buf.len() as u64) as usize;
        if dev.read_exact_at(&mut buf[..len], at).is_err() || buf[..len].iter().any(|&b| b != 0) {
            return true;
        }
        at += len as u64;
    }
    false
}

/// Whether the non-zero sectors of `gap` (which ends where partition `p`
/// begins) are what a move to the right leaves: a copy of the partition's
/// own first sectors, in order, from some earlier start. Sectors a move
/// rewrites (the start fixups: boot sector, FAT32 backup boot sector) may
/// differ; any other mismatch means someone else's data.
fn stale_copy(dev: &dyn ReadAt, gap: Range<u64>, p: &Partition, ss: u64) -> bool {
    const FIXUP_SECTORS: usize = 16;
    const ANCHORS: usize = 32;
    // Each try reads the whole gap: a sector repeated all over the
    // partition (0xFF fill) must not make this quadratic.
    const TRIES: usize = 64;
    if ss == 0 {
        return false;
    }
    let Some(sectors) = p.start.checked_sub(gap.start).filter(|&s| gap.end == p.start && s > 0)
    else {
        return false;
    };
    // Gaps are a MiB or a few: more is not a leftover worth recognising.
    let Some(bytes) = sectors.checked_mul(ss).filter(|&b| b <= 64 << 20) else { return false };
    // The copy may begin before the gap: read twice its length of the partition.
    let head = p.size.min(sectors.saturating_mul(2)).saturating_mul(ss);
    let (Ok(len), Ok(head)) = (usize::try_from(bytes), usize::try_from(head)) else {
        return false;
    };
    let (mut old, mut new) = (vec![0u8; len], vec![0u8; head]);
    let ok =
        |buf: &mut [u8], at: Option<u64>| at.is_some_and(|at| dev.read_exact_at(buf, at).is_ok());
    if !ok(&mut old, gap.start.checked_mul(ss)) || !ok(&mut new, p.start.checked_mul(ss)) {
        return false;
    }
    let ss = ss as usize;
    let old: Vec<&[u8]> = old.chunks(ss).collect();
    let new: Vec<&[u8]> = new.chunks(ss).collect();
    let nonzero = |s: &[u8]| s.iter().any(|&b| b != 0);
    // Gap sector g is the partition's sector g + lag: lag < 0 when the
    // copy began inside the gap, whose sectors before it must be zero.
    let fits = |lag: isize| {
        let mut matched = false;
        for (g, was) in old.iter().enumerate() {
            let at = (g as isize).checked_add(lag).and_then(|i| usize::try_from(i).ok());
            match at.map(|i| (i, new.get(i))) {
                Some((i, Some(is))) if is == was => matched |= nonzero(was) && i >= FIXUP_SECTORS,
                Some((i, Some(_))) if i < FIXUP_SECTORS => {}
                _ if !nonzero(was) => {}
                _ => return false,
            }
        }
        matched
    };
    // Anchor on a few non-zero gap sectors: each equal partition sector
    // proposes a lag.
    let lags =
        old.iter().enumerate().filter(|(_, s)| nonzero(s)).take(ANCHORS).flat_map(|(g, was)| {
            new.iter().enumerate().filter(move |(_, is)| *is == was).map(move |(i, _)| {
                // Both below 2^18 sectors: no overflow.
                i as isize - g as isize
            })
        });
    let mut lags: Vec<isize> = lags.take(TRIES).collect();
    lags.dedup();
    lags.into_iter().any(fits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::session::lab::{image, lab};

    #[test]
    fn refusals_are_values_a_caller_can_match() {
        let lab = lab();
        let err = lab.session.wanted(&[9]).unwrap_err();
        assert!(
            matches!(err, SessionError::Refused(MoveRefusal::NoSuchPartition { number: 9, .. })),
            "{err:?}"
        );
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "nothing written");
    }
}
