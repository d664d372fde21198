//! The MBR in LBA 0 and the chain of EBRs inside an extended partition.

use super::common::{holds_iso, read_bytes, VTOC_SANE};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{bsd, types, Label, Layout, MbrInfo, PartKind, Partition, Problem};

use crate::io::{le_u16, le_u32, read_lba, ReadAt};
use crate::stack::{self as signature, Contents, Kind};
use std::collections::HashSet;

/// Bytes 510-511 of an MBR or EBR.
pub const SIGNATURE: u16 = 0xAA55;
const SIGNATURE_AT: usize = 510;
const DISK_SIGNATURE_AT: usize = 440;
/// Offset of the four partition entries.
pub(crate) const ENTRIES_OFFSET: usize = 446;
pub(crate) const ENTRY_SIZE: usize = 16;
/// Type of the entry guarding a GPT.
pub(crate) const TYPE_GPT: u8 = 0xEE;
/// Types that make an entry an extended container.
pub(crate) const EXTENDED_TYPES: [u8; 3] = [0x05, 0x0F, 0x85];
/// Longer EBR chains are treated as corrupt.
pub(crate) const MAX_EBRS: usize = 1024;

/// One 16-byte partition entry, every field as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MbrEntry {
    pub boot: u8,
    pub chs_first: [u8; 3],
    pub kind: u8,
    pub chs_last: [u8; 3],
    pub start_lba: u32,
    pub sectors: u32,
}

impl MbrEntry {
    /// Decode an entry; None when `raw` is shorter than 16 bytes.
    pub fn parse(raw: &[u8]) -> Option<MbrEntry> {
        let raw: &[u8; ENTRY_SIZE] = raw.get(..ENTRY_SIZE)?.try_into().ok()?;
        Some(MbrEntry {
            boot: raw[0],
            chs_first: [raw[1], raw[2], raw[3]],
            kind: raw[4],
            chs_last: [raw[5], raw[6], raw[7]],
            start_lba: le_u32(raw, 8)?,
            sectors: le_u32(raw, 12)?,
        })
    }

    /// The 16 bytes `parse` reads back.
    pub(crate) fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut raw = [0u8; ENTRY_SIZE];
        raw[0] = self.boot;
        raw[1..4].copy_from_slice(&self.chs_first);
        raw[4] = self.kind;
        raw[5..8].copy_from_slice(&self.chs_last);
        raw[8..12].copy_from_slice(&self.start_lba.to_le_bytes());
        raw[12..16].copy_from_slice(&self.sectors.to_le_bytes());
        raw
    }

    /// A new entry: type, start and size as stored (relative where EBRs
    /// need it), CHS from the absolute LBA `abs_start`.
    pub fn new(kind: u8, start: u32, sectors: u32, abs_start: u64) -> MbrEntry {
        let mut e = MbrEntry { kind, sectors, ..MbrEntry::default() };
        e.place(start, abs_start);
        e
    }

    /// Move to `start` (as stored) keeping size, type and boot flag; the
    /// CHS fields follow the absolute LBA `abs_start`.
    pub fn place(&mut self, start: u32, abs_start: u64) {
        self.chs_first = chs(abs_start);
        self.chs_last = chs(abs_start + u64::from(self.sectors.max(1)) - 1);
        self.start_lba = start;
    }

    /// Unused slot. Linux skips only entries of zero size: an entry of
    /// type 0x00 with sectors is a partition (hybrid ISOs use one).
    pub fn is_empty(&self) -> bool {
        self.sectors == 0
    }

    pub(crate) fn is_extended(&self) -> bool {
        EXTENDED_TYPES.contains(&self.kind)
    }

    fn type_id(&self) -> String {
        format!("0x{:02x}", self.kind)
    }
}

/// A boot record: the MBR itself or an EBR (same layout).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mbr {
    pub disk_signature: u32,
    pub entries: [MbrEntry; 4],
}

impl Mbr {
    /// Decode a boot record; None without the 0x55AA signature.
    pub fn parse(sector: &[u8]) -> Option<Mbr> {
        if le_u16(sector, SIGNATURE_AT)? != SIGNATURE {
            return None;
        }
        let entry = |i: usize| entry_at(sector, i);
        Some(Mbr {
            disk_signature: le_u32(sector, DISK_SIGNATURE_AT)?,
            entries: [entry(0)?, entry(1)?, entry(2)?, entry(3)?],
        })
    }

    /// Store the record in `sector` (at least 512 bytes), signed; the boot
    /// code around it stays.
    pub(crate) fn encode_into(&self, sector: &mut [u8]) {
        sector[DISK_SIGNATURE_AT..DISK_SIGNATURE_AT + 4]
            .copy_from_slice(&self.disk_signature.to_le_bytes());
        for (slot, e) in self.entries.iter().enumerate() {
            put_entry(sector, slot, e);
        }
        sign(sector);
    }

    /// Holds a 0xEE entry, protective or hybrid.
    pub(crate) fn guards_gpt(&self) -> bool {
        self.entries.iter().any(|e| e.kind == TYPE_GPT)
    }

    /// Any slot describes a partition.
    pub fn in_use(&self) -> bool {
        self.entries.iter().any(|e| !e.is_empty())
    }

    /// Every boot indicator is 0x00 or 0x80: without this the kernel and
    /// libblkid take sector 0 for boot code (a file system's boot sector).
    pub(crate) fn boot_indicators_valid(&self) -> bool {
        self.entries.iter().all(|e| e.boot == 0 || e.boot == 0x80)
    }

    /// Facts about an MBR sitting in front of a GPT, with its problems.
    pub(crate) fn gpt_guard_info(&self, problems: &mut Vec<Problem>) -> MbrInfo {
        let guard = self.entries.iter().find(|e| e.kind == TYPE_GPT);
        // As Linux's is_pmbr_valid: any other entry of a non-zero type.
        let others = self.entries.iter().any(|e| e.kind != 0 && e.kind != TYPE_GPT);
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

/// MbrEntry `slot` of the boot record in `sector`, signed or not.
pub(crate) fn entry_at(sector: &[u8], slot: usize) -> Option<MbrEntry> {
    MbrEntry::parse(sector.get(ENTRIES_OFFSET + slot * ENTRY_SIZE..)?)
}

/// Store `e` as entry `slot` of the boot record in `sector`.
pub(crate) fn put_entry(sector: &mut [u8], slot: usize, e: &MbrEntry) {
    let at = ENTRIES_OFFSET + slot * ENTRY_SIZE;
    sector[at..at + ENTRY_SIZE].copy_from_slice(&e.encode());
}

/// Put the 0x55AA signature at the end of the boot record in `sector`.
pub(crate) fn sign(sector: &mut [u8]) {
    sector[SIGNATURE_AT..SIGNATURE_AT + 2].copy_from_slice(&SIGNATURE.to_le_bytes());
}

/// CHS in the 255-head, 63-sector geometry fdisk assumes, or the
/// "beyond cylinder 1023" marker 1023/254/63 past it.
fn chs(lba: u64) -> [u8; 3] {
    let (heads, sectors) = (255u64, 63u64);
    let cylinder = lba / (heads * sectors);
    if cylinder > 1023 {
        return [0xFE, 0xFF, 0xFF];
    }
    let head = (lba / sectors) % heads;
    let sector = lba % sectors + 1;
    [head as u8, (sector as u8) | ((cylinder >> 2) as u8 & 0xC0), cylinder as u8]
}

/// The MBR ("dos" to libblkid) with its EBR chains.
pub struct Dos;

impl Scheme for Dos {
    fn name(&self) -> &'static str {
        "dos"
    }

    /// Without valid boot indicators sector 0 is boot code, not a table.
    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        let Some(mbr) = Mbr::parse(&disk.sector0).filter(Mbr::boot_indicators_valid) else {
            return Ok(Found::No);
        };
        Ok(if read_with_checks(disk, &mbr, layout)? { Found::Table } else { Found::No })
    }
}

/// Read `mbr` as the kernel and libblkid do, into `layout`; false when
/// sector 0 is a file system's boot sector rather than a table (then only
/// `layout.contents` and the kernel's view of it are filled). A hybrid ISO's GPT is noted as intentional, any
/// other GPT behind a MBR without a 0xEE entry as stale.
fn read_with_checks(
    disk: &SchemeDisk<'_>,
    mbr: &Mbr,
    layout: &mut Layout,
) -> Result<bool, TableError> {
    let (dev, sectors, size_bytes) = (disk.dev, disk.sectors, disk.size_bytes);
    if let Some(fs) = boot_sector_filesystem(dev, size_bytes)? {
        if mbr.in_use() {
            let mut kernel = Layout::blank(layout.sector_size);
            read_into(dev, mbr, sectors, &mut kernel);
            // Linux drops partitions that start past the end.
            kernel.partitions.retain(|p| p.start < sectors);
            if !kernel.partitions.is_empty() {
                layout.problems.push(kernel_reads_boot_code(&fs, &kernel));
            }
        }
        layout.contents = Some(fs);
        return Ok(false);
    }
    if mbr.in_use() && disk.gpt_at_lba1 {
        layout.problems.push(behind_mbr(dev, size_bytes));
    }
    read_into(dev, mbr, sectors, layout);
    Ok(true)
}

/// A FAT, NTFS or exFAT boot sector at byte 0, which also ends in 0x55AA.
fn boot_sector_filesystem(
    dev: &dyn ReadAt,
    size_bytes: u64,
) -> Result<Option<Contents>, TableError> {
    let found = signature::identify(dev, 0, size_bytes)?;
    Ok(found.filter(|c| matches!(c.kind, Kind::Fat | Kind::Ntfs | Kind::Exfat)))
}

/// libblkid sees the file system; Linux checks only the boot indicators
/// and makes partitions of the boot code.
fn kernel_reads_boot_code(fs: &Contents, kernel: &Layout) -> Problem {
    let parts: Vec<String> = kernel
        .partitions
        .iter()
        .map(|p| format!("{} (sectors {}+{})", p.number, p.start, p.size))
        .collect();
    Problem::new(
        "kernel_reads_boot_code",
        format!(
            "the disk holds a {} file system with no partition table (as blkid sees it), but its \
             boot code passes the kernel's MBR checks: Linux makes partitions {} of it; \
             do not use those",
            fs.name,
            parts.join(", ")
        ),
    )
}

/// What a valid GPT behind an MBR with partitions but no 0xEE entry is.
fn behind_mbr(dev: &dyn ReadAt, size_bytes: u64) -> Problem {
    if holds_iso(dev, size_bytes) {
        Problem::new(
            "hybrid_iso",
            "a hybrid ISO image (xorriso/isohybrid): Linux and BIOS read its MBR, EFI firmware \
             its GPT; both tables are intentional",
        )
    } else {
        Problem::new(
            "stale_gpt",
            "a valid GPT at LBA 1 sits behind an MBR without a protective entry: \
             the MBR is in use and the GPT is a leftover (wipe it)",
        )
    }
}

/// Fill `layout` from an MBR and the EBR chains of its extended
/// partitions, numbered as Linux numbers them: primaries by slot, then the
/// logicals of each extended partition in slot order from 5, then the
/// partitions of BSD slices.
pub(crate) fn read_into(dev: &dyn ReadAt, mbr: &Mbr, sectors: u64, layout: &mut Layout) {
    let mut info = MbrInfo {
        disk_signature: mbr.disk_signature,
        protective: false,
        hybrid: false,
        ebrs: Vec::new(),
    };
    let mut next = 5u32;
    let mut slices = Vec::new();
    for (number, e) in (1u32..).zip(&mbr.entries) {
        if e.is_empty() {
            continue;
        }
        let kind = if e.is_extended() { PartKind::Extended } else { PartKind::Primary };
        let part = partition(number, u64::from(e.start_lba), e, kind, None);
        if BSD_TYPES.contains(&e.kind) {
            slices.push(part.clone());
        } else if let Some(scheme) = nested(dev, &part, layout.sector_size) {
            layout.scheme = Some(scheme);
        }
        layout.partitions.push(part.clone());
        if kind == PartKind::Extended {
            let mut chain = Chain::new(dev, layout.sector_size, sectors, part, next);
            chain.follow();
            next = chain.next;
            info.ebrs.extend(chain.ebrs);
            layout.partitions.extend(chain.logicals);
            layout.problems.extend(chain.problems);
        }
    }
    for slice in &slices {
        let found = bsd::read_nested(dev, slice, &mut next, layout);
        layout.partitions.extend(found);
    }
    layout.label = if layout.scheme.is_some() { Label::Unsupported } else { Label::Mbr };
    layout.mbr = Some(info);
}

/// A table nested in MBR primary `slice` that Linux reads but we do not
/// audit: Minix subpartitions (type 0x81), a UnixWare slice table (0x63)
/// or a Solaris x86 VTOC (0x82, 0xBF). Linux's msdos.c parses them itself
/// and numbers their partitions after the logicals, as it does BSD ones.
pub fn nested(dev: &dyn ReadAt, slice: &Partition, sector_size: u64) -> Option<&'static str> {
    let kind = types::parse_mbr_code(&slice.type_id)?;
    let base = slice.start.checked_mul(sector_size)?;
    let at =
        |sector: u64, len: usize| read_bytes(dev, base.checked_add(sector * 512)?, len).ok()?;
    match kind {
        0x81 => {
            let s = at(0, 512)?;
            Mbr::parse(&s).filter(|m| m.entries[0].kind == 0x81).map(|_| "minix")
        }
        0x63 => {
            let s = at(29, 512)?;
            (le_u32(&s, 4) == Some(0xCA5E_600D) && le_u32(&s, 156) == Some(VTOC_SANE))
                .then_some("unixware")
        }
        0x82 | 0xBF => {
            let s = at(1, 512)?;
            (le_u32(&s, 12) == Some(VTOC_SANE) && le_u32(&s, 16) == Some(1)).then_some("solaris")
        }
        _ => None,
    }
}

/// MBR types of slices holding a BSD disklabel (FreeBSD, OpenBSD, NetBSD).
pub(crate) const BSD_TYPES: [u8; 3] = [0xA5, 0xA6, 0xA9];

fn partition(number: u32, start: u64, e: &MbrEntry, kind: PartKind, ebr: Option<u64>) -> Partition {
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

/// A walk down the EBR chain of one extended partition, as Linux's
/// parse_extended walks it.
struct Chain<'a> {
    dev: &'a dyn ReadAt,
    sector_size: u64,
    sectors: u64,
    ext_start: u64,
    /// One past the extended partition's last sector.
    ext_end: u64,
    /// The number the next logical gets.
    next: u32,
    ebrs: Vec<u64>,
    logicals: Vec<Partition>,
    problems: Vec<Problem>,
}

impl<'a> Chain<'a> {
    fn new(dev: &'a dyn ReadAt, sector_size: u64, sectors: u64, ext: Partition, next: u32) -> Self {
        Chain {
            dev,
            sector_size,
            sectors,
            ext_start: ext.start,
            ext_end: ext.start.saturating_add(ext.size),
            next,
            ebrs: Vec::new(),
            logicals: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Walk the chain, collecting EBRs, logicals and problems in order.
    fn follow(&mut self) {
        let mut seen = HashSet::new();
        let mut next = Some((self.ext_start, self.ext_end - self.ext_start));
        while let Some((lba, span)) = next {
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
            next = self.visit(lba, span);
        }
    }

    fn problem(&mut self, code: &'static str, message: String) {
        self.problems.push(Problem::new(code, message));
    }

    /// Read the EBR at `lba` (its link spanned `span` sectors), record its
    /// logicals, and return the next link and its span.
    fn visit(&mut self, lba: u64, span: u64) -> Option<(u64, u64)> {
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
        // Every non-empty entry that is not an extended type is a logical
        // (OS/2 used all four); the third and fourth only when they fit,
        // since they often hold garbage. The link is the first extended entry.
        for (slot, e) in ebr.entries.iter().enumerate() {
            if !e.is_empty() && !e.is_extended() && (slot < 2 || self.fits(lba, span, e)) {
                self.add_logical(lba, e);
            }
        }
        let link = ebr.entries.iter().find(|e| !e.is_empty() && e.is_extended())?;
        self.link_target(lba, link)
    }

    /// Linux's test for data entries in slots 3 and 4: inside the link's
    /// span and inside the extended partition.
    fn fits(&self, lba: u64, span: u64, e: &MbrEntry) -> bool {
        let (offset, size) = (u64::from(e.start_lba), u64::from(e.sectors));
        let start = lba.saturating_add(offset);
        offset.saturating_add(size) <= span
            && start >= self.ext_start
            && start.saturating_add(size) <= self.ext_end
    }

    /// Record a logical partition described by the EBR at `lba`.
    fn add_logical(&mut self, lba: u64, data: &MbrEntry) {
        let number = self.next;
        self.next = self.next.saturating_add(1);
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

    /// Where `link` (relative to the extended start) points. Linux follows
    /// a link outside the extended partition too, so we do, saying so.
    fn link_target(&mut self, lba: u64, link: &MbrEntry) -> Option<(u64, u64)> {
        let next = self.ext_start.saturating_add(u64::from(link.start_lba));
        if next >= self.ext_end {
            let msg = format!(
                "the EBR at LBA {lba} links to offset {} outside the extended partition",
                link.start_lba
            );
            self.problem("ebr_link_outside", msg);
        }
        Some((next, u64::from(link.sectors)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::fixtures::mbr_entry;
    use proptest::prelude::*;

    #[test]
    fn tables_nested_in_slices() {
        let mut img = vec![0u8; 64 * 512];
        let slice = |kind: u8| Partition {
            number: 1,
            start: 8,
            size: 40,
            kind: PartKind::Primary,
            type_id: format!("0x{kind:02x}"),
            name: None,
            ebr: None,
        };
        assert_eq!(nested(&img, &slice(0x81), 512), None);
        mbr_entry(&mut img, 8 * 512, 0, 0x81, 1, 10);
        assert_eq!(nested(&img, &slice(0x81), 512), Some("minix"));
        img[9 * 512 + 12..9 * 512 + 20].copy_from_slice(&[0xEE, 0xDE, 0x0D, 0x60, 1, 0, 0, 0]);
        assert_eq!(nested(&img, &slice(0xBF), 512), Some("solaris"));
        assert_eq!(nested(&img, &slice(0x83), 512), None);
        let uw = 37 * 512;
        img[uw + 4..uw + 8].copy_from_slice(&0xCA5E_600Du32.to_le_bytes());
        img[uw + 156..uw + 160].copy_from_slice(&VTOC_SANE.to_le_bytes());
        assert_eq!(nested(&img, &slice(0x63), 512), Some("unixware"));
        // The slice's sector at 4096 bytes: nothing there.
        assert_eq!(nested(&img, &slice(0x63), 4096), None);
    }

    proptest! {
        #[test]
        fn entry_round_trips(raw in any::<[u8; 16]>()) {
            let e = MbrEntry::parse(&raw).unwrap();
            prop_assert_eq!(e.encode(), raw);
            prop_assert_eq!(MbrEntry::parse(&e.encode()), Some(e));
        }

        /// The MBR and the EBR share one layout: boot code and the bytes
        /// between the disk signature and the entries are left as they are.
        #[test]
        fn boot_record_round_trips(mut raw in proptest::collection::vec(any::<u8>(), 512)) {
            raw[510..].copy_from_slice(&[0x55, 0xAA]);
            let record = Mbr::parse(&raw).unwrap();
            let mut again = raw.clone();
            record.encode_into(&mut again);
            prop_assert_eq!(&again, &raw);
            let mut blank = vec![0u8; 512];
            record.encode_into(&mut blank);
            prop_assert_eq!(Mbr::parse(&blank), Some(record));
        }
    }

    #[test]
    fn chs_as_fdisk_writes_it() {
        assert_eq!(chs(0), [0, 1, 0]);
        assert_eq!(chs(2048), [32, 33, 0]);
        assert_eq!(chs(1 << 30), [0xFE, 0xFF, 0xFF]);
        let e = MbrEntry::new(0x83, 2048, 1, 2048);
        assert_eq!((e.chs_first, e.chs_last, e.boot), ([32, 33, 0], [32, 33, 0], 0));
    }

    proptest! {
        #[test]
        fn nested_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            start in 0u64..40,
            kind in prop_oneof![Just(0x81u8), Just(0x63), Just(0x82), Just(0xBF)],
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let slice = Partition {
                number: 1,
                start,
                size: 8,
                kind: PartKind::Primary,
                type_id: format!("0x{kind:02x}"),
                name: None,
                ebr: None,
            };
            let _ = nested(&bytes, &slice, ss);
            let far = Partition { start: u64::MAX / 2, ..slice };
            let _ = nested(&bytes, &far, ss);
        }
    }
}
