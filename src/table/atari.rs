//! Atari AHDI root sectors, read as Linux's block/partitions/atari.c reads
//! them: four entries in sector 0 (flag bit 0: in use; a three-letter id;
//! start and size in 512-byte units, big-endian), chains of extended root
//! sectors behind "XGM" entries, and, without those, ICD/Supra's eight
//! further entries. There is no magic: a root sector is Atari when one of
//! its four entries looks valid. Linux reads it only on 512-byte sectors.

use super::common::{in_logical_sectors, read_bytes};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::io::{be_u32, ReadAt};

/// Where the four AHDI entries and the eight ICD ones sit.
const ENTRIES_AT: usize = 0x1C6;
const ICD_AT: usize = 0x156;
const ENTRY_SIZE: usize = 12;
/// Linux's partition limit (DISK_MAX_PARTS): slots run below it.
const LIMIT: u32 = 256;
/// The ids ICD entries must have.
const ICD_IDS: [&[u8; 3]; 5] = [b"GEM", b"BGM", b"LNX", b"SWP", b"RAW"];

/// One partition_info: flag, id, start and size in 512-byte units.
#[derive(Clone, Copy)]
struct Entry {
    flag: u8,
    id: [u8; 3],
    start: u32,
    size: u32,
}

impl Entry {
    fn at(sector: &[u8], at: usize) -> Option<Entry> {
        let raw = sector.get(at..at + ENTRY_SIZE)?;
        Some(Entry {
            flag: raw[0],
            id: [raw[1], raw[2], raw[3]],
            start: be_u32(raw, 4)?,
            size: be_u32(raw, 8)?,
        })
    }

    fn used(&self) -> bool {
        self.flag & 1 == 1
    }

    /// Linux's VALID_PARTITION, in its 32-bit arithmetic: the end wraps,
    /// and the disk's size is cut to 32 bits.
    fn valid(&self, units: u32) -> bool {
        self.used()
            && self.id.iter().all(|&c| linux_isalnum(c))
            && self.start <= units
            && self.start.wrapping_add(self.size) <= units
    }

    fn type_id(&self) -> String {
        let shown = |c: u8| if c.is_ascii_graphic() { char::from(c) } else { '?' };
        self.id.iter().map(|&c| shown(c)).collect()
    }
}

/// The kernel's isalnum (lib/ctype.c): ASCII letters and digits, and the
/// Latin-1 letters.
fn linux_isalnum(c: u8) -> bool {
    c.is_ascii_alphanumeric() || (c >= 0xC0 && c != 0xD7 && c != 0xF7)
}

fn root_entries(sector: &[u8], at: usize, count: usize) -> Vec<Entry> {
    (0..count).filter_map(|i| Entry::at(sector, at + i * ENTRY_SIZE)).collect()
}

/// Whether sector 0 is an Atari root sector by the kernel's test, on a
/// device of `size_bytes`.
fn is_root(sector0: &[u8], size_bytes: u64) -> bool {
    let units = (size_bytes / 512) as u32; // Linux keeps 32 bits of it
    root_entries(sector0, ENTRIES_AT, 4).iter().any(|e| e.valid(units))
}

/// The Atari AHDI root sector.
pub struct Atari;

impl Scheme for Atari {
    fn name(&self) -> &'static str {
        "atari"
    }

    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        Ok(if read_into(disk.dev, disk.size_bytes, layout)? { Found::Table } else { Found::No })
    }
}

/// Fill `layout` when sector 0 is an Atari root sector; false when it is
/// not. Partitions are those Linux makes, numbered as it numbers them.
fn read_into(dev: &dyn ReadAt, size_bytes: u64, layout: &mut Layout) -> Result<bool, TableError> {
    let Some(root) = read_bytes(dev, 0, 512)? else { return Ok(false) };
    if !is_root(&root, size_bytes) {
        return Ok(false);
    }
    layout.label = Label::Atari;
    let mut walk = Walk { slot: 1, found: Vec::new(), problems: Vec::new() };
    let read = walk.root(dev, &root)?;
    if layout.sector_size != 512 {
        let listed: Vec<String> =
            walk.found.iter().map(|p| format!("{} ({}+{})", p.number, p.start, p.size)).collect();
        layout.problems.push(Problem::new(
            "label_ignored_by_linux",
            format!(
                "an Atari root sector on a disk of {}-byte logical sectors: Linux reads Atari \
                 tables only on 512-byte ones and makes no partitions (the table holds {} in \
                 512-byte units)",
                layout.sector_size,
                if listed.is_empty() { "none".to_string() } else { listed.join(", ") }
            ),
        ));
        return Ok(true);
    }
    layout.problems.extend(walk.problems);
    if read {
        for p in walk.found {
            let p = in_logical_sectors(p, layout);
            layout.partitions.extend(p);
        }
    }
    Ok(true)
}

/// The reading of a root sector and its extended chains.
struct Walk {
    /// The number Linux gives the next partition.
    slot: u32,
    /// In 512-byte units.
    found: Vec<Partition>,
    problems: Vec<Problem>,
}

impl Walk {
    /// Linux's put_partition: a partition of size 0 is none.
    fn put(&mut self, start: u64, e: &Entry) {
        if e.size > 0 {
            self.found.push(Partition {
                number: self.slot,
                start,
                size: u64::from(e.size),
                kind: PartKind::Atari,
                type_id: e.type_id(),
                name: None,
                ebr: None,
            });
        }
    }

    /// The four entries, then ICD's eight when no XGM chain was seen;
    /// false when a chain's sector cannot be read (Linux then makes no
    /// partitions of the table).
    fn root(&mut self, dev: &dyn ReadAt, root: &[u8]) -> Result<bool, TableError> {
        let mut extended = false;
        for e in root_entries(root, ENTRIES_AT, 4) {
            if self.slot >= LIMIT {
                break;
            }
            if e.used() {
                if &e.id == b"XGM" {
                    extended = true;
                    if !self.chain(dev, e.start)? {
                        return Ok(false);
                    }
                } else {
                    self.put(u64::from(e.start), &e);
                }
            }
            self.slot += 1;
        }
        let icd = root_entries(root, ICD_AT, 8);
        let is_icd = |e: &Entry| ICD_IDS.contains(&&e.id);
        if !extended && icd.first().is_some_and(is_icd) {
            for e in icd {
                if self.slot >= LIMIT {
                    break;
                }
                if e.used() && is_icd(&e) {
                    self.put(u64::from(e.start), &e);
                }
                self.slot += 1;
            }
        }
        Ok(true)
    }

    /// An XGM chain from unit `first`: each extended root sector holds a
    /// partition (relative to itself) and the link to the next (relative
    /// to the first). False when a sector cannot be read.
    fn chain(&mut self, dev: &dyn ReadAt, first: u32) -> Result<bool, TableError> {
        let mut at = u64::from(first);
        let mut seen = Vec::new();
        loop {
            let sector = match at.checked_mul(512) {
                Some(offset) => read_bytes(dev, offset, 512)?,
                None => None,
            };
            let Some(sector) = sector else {
                self.problems.push(Problem::new(
                    "atari_xgm_unreadable",
                    format!(
                        "an XGM extended root sector at unit {at} lies past the end of the \
                         device: Linux makes no partition of this table"
                    ),
                ));
                return Ok(false);
            };
            let entries = root_entries(&sector, ENTRIES_AT, 2);
            let (Some(data), Some(next)) = (entries.first(), entries.get(1)) else {
                return Ok(true);
            };
            if !data.used() {
                self.problems.push(Problem::new(
                    "atari_xgm_broken",
                    format!(
                        "the XGM extended root sector at unit {at} holds no partition in its \
                         first entry: Linux ends the chain there, partition {} is lost",
                        self.slot
                    ),
                ));
                return Ok(true);
            }
            self.put(at + u64::from(data.start), data);
            if !next.used() {
                return Ok(true);
            }
            if &next.id != b"XGM" {
                self.problems.push(Problem::new(
                    "atari_xgm_not_xgm",
                    format!(
                        "the XGM extended root sector at unit {at} links on with id {:?}, \
                         not XGM: Linux ends the chain there",
                        next.type_id()
                    ),
                ));
                return Ok(true);
            }
            seen.push(at);
            // Linux adds the link to the chain's start in 32 bits.
            at = u64::from(next.start.wrapping_add(first));
            if seen.contains(&at) && !self.problems.iter().any(|p| p.code == "atari_xgm_loop") {
                self.problems.push(Problem::new(
                    "atari_xgm_loop",
                    format!(
                        "the XGM chain comes back to unit {at}: Linux follows it round until \
                         it has {} partitions",
                        LIMIT - 1
                    ),
                ));
            }
            self.slot += 1;
            if self.slot == LIMIT {
                self.problems.push(Problem::new(
                    "atari_too_many",
                    format!("the XGM chain reaches Linux's limit of {} partitions", LIMIT - 1),
                ));
                return Ok(true);
            }
        }
    }
}

/// Hand-built root sectors for tests. Test fixtures only.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// Write entry `slot` (0-3 AHDI, then the ICD ones as 4-11) of the
    /// root sector at unit `sector`.
    pub fn entry(img: &mut [u8], sector: usize, slot: usize, id: &[u8; 3], start: u32, size: u32) {
        let at = sector * 512
            + if slot < 4 { ENTRIES_AT + slot * ENTRY_SIZE } else { ICD_AT + (slot - 4) * 12 };
        img[at] = 1;
        img[at + 1..at + 4].copy_from_slice(id);
        img[at + 4..at + 8].copy_from_slice(&start.to_be_bytes());
        img[at + 8..at + 12].copy_from_slice(&size.to_be_bytes());
    }

    /// 8192 units: GEM 1 at 2+2046, an XGM chain at 2048 (3 partitions:
    /// 2049+1000, 3050+1000, 4051+1000), LNX at 6144+2048.
    pub(crate) fn xgm_image() -> Vec<u8> {
        let mut img = vec![0u8; 8192 * 512];
        entry(&mut img, 0, 0, b"GEM", 2, 2046);
        entry(&mut img, 0, 1, b"XGM", 2048, 4096);
        entry(&mut img, 0, 2, b"LNX", 6144, 2048);
        for (i, at) in [2048usize, 3049, 4050].into_iter().enumerate() {
            entry(&mut img, at, 0, b"GEM", 1, 1000);
            if i < 2 {
                let next = u32::try_from(at + 1001 - 2048).unwrap();
                entry(&mut img, at, 1, b"XGM", next, 1001);
            }
        }
        img
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use crate::table::common::test_support::read_mutated;
    use crate::table::{read, Label, Layout};
    use proptest::prelude::*;

    fn atari(img: &[u8], ss: u64) -> Layout {
        let mut layout = Layout::blank(ss);
        assert!(super::read_into(&img.to_vec(), img.len() as u64, &mut layout).unwrap());
        assert_eq!(layout.label, Label::Atari);
        layout
    }

    fn got(layout: &Layout) -> Vec<(u32, u64, u64)> {
        layout.partitions.iter().map(|p| (p.number, p.start, p.size)).collect()
    }

    fn codes(layout: &Layout) -> Vec<&'static str> {
        layout.problems.iter().map(|p| p.code).collect()
    }

    #[test]
    fn four_entries_by_slot() {
        let mut img = vec![0u8; 8192 * 512];
        entry(&mut img, 0, 0, b"GEM", 2, 2046);
        entry(&mut img, 0, 2, b"LNX", 4096, 4096);
        let layout = atari(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(got(&layout), [(1, 2, 2046), (3, 4096, 4096)]);
        assert_eq!(layout.partitions[1].type_id, "LNX");
        let whole = read(&img, 512, img.len() as u64).unwrap();
        assert_eq!((whole.label, got(&whole)), (Label::Atari, got(&layout)));
    }

    #[test]
    fn no_valid_entry_is_no_atari_table() {
        let mut img = vec![0u8; 64 * 512];
        entry(&mut img, 0, 0, b"GEM", 8, 57); // ends past the disk
        let mut layout = Layout::blank(512);
        assert!(!super::read_into(&img, img.len() as u64, &mut layout).unwrap());
        entry(&mut img, 0, 0, b"G-M", 8, 50); // not alphanumeric
        assert!(!super::read_into(&img, img.len() as u64, &mut layout).unwrap());
        // A valid entry makes the table; the others count even if invalid.
        entry(&mut img, 0, 1, b"BGM", 8, 50);
        assert_eq!(got(&atari(&img, 512)), [(1, 8, 50), (2, 8, 50)]);
        // Linux's 32-bit end: a size that wraps passes its test.
        let mut img = vec![0u8; 64 * 512];
        entry(&mut img, 0, 0, b"GEM", 8, u32::MAX - 3);
        assert_eq!(got(&atari(&img, 512)), [(1, 8, u64::from(u32::MAX - 3))]);
        assert!(codes(&read(&img, 512, img.len() as u64).unwrap()).contains(&"beyond_end"));
    }

    #[test]
    fn xgm_chain_numbers_on() {
        let layout = atari(&xgm_image(), 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(
            got(&layout),
            [(1, 2, 2046), (2, 2049, 1000), (3, 3050, 1000), (4, 4051, 1000), (5, 6144, 2048)]
        );
    }

    #[test]
    fn xgm_chain_faults() {
        // The second link's first entry unused: the chain ends, and its
        // number is skipped.
        let mut img = xgm_image();
        img[3049 * 512 + 0x1C6] = 0;
        let layout = atari(&img, 512);
        assert_eq!(got(&layout), [(1, 2, 2046), (2, 2049, 1000), (4, 6144, 2048)]);
        assert_eq!(codes(&layout), ["atari_xgm_broken"]);
        // A link that is not XGM ends the chain after its partition.
        let mut img = xgm_image();
        img[2048 * 512 + 0x1C6 + 13] = b'Y';
        let layout = atari(&img, 512);
        assert_eq!(got(&layout), [(1, 2, 2046), (2, 2049, 1000), (3, 6144, 2048)]);
        assert_eq!(codes(&layout), ["atari_xgm_not_xgm"]);
        // A link past the end: Linux makes no partition at all.
        let mut img = xgm_image();
        entry(&mut img, 2048, 1, b"XGM", 900_000, 10);
        let layout = atari(&img, 512);
        assert!(layout.partitions.is_empty());
        assert_eq!(codes(&layout), ["atari_xgm_unreadable"]);
    }

    #[test]
    fn loop_in_the_chain() {
        // The last link points back at the first: round to the limit.
        let mut img = xgm_image();
        entry(&mut img, 4050, 1, b"XGM", 0, 1);
        let layout = atari(&img, 512);
        assert_eq!(codes(&layout), ["atari_xgm_loop", "atari_too_many"]);
        assert_eq!(layout.partitions.len(), 255);
        assert_eq!(layout.partitions.last().unwrap().number, 255);
    }

    #[test]
    fn icd_entries_after_the_four() {
        let mut img = vec![0u8; 8192 * 512];
        entry(&mut img, 0, 0, b"GEM", 2, 1000);
        entry(&mut img, 0, 4, b"BGM", 1002, 1000);
        entry(&mut img, 0, 5, b"XYZ", 2002, 1000); // not an ICD id
        entry(&mut img, 0, 6, b"LNX", 4096, 4096);
        let layout = atari(&img, 512);
        assert_eq!(got(&layout), [(1, 2, 1000), (5, 1002, 1000), (7, 4096, 4096)]);
        // No ICD entries when the first of them has another id.
        entry(&mut img, 0, 4, b"ABC", 1002, 1000);
        assert_eq!(got(&atari(&img, 512)), [(1, 2, 1000)]);
        // Nor when an XGM chain was read.
        let mut img = xgm_image();
        entry(&mut img, 0, 4, b"BGM", 7000, 100);
        assert_eq!(atari(&img, 512).partitions.len(), 5);
    }

    #[test]
    fn linux_ignores_it_on_4096_byte_sectors() {
        let mut img = vec![0u8; 8192 * 512];
        entry(&mut img, 0, 0, b"GEM", 8, 2040);
        let layout = atari(&img, 4096);
        assert!(layout.partitions.is_empty());
        assert_eq!(codes(&layout), ["label_ignored_by_linux"]);
        assert!(layout.problems[0].message.contains("1 (8+2040)"));
    }

    proptest! {
        #[test]
        fn mutated_roots_never_panic(
            muts in proptest::collection::vec(
                (prop_oneof![Just(0usize), Just(2048), Just(3049), Just(4050)], 0x150usize..0x200, any::<u8>()),
                1..12,
            ),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let muts: Vec<(usize, u8)> = muts.into_iter().map(|(s, at, b)| (s * 512 + at, b)).collect();
            read_mutated(xgm_image(), &muts, None, ss);
        }
    }
}
