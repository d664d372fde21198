//! The MBR in LBA 0 and the chain of EBRs inside an extended partition.

use super::{
    le_u16, le_u32, read_lba, Label, Layout, MbrInfo, PartKind, Partition, Problem, ReadAt,
};
use std::collections::HashSet;

/// Bytes 510-511 of an MBR or EBR.
pub const SIGNATURE: u16 = 0xAA55;
/// Offset of the four partition entries.
pub const ENTRIES_OFFSET: usize = 446;
pub const ENTRY_SIZE: usize = 16;
/// Type of the entry guarding a GPT.
pub const TYPE_GPT: u8 = 0xEE;
/// Types that make an entry an extended container.
pub const EXTENDED_TYPES: [u8; 3] = [0x05, 0x0F, 0x85];
/// Longer EBR chains are treated as corrupt.
pub const MAX_EBRS: usize = 1024;

/// One 16-byte partition entry, every field as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub boot: u8,
    pub chs_first: [u8; 3],
    pub kind: u8,
    pub chs_last: [u8; 3],
    pub start_lba: u32,
    pub sectors: u32,
}

impl Entry {
    /// Decode an entry; None when `raw` is shorter than 16 bytes.
    pub fn parse(raw: &[u8]) -> Option<Entry> {
        let raw: &[u8; ENTRY_SIZE] = raw.get(..ENTRY_SIZE)?.try_into().ok()?;
        Some(Entry {
            boot: raw[0],
            chs_first: [raw[1], raw[2], raw[3]],
            kind: raw[4],
            chs_last: [raw[5], raw[6], raw[7]],
            start_lba: le_u32(raw, 8)?,
            sectors: le_u32(raw, 12)?,
        })
    }

    /// Unused slot. Linux also skips entries of zero size.
    pub fn is_empty(&self) -> bool {
        self.kind == 0 || self.sectors == 0
    }

    pub fn is_extended(&self) -> bool {
        EXTENDED_TYPES.contains(&self.kind)
    }

    fn type_id(&self) -> String {
        format!("0x{:02x}", self.kind)
    }
}

/// A boot record: the MBR itself or an EBR (same layout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mbr {
    pub disk_signature: u32,
    pub entries: [Entry; 4],
}

impl Mbr {
    /// Decode a boot record; None without the 0x55AA signature.
    pub fn parse(sector: &[u8]) -> Option<Mbr> {
        if le_u16(sector, 510)? != SIGNATURE {
            return None;
        }
        let entry = |i: usize| Entry::parse(sector.get(ENTRIES_OFFSET + i * ENTRY_SIZE..)?);
        Some(Mbr {
            disk_signature: le_u32(sector, 440)?,
            entries: [entry(0)?, entry(1)?, entry(2)?, entry(3)?],
        })
    }

    /// Holds a 0xEE entry, protective or hybrid.
    pub fn guards_gpt(&self) -> bool {
        self.entries.iter().any(|e| e.kind == TYPE_GPT)
    }

    /// Facts about an MBR sitting in front of a GPT, with its problems.
    pub fn gpt_guard_info(&self, problems: &mut Vec<Problem>) -> MbrInfo {
        let guard = self.entries.iter().find(|e| e.kind == TYPE_GPT);
        let others = self.entries.iter().any(|e| !e.is_empty() && e.kind != TYPE_GPT);
        let hybrid = guard.is_some() && others;
        if hybrid {
            problems.push(Problem::new(
                "hybrid_mbr",
                "the MBR holds a 0xEE entry beside other partitions (hybrid MBR); \
                 tools that read the MBR see a different layout than the GPT",
            ));
        }
        // Linux rejects a protective MBR whose 0xEE entry does not start at LBA 1.
        if let Some(e) = guard.filter(|e| e.start_lba != 1) {
            problems.push(Problem::new(
                "pmbr_bad_start",
                format!(
                    "the 0xEE entry starts at LBA {}, not 1; Linux will ignore the GPT",
                    e.start_lba
                ),
            ));
        }
        MbrInfo {
            disk_signature: self.disk_signature,
            protective: guard.is_some() && !hybrid,
            hybrid,
            ebrs: Vec::new(),
        }
    }
}

/// Fill `layout` from an MBR and its EBR chain.
pub(crate) fn read_into(dev: &dyn ReadAt, mbr: &Mbr, sectors: u64, layout: &mut Layout) {
    let mut info = MbrInfo {
        disk_signature: mbr.disk_signature,
        protective: false,
        hybrid: false,
        ebrs: Vec::new(),
    };
    let mut extended: Option<Partition> = None;
    for (number, e) in (1u32..).zip(&mbr.entries) {
        if e.is_empty() {
            continue;
        }
        let kind = if e.is_extended() { PartKind::Extended } else { PartKind::Primary };
        let part = partition(number, u64::from(e.start_lba), e, kind, None);
        if kind == PartKind::Extended {
            if let Some(first) = &extended {
                layout.problems.push(Problem::new(
                    "mbr_multiple_extended",
                    format!(
                        "partition {number} is a second extended partition; \
                         only partition {} is followed",
                        first.number
                    ),
                ));
            } else {
                extended = Some(part.clone());
            }
        }
        layout.partitions.push(part);
    }
    if let Some(ext) = extended {
        let mut chain = Chain::new(dev, layout.sector_size, sectors, ext);
        chain.follow();
        info.ebrs = chain.ebrs;
        layout.partitions.extend(chain.logicals);
        layout.problems.extend(chain.problems);
    }
    layout.label = Label::Mbr;
    layout.mbr = Some(info);
}

fn partition(number: u32, start: u64, e: &Entry, kind: PartKind, ebr: Option<u64>) -> Partition {
    Partition {
        number,
        start,
        size: u64::from(e.sectors),
        kind,
        type_id: e.type_id(),
        name: None,
        ebr,
    }
}

/// A walk down the EBR chain of one extended partition.
struct Chain<'a> {
    dev: &'a dyn ReadAt,
    sector_size: u64,
    sectors: u64,
    ext_start: u64,
    /// One past the extended partition's last sector.
    ext_end: u64,
    ebrs: Vec<u64>,
    logicals: Vec<Partition>,
    problems: Vec<Problem>,
}

impl<'a> Chain<'a> {
    fn new(dev: &'a dyn ReadAt, sector_size: u64, sectors: u64, ext: Partition) -> Self {
        Chain {
            dev,
            sector_size,
            sectors,
            ext_start: ext.start,
            ext_end: ext.start.saturating_add(ext.size),
            ebrs: Vec::new(),
            logicals: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Walk the chain, collecting EBRs, logicals and problems in order.
    fn follow(&mut self) {
        let mut seen = HashSet::new();
        let mut next = Some(self.ext_start);
        while let Some(lba) = next {
            if !seen.insert(lba) {
                self.problem("ebr_loop", format!("the EBR chain loops back to LBA {lba}"));
                break;
            }
            if seen.len() > MAX_EBRS {
                let msg =
                    format!("the EBR chain is longer than {MAX_EBRS} links; stopped at LBA {lba}");
                self.problem("ebr_chain_too_long", msg);
                break;
            }
            next = self.visit(lba);
        }
    }

    fn problem(&mut self, code: &'static str, message: String) {
        self.problems.push(Problem::new(code, message));
    }

    /// Read the EBR at `lba`, record its logical, and return the next link.
    fn visit(&mut self, lba: u64) -> Option<u64> {
        if lba >= self.sectors {
            self.problem(
                "ebr_beyond_end",
                format!("the EBR at LBA {lba} lies past the end of the device"),
            );
            return None;
        }
        let sector = match read_lba(self.dev, lba, self.sector_size) {
            Ok(sector) => sector,
            Err(e) => {
                self.problem("ebr_unreadable", format!("cannot read the EBR at LBA {lba}: {e}"));
                return None;
            }
        };
        let Some(ebr) = Mbr::parse(&sector) else {
            let msg =
                format!("the EBR at LBA {lba} has no 0x55AA signature; the chain stops there");
            self.problem("ebr_bad_signature", msg);
            return None;
        };
        self.ebrs.push(lba);
        // As Linux reads an EBR: the data is the first non-empty entry that
        // is not an extended type, the link the first that is, in any slot.
        let entries = ebr.entries;
        if let Some(data) = entries.iter().find(|e| !e.is_empty() && !e.is_extended()) {
            self.add_logical(lba, data);
        }
        let link = entries.iter().find(|e| !e.is_empty() && e.is_extended())?;
        self.link_target(lba, link)
    }

    /// Record the logical partition described by the EBR at `lba`.
    fn add_logical(&mut self, lba: u64, data: &Entry) {
        // The chain is capped at MAX_EBRS, so the number always fits.
        let number = u32::try_from(self.logicals.len()).map_or(u32::MAX, |n| n.saturating_add(5));
        // lba is below the device's sector count, so adding a u32 cannot overflow.
        let start = lba.saturating_add(u64::from(data.start_lba));
        let part = partition(number, start, data, PartKind::Logical, Some(lba));
        let end = start.saturating_add(part.size);
        if start < self.ext_start || end > self.ext_end {
            let msg = format!(
                "logical partition {number} (sectors {start}..{end}) is not inside the extended partition"
            );
            self.problem("logical_outside_extended", msg);
        }
        self.logicals.push(part);
    }

    /// Where `link` (relative to the extended start) points, if inside it.
    fn link_target(&mut self, lba: u64, link: &Entry) -> Option<u64> {
        let next =
            self.ext_start.checked_add(u64::from(link.start_lba)).filter(|&n| n < self.ext_end);
        if next.is_none() {
            let msg = format!(
                "the EBR at LBA {lba} links to offset {} outside the extended partition; the chain stops there",
                link.start_lba
            );
            self.problem("ebr_link_outside", msg);
        }
        next
    }
}
