//! Planning aligned partition tables: where each partition of a request
//! goes, before anything is written ([`plan_table`], [`plan_script`]). The files
//! below, each using only those before it: `request` (what is asked for),
//! `error`, `resolve` (types and names as the table stores them),
//! `planned` (the plan and its table's bytes, made by
//! [`crate::table::write`]), `grain`, `script` (sfdisk scripts), `layout`
//! (the arithmetic, and a GPT), `mbr`; `target` finds the topology planned
//! on.

mod error;
mod grain;
mod layout;
mod mbr;
mod planned;
mod request;
mod resolve;
mod script;
mod target;

pub use error::PlanError;
pub use grain::grain;
pub use layout::GPT_ENTRIES_BYTES;
pub use planned::{Plan, PlannedPartition, Role};
pub use request::{parse_part, parse_size, Align, NewLabel, PartitionRequest, Size};
pub use script::{parse_script, Script, SCRIPT_LIMIT};
pub use target::topology;

use crate::align::{lcm, Geometry};
use grain::{grain_on, Disk};
use layout::{usable, Layouter};
use resolve::resolve;
use script::Slots;

/// Sectors per cylinder in the 224-head, 56-sector geometry: cylinder (and
/// track) boundaries then fall on 4 KiB, pleasing old operating systems and
/// Advanced Format drives alike.
pub(crate) const CYLINDER_SECTORS: u64 = 224 * 56;
const TRACK_SECTORS: u64 = 56;

/// Lay out `requests` on a disk of geometry `g` and `size_bytes`: every
/// start on the grain (counted from the alignment offset), in request
/// order, without gaps beyond alignment.
pub fn plan_table(
    g: &Geometry,
    size_bytes: u64,
    label: NewLabel,
    align: Align,
    cylinder_compatible: bool,
    requests: &[PartitionRequest],
) -> Result<Plan, PlanError> {
    plan_with(&Disk::of(g, size_bytes), label, align, cylinder_compatible, requests, None)
}

/// Lay out `script` on `disk` as [`plan_table`] does, except that an MBR script
/// numbering every partition (an `sfdisk -d` dump) keeps its numbers, as
/// sfdisk does: 1-4 primary, 5 on logical, its extended partition where
/// the script puts it, and the partitions in the order of their starts.
pub fn plan_script(
    g: &Geometry,
    size_bytes: u64,
    label: NewLabel,
    align: Align,
    cylinder_compatible: bool,
    script: &Script,
) -> Result<Plan, PlanError> {
    let slots = match label {
        NewLabel::Mbr => script.slots()?,
        NewLabel::Gpt => None,
    };
    let disk = Disk::of(g, size_bytes);
    plan_with(&disk, label, align, cylinder_compatible, &script.requests, slots.as_ref())
}

fn plan_with(
    disk: &Disk,
    label: NewLabel,
    align: Align,
    cylinder_compatible: bool,
    requests: &[PartitionRequest],
    slots: Option<&Slots>,
) -> Result<Plan, PlanError> {
    if requests.is_empty() {
        return Err(PlanError::Empty);
    }
    if requests.iter().rev().skip(1).any(|r| r.size == Size::Rest) {
        return Err(PlanError::RestNotLast);
    }
    if label == NewLabel::Gpt && requests.len() > 128 {
        return Err(PlanError::TooMany(requests.len()));
    }
    let requests = requests.iter().map(|r| resolve(label, r)).collect::<Result<Vec<_>, _>>()?;
    let requests = requests.as_slice();
    let mut grain_bytes = grain_on(disk, align)?;
    if cylinder_compatible {
        if disk.logical != 512 {
            return Err(PlanError::Cylinder);
        }
        grain_bytes =
            lcm(grain_bytes, CYLINDER_SECTORS * 512).ok_or(PlanError::Grain(grain_bytes, 512))?;
    }
    let total = disk.size_bytes / disk.logical;
    let (first_usable, last_usable) = usable(label, total, disk.logical)?;
    let mut layout = Layouter {
        disk,
        grain: grain_bytes,
        cursor: first_usable,
        last: last_usable,
        total,
        first: cylinder_compatible.then_some(TRACK_SECTORS),
    };
    let partitions = match (label, slots) {
        (NewLabel::Gpt, _) => layout.gpt(requests)?,
        (NewLabel::Mbr, None) => layout.mbr(requests)?,
        (NewLabel::Mbr, Some(slots)) => layout.numbered(requests, slots)?,
    };
    Ok(Plan {
        label,
        sector_size: disk.logical,
        total_sectors: total,
        grain_bytes,
        first_usable_lba: first_usable,
        last_usable_lba: last_usable,
        partitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::{is_aligned, MIB};
    use proptest::prelude::*;

    pub(super) fn plan_on(
        disk: &Disk,
        label: NewLabel,
        align: Align,
        cylinders: bool,
        requests: &[PartitionRequest],
    ) -> Result<Plan, PlanError> {
        plan_with(disk, label, align, cylinders, requests, None)
    }

    pub(super) fn disk(size: u64, logical: u64) -> Disk {
        Disk { size_bytes: size, logical, physical: 4096, alignment_offset: 0, optimal_io: None }
    }

    pub(super) fn req(size: Size) -> PartitionRequest {
        PartitionRequest { min_start: None, size, type_id: "linux".into(), name: None }
    }

    #[test]
    fn gpt_first_partition_at_1mib() {
        let p = plan_on(
            &disk(1 << 30, 512),
            NewLabel::Gpt,
            Align::Optimal,
            false,
            &[req(Size::Bytes(MIB)), req(Size::Rest)],
        )
        .unwrap();
        assert_eq!((p.first_usable_lba, p.last_usable_lba), (34, (1 << 21) - 34));
        assert_eq!((p.partitions[0].start, p.partitions[0].size), (2048, 2048));
        assert_eq!(p.partitions[1].start, 4096);
        assert_eq!(
            p.partitions[1].start + p.partitions[1].size,
            (1 << 21) - 2048,
            "rest ends on the grain"
        );
    }

    #[test]
    fn gpt_on_4kn_and_minimal() {
        let p = plan_on(
            &disk(1 << 30, 4096),
            NewLabel::Gpt,
            Align::Minimal,
            false,
            &[req(Size::Bytes(MIB))],
        )
        .unwrap();
        assert_eq!((p.first_usable_lba, p.partitions[0].start), (6, 6));
        let p = plan_on(
            &disk(1 << 30, 512),
            NewLabel::Gpt,
            Align::Minimal,
            false,
            &[req(Size::Bytes(MIB))],
        )
        .unwrap();
        assert_eq!(p.partitions[0].start, 40);
    }

    #[test]
    fn alignment_offset_is_honoured() {
        let d = Disk { alignment_offset: 3584, ..disk(1 << 30, 512) };
        let p = plan_on(
            &d,
            NewLabel::Mbr,
            Align::Minimal,
            false,
            &[req(Size::Bytes(MIB)), req(Size::Rest)],
        )
        .unwrap();
        assert_eq!(p.partitions[0].start, 15, "LBA 7 + 8k, past the first grain");
        assert!(p.partitions.iter().all(|x| is_aligned(x.start * 512, 4096, 3584)));
    }

    #[test]
    fn mbr_limits() {
        let big = disk(3 << 40, 512);
        assert!(matches!(
            plan_on(&big, NewLabel::Mbr, Align::Optimal, false, &[req(Size::Rest)]),
            Err(PlanError::MbrTooLarge(..))
        ));
        let fits =
            plan_on(&disk(3 << 40, 4096), NewLabel::Mbr, Align::Optimal, false, &[req(Size::Rest)]);
        assert!(fits.is_ok(), "4096-byte sectors address 16 TiB: {fits:?}");
    }

    #[test]
    fn no_room_and_bad_requests() {
        let d = disk(64 * MIB, 512);
        assert!(matches!(
            plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &[req(Size::Bytes(64 * MIB))]),
            Err(PlanError::NoRoom(1, ..))
        ));
        assert_eq!(plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &[]), Err(PlanError::Empty));
        assert_eq!(
            plan_on(
                &d,
                NewLabel::Gpt,
                Align::Optimal,
                false,
                &[req(Size::Rest), req(Size::Bytes(1))]
            ),
            Err(PlanError::RestNotLast)
        );
        assert_eq!(
            plan_on(&d, NewLabel::Gpt, Align::Bytes(1000), false, &[req(Size::Rest)]),
            Err(PlanError::Grain(1000, 512))
        );
    }

    #[test]
    fn min_start_is_a_lower_bound_rounded_to_the_grain() {
        let r = PartitionRequest { min_start: Some(5000), ..req(Size::Sectors(100)) };
        let p = plan_on(&disk(1 << 30, 512), NewLabel::Gpt, Align::Optimal, false, &[r]).unwrap();
        assert_eq!((p.partitions[0].start, p.partitions[0].size), (6144, 100));
    }

    #[test]
    fn cylinder_compatible_mbr() {
        let p = plan_on(
            &disk(1 << 30, 512),
            NewLabel::Mbr,
            Align::Minimal,
            true,
            &[req(Size::Bytes(MIB)), req(Size::Bytes(MIB))],
        )
        .unwrap();
        assert_eq!(p.partitions[0].start, 56);
        assert_eq!(p.partitions[1].start, CYLINDER_SECTORS);
        assert!(p.partitions.iter().all(|x| x.start % 8 == 0));
    }

    proptest! {
        #[test]
        fn every_plan_is_aligned_ordered_and_inside(
            sizes in proptest::collection::vec(1u64..64, 1..9),
            logical in prop_oneof![Just(512u64), Just(4096u64)],
            gpt in any::<bool>(),
            offset_sectors in 0u64..8,
        ) {
            let offset = if logical == 512 { offset_sectors * 512 } else { 0 };
            let d = Disk { size_bytes: 2 << 30, logical, physical: 4096, alignment_offset: offset, optimal_io: None };
            let reqs: Vec<PartitionRequest> = sizes.iter().map(|s| req(Size::Bytes(s * MIB))).collect();
            let label = if gpt { NewLabel::Gpt } else { NewLabel::Mbr };
            let p = plan_on(&d, label, Align::Optimal, false, &reqs).unwrap();
            let data: Vec<&PlannedPartition> = p.partitions.iter().filter(|x| x.role != Role::Extended).collect();
            prop_assert_eq!(data.len(), reqs.len());
            for (x, s) in data.iter().zip(&sizes) {
                prop_assert!(is_aligned(x.start * logical, MIB, offset));
                prop_assert_eq!(x.size * logical, s * MIB);
                prop_assert!(x.start >= p.first_usable_lba && x.start + x.size - 1 <= p.last_usable_lba);
            }
            for w in data.windows(2) {
                prop_assert!(w[0].start + w[0].size <= w[1].ebr.unwrap_or(w[1].start));
            }
        }
    }
}
