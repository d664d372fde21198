//! The disk a plan is made for, and the grain its starts keep.

use super::error::PlanError;
use super::request::Align;
use crate::align::{lcm, Geometry, MIB};

/// The disk a plan is made for: its geometry and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Disk {
    pub(super) size_bytes: u64,
    pub(super) logical: u64,
    /// The effective physical sector.
    pub(super) physical: u64,
    pub(super) alignment_offset: u64,
    pub(super) optimal_io: Option<u64>,
}

impl Disk {
    pub(super) fn of(g: &Geometry, size_bytes: u64) -> Disk {
        Disk {
            size_bytes,
            logical: g.logical,
            physical: g.physical,
            alignment_offset: g.alignment_offset,
            optimal_io: g.optimal_io,
        }
    }
}

/// The grain in bytes for `align` on a disk of geometry `g`.
pub fn grain(g: &Geometry, align: Align) -> Result<u64, PlanError> {
    grain_on(&Disk::of(g, 0), align)
}

pub(super) fn grain_on(disk: &Disk, align: Align) -> Result<u64, PlanError> {
    let g = match align {
        Align::Minimal => Some(disk.physical.max(disk.logical)),
        Align::Bytes(b) => Some(b),
        Align::Optimal => {
            let io = disk.optimal_io.unwrap_or(disk.physical);
            lcm(MIB, io).and_then(|g| lcm(g, disk.physical))
        }
    };
    match g {
        Some(g) if g > 0 && g % disk.logical == 0 => Ok(g),
        other => Err(PlanError::Grain(other.unwrap_or(0), disk.logical)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::plan::tests::{disk, plan_on, req};
    use crate::plan::{NewLabel, Size};

    #[test]
    fn optimal_io_joins_the_grain() {
        let d = Disk { optimal_io: Some(3 * MIB), ..disk(1 << 30, 512) };
        assert_eq!(grain_on(&d, Align::Optimal), Ok(3 * MIB));
        let p = plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &[req(Size::Rest)]).unwrap();
        assert_eq!(p.partitions[0].start, 3 * MIB / 512);
    }
}
