//! Round trips through the table writers. A plan written into a blank
//! image must read back as the partitions planned, with no problem; a
//! partition moved by the editor must read back at its new start, the
//! others where they were.

use crate::image::Image;
use blkalign::align::Geometry;
use blkalign::plan::{self, Align, NewLabel, Plan, PlannedPartition, PartitionRequest, Role, Script};
use blkalign::table::write::{self, Ids, TableBytes};
use blkalign::table::{self, edit, Layout, PartKind, Partition};

/// Put `table`'s writes on `img`; each must lie on the disk.
pub fn apply(img: &mut Image, table: &TableBytes) {
    for chunk in write::encode_table(table) {
        let end = chunk.offset.checked_add(chunk.bytes.len() as u64);
        assert!(end.is_some_and(|end| end <= img.size), "{} written past the end", chunk.what);
        img.write_at(chunk.offset, &chunk.bytes);
    }
}

/// (number, start, size, kind, type, name, EBR) as a reader reports them.
type Row = (u32, u64, u64, PartKind, String, Option<String>, Option<u64>);

fn planned_row(p: &PlannedPartition) -> Row {
    let kind = match p.role {
        Role::Primary => PartKind::Primary,
        Role::Extended => PartKind::Extended,
        Role::Logical => PartKind::Logical,
        Role::Gpt => PartKind::Gpt,
    };
    // An empty name reads back as none.
    let name = p.name.clone().filter(|n| !n.is_empty());
    (p.number, p.start, p.size, kind, p.type_id.clone(), name, p.ebr)
}

fn read_row(p: &Partition) -> Row {
    (p.number, p.start, p.size, p.kind, p.type_id.clone(), p.name.clone(), p.ebr)
}

/// Write `plan` with `ids` on a blank disk of `size_bytes` and read it
/// back; then move one partition (picked by `pick`, shifted by `shift`
/// sectors) with the editor and read that back.
pub fn check(plan: &Plan, ids: &Ids, size_bytes: u64, pick: u32, shift: i32) {
    let table = plan.table(ids).unwrap_or_else(|e| panic!("{plan:?} cannot be written: {e}"));
    let mut img = Image::blank(size_bytes);
    apply(&mut img, &table);
    let layout = table::read(&img, plan.sector_size, size_bytes)
        .unwrap_or_else(|e| panic!("{plan:?} written does not read back: {e}"));
    let label = match plan.label {
        NewLabel::Gpt => table::Label::Gpt,
        NewLabel::Mbr => table::Label::Mbr,
    };
    assert_eq!(layout.label, label);
    assert!(layout.problems.is_empty(), "{plan:?} written reads with {:?}", layout.problems);
    let mut want: Vec<Row> = plan.partitions.iter().map(planned_row).collect();
    want.sort_by_key(|r| r.0);
    let got: Vec<Row> = layout.partitions.iter().map(read_row).collect();
    assert_eq!(got, want, "{plan:?} written reads back otherwise");
    if let Some(gpt) = &layout.gpt {
        assert_eq!(
            (gpt.first_usable_lba, gpt.last_usable_lba),
            (plan.first_usable_lba, plan.last_usable_lba)
        );
    }
    move_one(&mut img, &layout, pick, shift);
}

/// Move a partition of `layout` (read from `img`) with the editor, write
/// it, and, for a table without problems that stays so, check that only
/// that partition moved.
pub fn move_one(img: &mut Image, layout: &Layout, pick: u32, shift: i32) {
    let movable =
        |p: &&Partition| matches!(p.kind, PartKind::Gpt | PartKind::Primary | PartKind::Logical);
    let candidates: Vec<&Partition> = layout.partitions.iter().filter(movable).collect();
    // What a slice holds (a nested BSD label) moves with it.
    let in_table = |p: &&Partition| movable(p) || p.kind == PartKind::Extended;
    let Some(&p) = candidates.get(pick as usize % candidates.len().max(1)) else { return };
    let Some(new_start) = p.start.checked_add_signed(i64::from(shift)) else { return };
    let Ok(mut bytes) = edit::read_bytes(img, layout) else { return };
    if bytes.move_start(p, new_start).is_err() {
        return;
    }
    apply(img, &bytes);
    // realign edits only tables without problems (guard::table_problems):
    // in others, a chain through the MBR or an overlap may move more.
    if !layout.problems.is_empty() {
        return;
    }
    let Ok(moved) = table::read(img, layout.sector_size, img.size) else {
        panic!("partition {} moved to {new_start}: the table no longer reads", p.number);
    };
    // The editor places what it is told (realign chooses where); a start
    // past the end or outside the extended partition is the caller's.
    if !moved.problems.is_empty() {
        return;
    }
    // Logicals are numbered in chain order: compare them by place.
    let key = |q: &Partition, start: u64| {
        (if q.kind == PartKind::Logical { 0 } else { q.number }, q.kind as u8, start, q.size)
    };
    let rows = |l: &Layout| {
        let mut rows: Vec<_> =
            l.partitions.iter().filter(in_table).map(|q| key(q, q.start)).collect();
        rows.sort_unstable();
        rows
    };
    let others: Vec<_> = rows(layout).into_iter().filter(|&r| r != key(p, p.start)).collect();
    let mut want = others.clone();
    want.push(key(p, new_start));
    want.sort_unstable();
    let got = rows(&moved);
    // A logical in an EBR's third or fourth slot that no longer fits its
    // link is dropped, as Linux drops it.
    let dropped = p.kind == PartKind::Logical && got == others;
    assert!(
        got == want || dropped,
        "partition {} moved to {new_start}: {got:?}, not {want:?}",
        p.number
    );
}

/// Move the EBR of a logical of `layout` (read from `img`; picked by
/// `pick`) to `back` + 1 sectors before the logical with the editor, write
/// it, and, for a table without problems that stays so, check that every
/// partition is where it was and that logical's EBR where it was put.
pub fn move_ebr(img: &mut Image, layout: &Layout, pick: u32, back: u32) {
    let logicals: Vec<&Partition> =
        layout.partitions.iter().filter(|p| p.kind == PartKind::Logical).collect();
    let Some(&p) = logicals.get(pick as usize % logicals.len().max(1)) else { return };
    let Some(ebr) = p.ebr else { return };
    let Some(ext) = layout
        .partitions
        .iter()
        .find(|q| q.kind == PartKind::Extended && q.start <= ebr && ebr - q.start < q.size)
    else {
        return;
    };
    let Some(new_ebr) = p.start.checked_sub(1 + u64::from(back % 4096)) else { return };
    // On the disk: realign's placement keeps it there.
    let ss = layout.sector_size;
    if new_ebr.checked_add(1).and_then(|e| e.checked_mul(ss)).is_none_or(|e| e > img.size) {
        return;
    }
    let Ok(mut bytes) = edit::read_bytes(img, layout) else { return };
    if bytes.move_ebr(p, new_ebr, ext).is_err() {
        return;
    }
    apply(img, &bytes);
    if !layout.problems.is_empty() {
        return;
    }
    let Ok(moved) = table::read(img, layout.sector_size, img.size) else {
        panic!("EBR of partition {} moved to {new_ebr}: the table no longer reads", p.number);
    };
    // Put over another logical's data or where the chain reads otherwise.
    if !moved.problems.is_empty() {
        return;
    }
    let rows = |l: &Layout| -> Vec<Row> { l.partitions.iter().map(read_row).collect() };
    let mut want = rows(layout);
    if let Some(row) = want.iter_mut().find(|r| r.0 == p.number) {
        row.6 = Some(new_ebr);
    }
    assert_eq!(rows(&moved), want, "EBR of partition {} moved to {new_ebr}", p.number);
}

/// What `blkalign plan --script` makes of a script, on a disk that holds
/// its last LBA (or of 64 GiB): the plan, bounded by the script, and the
/// disk's size.
pub fn plan_script(script: &Script) -> Option<(Plan, u64)> {
    let ss = script.sector_size.unwrap_or(512);
    let table_sectors = plan::GPT_ENTRIES_BYTES.div_ceil(ss) + 1;
    let sectors = match script.last_lba {
        Some(last) => last.checked_add(1 + table_sectors)?,
        None => (64 << 30) / ss,
    };
    let size_bytes = sectors.checked_mul(ss)?;
    let geometry = Geometry {
        logical: ss,
        physical: 4096.max(ss),
        physical_assumed: false,
        alignment_offset: 0,
        optimal_io: None,
    };
    let align = match script.grain {
        Some(grain) => {
            Align::Bytes(blkalign::align::lcm(plan::grain(&geometry, Align::Optimal).ok()?, grain)?)
        }
        None => Align::Optimal,
    };
    let label = script.label.unwrap_or(NewLabel::Gpt);
    let mut plan = plan::plan_table(&geometry, size_bytes, label, align, false, &script.requests).ok()?;
    script.bound(&mut plan).ok()?;
    Some((plan, size_bytes))
}

/// Identities for `count` partitions, all distinct, from `seed`.
pub fn ids(count: usize, seed: u32) -> Ids {
    let guid = |i: u32| {
        let mut g = [0u8; 16];
        g[..4].copy_from_slice(&seed.to_le_bytes());
        g[4..8].copy_from_slice(&i.to_le_bytes());
        g[8] = 0x80;
        g
    };
    Ids {
        disk_guid: guid(u32::MAX),
        partition_guids: (0..count as u32).map(guid).collect(),
        mbr_signature: seed | 1,
    }
}

/// A request of `size` with the type and name given.
pub fn request(
    size: plan::Size,
    type_id: &str,
    name: Option<String>,
    min_start: Option<u64>,
) -> PartitionRequest {
    PartitionRequest { min_start, size, type_id: type_id.to_string(), name }
}
