//! plan → write → read: any disk and request the planner accepts, written to an in-memory image,
//! must read back as the partitions planned; one of them then moved by the editor must read back at
//! its new start.
#![no_main]

use blkalign::align::Geometry;
use blkalign::plan::{self, Align, NewLabel, Size};
use blkalign_fuzz::roundtrip;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const TYPES: [&str; 10] = [
    "linux",
    "swap",
    "efi",
    "lvm",
    "raid",
    "83",
    "0x07",
    "ef",
    "a5",
    "0FC63DAF-8483-4772-8E79-3D69D8477DE4",
];

fn disk(u: &mut Unstructured) -> Result<(Geometry, u64)> {
    let logical = 512u64 << u.int_in_range(0..=3)?;
    let size_bytes = match u.int_in_range(0..=3)? {
        0 => u.arbitrary()?,
        1 => u64::from(u.arbitrary::<u32>()?) * logical,
        _ => (1u64 << u.int_in_range(20..=44)?) + u64::from(u.arbitrary::<u16>()?) * logical,
    };
    let geometry = Geometry {
        logical,
        physical: logical << u.int_in_range(0..=4)?,
        physical_assumed: false,
        alignment_offset: if u.ratio(1, 4)? { u64::from(u.arbitrary::<u16>()?) } else { 0 },
        optimal_io: if u.ratio(1, 3)? { Some(u64::from(u.arbitrary::<u32>()?)) } else { None },
    };
    Ok((geometry, size_bytes))
}

fn size(u: &mut Unstructured, logical: u64) -> Result<Size> {
    Ok(match u.int_in_range(0..=4)? {
        0 => Size::Bytes(u.arbitrary()?),
        1 => Size::Bytes(u64::from(u.arbitrary::<u16>()?) << 20),
        2 => Size::Sectors(u64::from(u.arbitrary::<u32>()?) / logical.min(4096) + 1),
        3 => Size::Percent(u.int_in_range(0..=101)?),
        _ => Size::Rest,
    })
}

fn request(u: &mut Unstructured, logical: u64) -> Result<plan::PartitionRequest> {
    let size = size(u, logical)?;
    let type_id = if u.ratio(1, 8)? { u.arbitrary::<&str>()? } else { *u.choose(&TYPES)? };
    let name = if u.ratio(1, 4)? { Some(u.arbitrary::<String>()?) } else { None };
    let min_start = if u.ratio(1, 6)? { Some(u64::from(u.arbitrary::<u32>()?)) } else { None };
    Ok(roundtrip::request(size, type_id, name, min_start))
}

fn run(u: &mut Unstructured) -> Result<()> {
    let (geometry, size_bytes) = disk(u)?;
    let label = if u.arbitrary()? { NewLabel::Gpt } else { NewLabel::Mbr };
    let align = match u.int_in_range(0..=3)? {
        0 => Align::Minimal,
        1 => Align::Bytes(u64::from(u.arbitrary::<u32>()?)),
        _ => Align::Optimal,
    };
    let cylinders = u.ratio(1, 8)?;
    let most = if u.ratio(1, 16)? { 130 } else { 8 };
    let count = u.int_in_range(1..=most)?;
    let requests = (0..count).map(|_| request(u, geometry.logical)).collect::<Result<Vec<_>>>()?;
    let Ok(plan) = plan::plan_table(&geometry, size_bytes, label, align, cylinders, &requests) else {
        return Ok(());
    };
    let ids = roundtrip::ids(plan.partitions.len(), u.arbitrary()?);
    roundtrip::check(&plan, &ids, size_bytes, u.arbitrary()?, u.arbitrary()?);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
