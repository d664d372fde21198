//! BSD disklabels: on the whole disk at byte 64 of sector 0 (Alpha, read
//! as Linux's osf.c reads it) or in sector 1 (i386, which only libblkid
//! reads), and nested in MBR slices of type 0xA5, 0xA6 or 0xA9 (read as
//! Linux's msdos.c parse_bsd reads them). Positions count 512-byte units.

use super::common::{in_logical_sectors, libblkid_differs, read_bytes};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{types, Label, Layout, PartKind, Partition, Problem};
use crate::io::be_u16;
use crate::io::{le_u16, le_u32, ReadAt};

const MAGIC: u32 = 0x8256_4557;
/// Offsets in a label of d_magic2, d_npartitions and d_partitions.
const MAGIC2_AT: usize = 132;
const COUNT_AT: usize = 138;
const ENTRIES_AT: usize = 148;
const ENTRY_SIZE: usize = 16;
/// Entries read: 16 in a slice (and by libblkid anywhere), up to 18 in an
/// Alpha label (Linux ignores a label claiming more).
const MAX_ENTRIES: usize = 16;
const MAX_ALPHA: usize = 18;
/// Where the Alpha label sits in sector 0.
const ALPHA_AT: usize = 64;
/// Type of an unused entry, which on the whole disk marks the raw
/// partition c (or d) that covers it.
pub(crate) const UNUSED: &str = "0x00";
/// MBR type of a FreeBSD slice, whose labels may count from the slice.
const FREEBSD: u8 = 0xA5;

/// One d_partitions entry, in 512-byte units.
struct Entry {
    size: u64,
    offset: u64,
    fstype: u8,
}

/// The first `count` entries of `label` (fewer if it ends first).
fn entries(label: &[u8], count: usize) -> Vec<Entry> {
    (0..count)
        .map_while(|i| {
            let at = ENTRIES_AT + i * ENTRY_SIZE;
            Some(Entry {
                size: u64::from(le_u32(label, at)?),
                offset: u64::from(le_u32(label, at + 4)?),
                fstype: *label.get(at + 12)?,
            })
        })
        .collect()
}

fn count_of(label: &[u8]) -> usize {
    usize::from(le_u16(label, COUNT_AT).unwrap_or(0))
}

fn bsd_partition(number: u32, start: u64, e: &Entry) -> Partition {
    Partition {
        number,
        start,
        size: e.size,
        kind: PartKind::Bsd,
        type_id: format!("0x{:02x}", e.fstype),
        name: None,
        ebr: None,
    }
}

/// The xor of the label's 16-bit words up to its last entry (0 when its
/// checksum holds); None when the label claims more entries than it holds.
fn xor_of(label: &[u8]) -> Option<u16> {
    let words = label.get(..ENTRIES_AT + count_of(label) * ENTRY_SIZE)?;
    Some(words.chunks_exact(2).fold(0u16, |x, w| x ^ u16::from_le_bytes([w[0], w[1]])))
}

/// BSD refuses a label whose checksum fails; Linux and libblkid do not
/// check it.
fn check_sum(label: &[u8], layout: &mut Layout) {
    if xor_of(label).is_some_and(|sum| sum != 0) {
        layout.problems.push(Problem::new(
            "bsd_bad_checksum",
            "the BSD disklabel's checksum fails: BSD will not use it, though Linux and libblkid do",
        ));
    }
}

/// A BSD disklabel on the whole disk.
pub(crate) struct Bsd;

impl Scheme for Bsd {
    fn name(&self) -> &'static str {
        "bsd"
    }

    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        Ok(if read_into(disk.dev, layout)? { Found::Table } else { Found::No })
    }

    fn holds_no_data(&self, p: &Partition) -> bool {
        p.kind == PartKind::Bsd && p.type_id == UNUSED
    }
}

/// Fill `layout` from a BSD label on the whole disk; false when there is
/// none. A Sun label in sector 0 wins over one in sector 1, as it does for
/// the kernel and libblkid.
fn read_into(dev: &dyn ReadAt, layout: &mut Layout) -> Result<bool, TableError> {
    let Some(sector0) = read_bytes(dev, 0, 512)? else { return Ok(false) };
    let alpha = sector0.get(ALPHA_AT..).unwrap_or_default();
    if le_u32(alpha, 0) == Some(MAGIC) {
        let linux = le_u32(alpha, MAGIC2_AT) == Some(MAGIC) && count_of(alpha) <= MAX_ALPHA;
        whole_disk(alpha, linux, layout);
        return Ok(true);
    }
    if be_u16(&sector0, 508) == Some(super::sun::MAGIC) {
        return Ok(false);
    }
    match read_bytes(dev, 512, 512)? {
        Some(label) if le_u32(&label, 0) == Some(MAGIC) => {
            whole_disk(&label, false, layout);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// A whole-disk label. Linux (when `linux`) numbers its entries by slot
/// and keeps every one with a size; libblkid keeps the used ones (type not
/// 0), numbered in turn. A label Linux ignores is read as libblkid reads it.
fn whole_disk(label: &[u8], linux: bool, layout: &mut Layout) {
    layout.label = Label::Bsd;
    check_sum(label, layout);
    let count = count_of(label);
    let used = entries(label, count.min(MAX_ENTRIES)).into_iter().filter(|e| e.fstype != 0);
    let blkid: Vec<Partition> =
        (1u32..).zip(used).map(|(n, e)| bsd_partition(n, e.offset, &e)).collect();
    let kernel: Vec<Partition> = if linux {
        let slots = (1u32..).zip(entries(label, count)).filter(|(_, e)| e.size > 0);
        slots.map(|(n, e)| bsd_partition(n, e.offset, &e)).collect()
    } else {
        let msg = "a BSD disklabel outside any MBR slice and not at byte 64 of sector 0 (or \
                   with a bad second magic or too many entries): blkid and partx read it, but \
                   Linux makes no partitions of it";
        layout.problems.push(Problem::new("label_ignored_by_linux", msg));
        blkid.clone()
    };
    let mut found = Vec::new();
    for p in kernel {
        found.extend(in_logical_sectors(p, layout));
    }
    let theirs = quietly_in(&blkid, layout.sector_size);
    let why = "libblkid skips entries of unused type and numbers the rest in turn";
    layout.problems.extend(libblkid_differs("BSD", &found, &theirs, why));
    layout.partitions.extend(found);
}

/// (number, start, size) of partitions counted in 512-byte units, in
/// logical sectors of `ss`, for comparing with what we report.
fn quietly_in(parts: &[Partition], ss: u64) -> Vec<(u32, u64, u64)> {
    let scale = |units: u64| units.saturating_mul(512) / ss;
    parts.iter().map(|p| (p.number, scale(p.start), scale(p.size))).collect()
}

/// The BSD partitions inside MBR slice `slice` (types 0xA5, 0xA6, 0xA9),
/// numbered from `next` as Linux numbers them (`next` moves past the numbers
/// taken); problems go to `layout`.
/// Linux skips entries of unused type, the one equal to the slice, and
/// ones reaching outside it; an empty entry takes a number all the same.
pub(crate) fn read_nested(
    dev: &dyn ReadAt,
    slice: &Partition,
    next: &mut u32,
    layout: &mut Layout,
) -> Vec<Partition> {
    let first = *next;
    let units = layout.sector_size / 512;
    let (Some(offset), Some(size)) =
        (slice.start.checked_mul(units), slice.size.checked_mul(units))
    else {
        return Vec::new();
    };
    let span = Span { number: slice.number, offset, size };
    let Some(label) = slice_label(dev, &span, layout) else { return Vec::new() };
    check_sum(&label, layout);
    let used: Vec<Entry> = entries(&label, count_of(&label).min(MAX_ENTRIES))
        .into_iter()
        .filter(|e| e.fstype != 0)
        .collect();
    // FreeBSD counts from the slice when its partition c starts at 0;
    // Linux follows, libblkid does not.
    let c_at_zero = entries(&label, 3).get(2).is_some_and(|c| c.offset == 0);
    let relative = types::parse_mbr_code(&slice.type_id) == Some(FREEBSD) && c_at_zero;
    let found = span.linux_partitions(&used, relative, next, layout);
    let blkid: Vec<Partition> = (first..)
        .zip(used.iter().filter(|e| span.takes(e.offset, e.size)))
        .map(|(n, e)| bsd_partition(n, e.offset, e))
        .collect();
    let why = if relative {
        "this FreeBSD label counts from its slice (its partition c starts at 0), and libblkid \
         reads its offsets from the start of the disk"
    } else {
        "libblkid lists empty entries too"
    };
    let theirs = quietly_in(&blkid, layout.sector_size);
    layout.problems.extend(libblkid_differs("BSD", &found, &theirs, why));
    found
}

/// MBR partition `number` as parse_bsd sees it, in 512-byte units.
struct Span {
    number: u32,
    offset: u64,
    size: u64,
}

impl Span {
    /// An entry Linux and libblkid take: inside the slice, not all of it.
    fn takes(&self, start: u64, len: u64) -> bool {
        !self.is_all(start, len) && self.holds(start, len)
    }

    fn is_all(&self, start: u64, len: u64) -> bool {
        start == self.offset && len == self.size
    }

    fn holds(&self, start: u64, len: u64) -> bool {
        start >= self.offset && start.saturating_add(len) <= self.offset.saturating_add(self.size)
    }

    /// The partitions Linux makes of the used entries, numbered from
    /// `next`; an empty entry takes a number all the same.
    fn linux_partitions(
        &self,
        used: &[Entry],
        relative: bool,
        next: &mut u32,
        layout: &mut Layout,
    ) -> Vec<Partition> {
        let shift = if relative { self.offset } else { 0 };
        let mut found = Vec::new();
        let mut number = *next;
        for e in used {
            let start = e.offset.saturating_add(shift);
            if self.is_all(start, e.size) {
                continue;
            }
            if !self.holds(start, e.size) {
                let msg = format!(
                    "a BSD partition in partition {} (512-byte units {start}+{}) reaches \
                     outside its slice: Linux ignores it",
                    self.number, e.size
                );
                layout.problems.push(Problem::new("bsd_outside_slice", msg));
                continue;
            }
            if e.size > 0 {
                found.extend(in_logical_sectors(bsd_partition(number, start, e), layout));
            }
            number = number.saturating_add(1);
        }
        *next = number;
        found
    }
}

/// The label in the second 512 bytes of the slice, if it has the magic;
/// a read error is reported.
fn slice_label(dev: &dyn ReadAt, span: &Span, layout: &mut Layout) -> Option<Vec<u8>> {
    let at = span.offset.checked_add(1)?.checked_mul(512)?;
    match read_bytes(dev, at, 512) {
        Ok(label) => label.filter(|l| le_u32(l, 0) == Some(MAGIC)),
        Err(e) => {
            let msg = format!("cannot read the BSD disklabel of partition {}: {e}", span.number);
            layout.problems.push(Problem::new("bsd_unreadable", msg));
            None
        }
    }
}

/// Hand-built labels for tests. Test fixtures only, not a table writer.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// Write a label at byte `at` of `img` with (size, offset, fstype)
    /// entries, both magics and a valid checksum.
    pub(crate) fn put_label(img: &mut [u8], at: usize, parts: &[(u32, u32, u8)]) {
        let label = &mut img[at..at + 512];
        label[..4].copy_from_slice(&MAGIC.to_le_bytes());
        label[MAGIC2_AT..MAGIC2_AT + 4].copy_from_slice(&MAGIC.to_le_bytes());
        let count = u16::try_from(parts.len()).unwrap();
        label[COUNT_AT..COUNT_AT + 2].copy_from_slice(&count.to_le_bytes());
        for (i, &(size, offset, fstype)) in parts.iter().enumerate() {
            let e = ENTRIES_AT + i * ENTRY_SIZE;
            label[e..e + 4].copy_from_slice(&size.to_le_bytes());
            label[e + 4..e + 8].copy_from_slice(&offset.to_le_bytes());
            label[e + 12] = fstype;
        }
        seal(label);
    }

    /// Recompute the checksum of the label at the start of `label`.
    pub(crate) fn seal(label: &mut [u8]) {
        label[136..138].fill(0);
        let sum = xor_of(label).unwrap_or(0); // too many entries to sum: left 0
        label[136..138].copy_from_slice(&sum.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use crate::table::common::test_support::{read_alone, read_mutated, Seal};
    use crate::table::fixtures::mbr_entry;
    use crate::table::{mbr, read, Label, Layout, PartKind};
    use proptest::prelude::*;

    fn whole(img: &[u8], ss: u64) -> Layout {
        read_alone(super::read_into, img, ss, Label::Bsd)
    }

    /// The MBR reader's result, with the BSD partitions of its slices.
    fn nested(img: &[u8], ss: u64) -> Layout {
        let mut layout = Layout::blank(ss);
        let boot = mbr::Mbr::parse(&img[..512]).unwrap();
        mbr::read_into(&img.to_vec(), &boot, img.len() as u64 / ss, &mut layout);
        layout
    }

    fn got(layout: &Layout, kind: PartKind) -> Vec<(u32, u64, u64)> {
        let parts = layout.partitions.iter().filter(|p| p.kind == kind);
        parts.map(|p| (p.number, p.start, p.size)).collect()
    }

    fn codes(layout: &Layout) -> Vec<&'static str> {
        layout.problems.iter().map(|p| p.code).collect()
    }

    #[test]
    fn alpha_label_numbers_by_slot() {
        let mut img = vec![0u8; 8192 * 512];
        put_label(&mut img, 64, &[(2048, 2048, 7), (0, 0, 0), (512, 6000, 0), (1024, 4096, 1)]);
        let layout = whole(&img, 512);
        assert_eq!(got(&layout, PartKind::Bsd), [(1, 2048, 2048), (3, 6000, 512), (4, 4096, 1024)]);
        assert_eq!(layout.partitions[1].type_id, super::UNUSED);
        // libblkid skips c (unused type) and numbers d as 2.
        assert_eq!(codes(&layout), ["libblkid_differs"]);
        assert!(layout.problems[0].message.contains("lists 1 (2048+2048), 2 (4096+1024)"));
        // Through the whole reader too: no MBR, so BSD.
        assert_eq!(read(&img, 512, img.len() as u64).unwrap().label, Label::Bsd);
    }

    #[test]
    fn alpha_label_with_too_many_entries_is_ignored_by_linux() {
        let mut img = vec![0u8; 8192 * 512];
        put_label(&mut img, 64, &[(1024, 2048, 7); 19]);
        let layout = whole(&img, 512);
        assert!(codes(&layout).contains(&"label_ignored_by_linux"));
        assert_eq!(layout.partitions.len(), 16);
    }

    #[test]
    fn i386_label_in_sector_1_is_only_read_by_libblkid() {
        let mut img = vec![0u8; 8192 * 512];
        put_label(&mut img, 512, &[(2048, 2048, 7), (0, 0, 0), (8192, 0, 0), (1024, 4096, 1)]);
        let layout = whole(&img, 512);
        assert_eq!(codes(&layout), ["label_ignored_by_linux"]);
        assert_eq!(got(&layout, PartKind::Bsd), [(1, 2048, 2048), (2, 4096, 1024)]);
    }

    #[test]
    fn bad_checksum_is_a_warning() {
        let mut img = vec![0u8; 8192 * 512];
        put_label(&mut img, 64, &[(2048, 2048, 7)]);
        img[64 + 40] ^= 1;
        let layout = whole(&img, 512);
        assert_eq!(codes(&layout), ["bsd_bad_checksum"]);
        assert_eq!(layout.partitions.len(), 1);
    }

    /// An MBR with primary 1 (0x83, 63+1985) and a BSD slice 2 at 2048+4096
    /// holding `parts`, plus an extended 3 with one logical.
    fn nested_image(kind: u8, parts: &[(u32, u32, u8)]) -> Vec<u8> {
        let mut img = vec![0u8; 8192 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 63, 1985);
        mbr_entry(&mut img, 0, 1, kind, 2048, 4096);
        mbr_entry(&mut img, 0, 2, 0x05, 6144, 1024);
        mbr_entry(&mut img, 6144 * 512, 0, 0x83, 1, 1023);
        put_label(&mut img, 2049 * 512, parts);
        img
    }

    #[test]
    fn nested_after_the_logicals_skipping_as_linux_does() {
        let parts = [
            (1024, 2048, 7), // a: numbered 6
            (512, 3072, 1),  // b: 7
            (4096, 2048, 0), // c: unused type
            (4096, 2048, 7), // d: the whole slice
            (1024, 5632, 7), // e: reaches outside
            (0, 4000, 7),    // f: empty, takes number 8
            (100, 4000, 7),  // g: 9
        ];
        let layout = nested(&nested_image(0xA9, &parts), 512);
        assert_eq!(layout.label, Label::Mbr);
        assert_eq!(got(&layout, PartKind::Logical), [(5, 6145, 1023)]);
        assert_eq!(got(&layout, PartKind::Bsd), [(6, 2048, 1024), (7, 3072, 512), (9, 4000, 100)]);
        assert_eq!(codes(&layout), ["bsd_outside_slice", "libblkid_differs"]);
    }

    #[test]
    fn freebsd_offsets_relative_to_the_slice() {
        let parts = [(1024, 0, 7), (512, 1024, 1), (4096, 0, 0)];
        let layout = nested(&nested_image(0xA5, &parts), 512);
        assert_eq!(got(&layout, PartKind::Bsd), [(6, 2048, 1024), (7, 3072, 512)]);
        assert_eq!(codes(&layout), ["libblkid_differs"]);
        // The same label in a NetBSD slice counts from the disk: outside.
        let layout = nested(&nested_image(0xA9, &parts), 512);
        assert!(got(&layout, PartKind::Bsd).is_empty());
    }

    #[test]
    fn nested_in_4096_byte_sectors() {
        // The slice 256+512 of 4096 bytes is 2048+4096 units; its label is
        // at byte 256 × 4096 + 512.
        let mut img = vec![0u8; 1024 * 4096];
        mbr_entry(&mut img, 0, 0, 0xA6, 256, 512);
        put_label(&mut img, 256 * 4096 + 512, &[(1024, 2048, 7), (8, 3073, 7)]);
        let layout = nested(&img, 4096);
        assert_eq!(got(&layout, PartKind::Bsd), [(5, 256, 128), (6, 384, 1)]);
        assert_eq!(codes(&layout), ["start_not_whole_sector"]);
    }

    proptest! {
        #[test]
        fn mutated_labels_never_panic(
            muts in proptest::collection::vec((0usize..1024, any::<u8>()), 1..12),
            in_slice in any::<bool>(),
            resealed in any::<bool>(),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let (img, at) = if in_slice {
                (nested_image(0xA5, &[(1024, 0, 7), (512, 1024, 1), (4096, 0, 0)]), 2049 * 512)
            } else {
                let mut img = vec![0u8; 64 * 512];
                put_label(&mut img, 64, &[(8, 8, 7), (0, 0, 0), (64, 0, 0)]);
                (img, 64)
            };
            // Around the label: the sector before it and its own.
            let base = at - at.min(512);
            let muts: Vec<_> = muts.iter().map(|&(offset, byte)| (base + offset, byte)).collect();
            let reseal = |img: &mut [u8]| seal(&mut img[at..at + 512]);
            read_mutated(img, &muts, resealed.then_some(&reseal as Seal), ss);
        }
    }
}
