//! Checks on a layout as read, whatever its scheme: partitions past the
//! end of the device, and partitions that overlap.

use super::{mbr, types, Layout, PartKind, Partition, Problem};

/// One past the last sector of `p`, or None if that overflows.
fn end_of(p: &Partition) -> Option<u64> {
    p.start.checked_add(p.size)
}

pub(super) fn check_bounds(layout: &mut Layout, sectors: u64) {
    for p in &layout.partitions {
        if end_of(p).is_none_or(|end| end > sectors) {
            layout.problems.push(Problem::new(
                "beyond_end",
                format!(
                    "partition {} (sectors {}+{}) extends past the end of the device ({} sectors)",
                    p.number, p.start, p.size, sectors
                ),
            ));
        }
    }
}

/// Report overlapping partitions. A sweep in start order keeps this linear
/// for GPTs with many entries; the extended container is checked apart,
/// since it holds its logicals by design, and so are entries that hold no
/// data (`no_data`, which the schemes answer).
pub(super) fn check_overlaps(
    layout: &mut Layout,
    is_iso: impl FnOnce() -> bool,
    no_data: impl Fn(&Partition) -> bool,
) {
    let mut pairs = Vec::new();
    let nested = layout.partitions.iter().any(|p| p.kind == PartKind::Bsd);
    // Containers hold their logicals or BSD partitions by design.
    let container = |p: &Partition| {
        p.kind == PartKind::Extended
            || (nested
                && p.kind == PartKind::Primary
                && types::parse_mbr_code(&p.type_id).is_some_and(|c| mbr::BSD_TYPES.contains(&c)))
    };
    let mut sorted: Vec<&Partition> =
        layout.partitions.iter().filter(|p| p.size > 0 && !container(p) && !no_data(p)).collect();
    sorted.sort_by_key(|p| (p.start, p.number));
    let mut reach: Option<(&Partition, u64)> = None;
    for p in sorted {
        let end = end_of(p).unwrap_or(u64::MAX);
        if let Some((q, q_end)) = reach {
            if p.start < q_end {
                pairs.push((q, p));
            }
            if end <= q_end {
                continue;
            }
        }
        reach = Some((p, end));
    }
    // At most four MBR slots, so pairwise is cheap.
    let slots: Vec<&Partition> = layout
        .partitions
        .iter()
        .filter(|p| matches!(p.kind, PartKind::Primary | PartKind::Extended))
        .collect();
    for (i, a) in slots.iter().enumerate() {
        for b in slots.iter().skip(i + 1) {
            let has_ext = container(a) || container(b);
            if has_ext && intersects(a, b) {
                pairs.push((a, b));
            }
        }
    }
    // xorriso puts a hybrid ISO's EFI image partition inside the one
    // covering the ISO, on purpose: noted, not an error. Partial overlaps
    // stay errors.
    let iso = pairs.iter().any(|&(a, b)| inside(a, b) || inside(b, a)) && is_iso();
    let found: Vec<Problem> = pairs
        .into_iter()
        .map(|(a, b)| match (iso, inside(a, b), inside(b, a)) {
            (true, true, _) => iso_nested(b, a),
            (true, _, true) => iso_nested(a, b),
            _ => overlap(a, b),
        })
        .collect();
    layout.problems.extend(found);
}

/// `a` lies wholly inside `b`.
fn inside(a: &Partition, b: &Partition) -> bool {
    a.start >= b.start && end_of(a).zip(end_of(b)).is_some_and(|(ae, be)| ae <= be)
}

fn iso_nested(outer: &Partition, inner: &Partition) -> Problem {
    Problem::new(
        "iso_nested",
        format!(
            "partition {} lies inside partition {}: a hybrid ISO's boot image, a file of the \
             ISO that firmware finds through the table (intentional)",
            inner.number, outer.number
        ),
    )
}

fn intersects(a: &Partition, b: &Partition) -> bool {
    let a_end = end_of(a).unwrap_or(u64::MAX);
    let b_end = end_of(b).unwrap_or(u64::MAX);
    a.size > 0 && b.size > 0 && a.start < b_end && b.start < a_end
}

fn overlap(a: &Partition, b: &Partition) -> Problem {
    let (a, b) = if a.number <= b.number { (a, b) } else { (b, a) };
    Problem::new(
        "overlap",
        format!(
            "partitions {} (sectors {}+{}) and {} (sectors {}+{}) overlap",
            a.number, a.start, a.size, b.number, b.start, b.size
        ),
    )
}
