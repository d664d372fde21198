//! GPT: a header at LBA 1 and its backup at the last LBA, each pointing at
//! a copy of the partition entry array.

use super::error::TableError;
pub(crate) use super::error::{CopyError, HeaderError};
use super::mbr::Mbr;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{GptInfo, Label, Layout, PartKind, Partition, Problem};

use crate::io::{le_u32, le_u64, read_lba, read_sectors, ReadAt};
use std::fmt;

pub const SIGNATURE: &[u8; 8] = b"EFI PART";
/// UEFI revision 1.0; any 1.x minor revision reads the same.
pub(crate) const REVISION: u32 = 0x0001_0000;
/// Bytes of the header we know; the rest of its sector is reserved.
pub const HEADER_SIZE: u32 = 92;
/// The only entry size Linux accepts; UEFI allows 128 * 2^n.
pub(crate) const ENTRY_SIZE: u32 = 128;
/// Bigger entry arrays are treated as corrupt headers.
pub const MAX_ENTRIES_BYTES: u64 = 16 << 20;
/// Offset of the header CRC, zeroed while computing it.
pub(crate) const HEADER_CRC_AT: usize = 16;
const HEADER_BYTES: usize = HEADER_SIZE as usize;
const ENTRY_BYTES: usize = ENTRY_SIZE as usize;
/// The entry array a new table gets: 128 entries of 128 bytes, as every
/// tool writes it.
pub(crate) const NEW_ARRAY_BYTES: u64 = 128 * 128;

/// A GUID as stored: the first three fields little-endian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    pub fn parse(raw: &[u8]) -> Option<Guid> {
        Some(Guid(raw.get(..16)?.try_into().ok()?))
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

/// Canonical upper-case text, e.g. 0FC63DAF-8483-4772-8E79-3D69D8477DE4.
impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02X}{:02X}{:02X}{:02X}-{:02X}{:02X}-{:02X}{:02X}-",
            b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6]
        )?;
        write!(f, "{:02X}{:02X}-", b[8], b[9])?;
        b[10..].iter().try_for_each(|x| write!(f, "{x:02X}"))
    }
}

/// Text that is not a GUID in the 8-4-4-4-12 hex form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a GUID (8-4-4-4-12 hex digits)")]
pub struct BadGuid(pub String);

/// The canonical text in either case, e.g. 0fc63daf-8483-4772-8e79-3d69d8477de4;
/// the inverse of `Display`.
impl std::str::FromStr for Guid {
    type Err = BadGuid;

    fn from_str(text: &str) -> Result<Guid, BadGuid> {
        let bad = || BadGuid(text.to_string());
        let groups: Vec<&str> = text.split('-').collect();
        let shape = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12]);
        if !shape || !groups.iter().all(|g| g.bytes().all(|c| c.is_ascii_hexdigit())) {
            return Err(bad());
        }
        let hex = groups.concat();
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        // The first three fields are stored little-endian.
        b[0..4].reverse();
        b[4..6].reverse();
        b[6..8].reverse();
        Ok(Guid(b))
    }
}

/// A GPT header, every field as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub revision: u32,
    pub header_size: u32,
    pub header_crc: u32,
    pub my_lba: u64,
    pub alternate_lba: u64,
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub disk_guid: Guid,
    pub entries_lba: u64,
    pub entry_count: u32,
    pub entry_size: u32,
    pub entries_crc: u32,
}

impl Header {
    /// Decode a header from its sector, checking what the bytes alone can
    /// tell: signature, revision, size and CRC.
    pub fn parse(sector: &[u8]) -> Result<Header, HeaderError> {
        if sector.get(..8) != Some(SIGNATURE.as_slice()) {
            return Err(HeaderError::Signature);
        }
        let revision = le_u32(sector, 8).ok_or(HeaderError::Truncated)?;
        if revision >> 16 != REVISION >> 16 {
            return Err(HeaderError::Revision(revision));
        }
        let header_size = le_u32(sector, 12).ok_or(HeaderError::Truncated)?;
        let raw = usize::try_from(header_size)
            .ok()
            .filter(|&n| n >= HEADER_BYTES)
            .and_then(|n| sector.get(..n))
            .ok_or(HeaderError::Size {
                size: header_size,
                min: HEADER_SIZE,
                sector: sector.len(),
            })?;
        let header_crc = le_u32(raw, HEADER_CRC_AT).ok_or(HeaderError::Truncated)?;
        let computed = header_crc_of(raw);
        if computed != header_crc {
            return Err(HeaderError::Crc { stored: header_crc, computed });
        }
        Self::fields(raw, revision, header_size, header_crc).ok_or(HeaderError::Truncated)
    }

    fn fields(raw: &[u8], revision: u32, header_size: u32, header_crc: u32) -> Option<Header> {
        Some(Header {
            revision,
            header_size,
            header_crc,
            my_lba: le_u64(raw, 24)?,
            alternate_lba: le_u64(raw, 32)?,
            first_usable_lba: le_u64(raw, 40)?,
            last_usable_lba: le_u64(raw, 48)?,
            disk_guid: Guid::parse(raw.get(56..)?)?,
            entries_lba: le_u64(raw, 72)?,
            entry_count: le_u32(raw, 80)?,
            entry_size: le_u32(raw, 84)?,
            entries_crc: le_u32(raw, 88)?,
        })
    }

    /// The 92 bytes we know, every field as it is (the CRC too: see
    /// [`Header::seal`]); `parse` reads them back.
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut raw = [0u8; HEADER_BYTES];
        put(&mut raw, 0, SIGNATURE);
        put(&mut raw, 8, &self.revision.to_le_bytes());
        put(&mut raw, 12, &self.header_size.to_le_bytes());
        put(&mut raw, HEADER_CRC_AT, &self.header_crc.to_le_bytes());
        put(&mut raw, 24, &self.my_lba.to_le_bytes());
        put(&mut raw, 32, &self.alternate_lba.to_le_bytes());
        put(&mut raw, 40, &self.first_usable_lba.to_le_bytes());
        put(&mut raw, 48, &self.last_usable_lba.to_le_bytes());
        put(&mut raw, 56, &self.disk_guid.0);
        put(&mut raw, 72, &self.entries_lba.to_le_bytes());
        put(&mut raw, 80, &self.entry_count.to_le_bytes());
        put(&mut raw, 84, &self.entry_size.to_le_bytes());
        put(&mut raw, 88, &self.entries_crc.to_le_bytes());
        raw
    }

    /// Set the header CRC to that of the encoded header (which is the
    /// whole header when `header_size` is [`HEADER_SIZE`]).
    pub(crate) fn seal(&mut self) {
        self.header_crc = header_crc_of(&self.encode());
    }

    /// Bytes of the entry array (cannot overflow: both factors are u32).
    pub(crate) fn entries_bytes(&self) -> u64 {
        u64::from(self.entry_count) * u64::from(self.entry_size)
    }
}

/// CRC32 of a header's bytes with its CRC field taken as zero.
pub fn header_crc_of(raw: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(raw.get(..HEADER_CRC_AT).unwrap_or(raw));
    if raw.len() > HEADER_CRC_AT {
        hasher.update(&[0; 4]);
        hasher.update(raw.get(HEADER_CRC_AT + 4..).unwrap_or_default());
    }
    hasher.finalize()
}

/// One partition entry, every field as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GptEntry {
    pub type_guid: Guid,
    pub unique_guid: Guid,
    pub first_lba: u64,
    pub last_lba: u64,
    pub attributes: u64,
    /// UTF-16LE code units, NUL-padded.
    pub name: [u16; 36],
}

impl GptEntry {
    /// Decode an entry; None when `raw` is shorter than 128 bytes.
    pub fn parse(raw: &[u8]) -> Option<GptEntry> {
        let mut name = [0u16; 36];
        let units = raw.get(56..128)?.chunks_exact(2);
        for (unit, pair) in name.iter_mut().zip(units) {
            *unit = u16::from_le_bytes([*pair.first()?, *pair.get(1)?]);
        }
        Some(GptEntry {
            type_guid: Guid::parse(raw)?,
            unique_guid: Guid::parse(raw.get(16..)?)?,
            first_lba: le_u64(raw, 32)?,
            last_lba: le_u64(raw, 40)?,
            attributes: le_u64(raw, 48)?,
            name,
        })
    }

    /// The 128 bytes `parse` reads back; bytes of a larger entry past them
    /// are not ours to write.
    pub(crate) fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut raw = [0u8; ENTRY_BYTES];
        put(&mut raw, 0, &self.type_guid.0);
        put(&mut raw, 16, &self.unique_guid.0);
        put(&mut raw, 32, &self.first_lba.to_le_bytes());
        put(&mut raw, 40, &self.last_lba.to_le_bytes());
        put(&mut raw, 48, &self.attributes.to_le_bytes());
        for (i, unit) in self.name.iter().enumerate() {
            put(&mut raw, 56 + 2 * i, &unit.to_le_bytes());
        }
        raw
    }

    /// Store `name` as UTF-16, cut to the 36 units an entry holds.
    pub(crate) fn set_name(&mut self, name: &str) {
        self.name = [0; 36];
        for (unit, u) in self.name.iter_mut().zip(name.encode_utf16()) {
            *unit = u;
        }
    }

    pub fn is_used(&self) -> bool {
        !self.type_guid.is_zero()
    }

    /// The name up to its first NUL; None when empty.
    pub fn name(&self) -> Option<String> {
        let len = self.name.iter().position(|&u| u == 0).unwrap_or(self.name.len());
        let units = self.name.get(..len)?;
        (!units.is_empty()).then(|| String::from_utf16_lossy(units))
    }
}

/// One checked copy of the table: a header and its entry array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub header: Header,
    pub entries: Vec<GptEntry>,
}

/// Read and check the copy whose header sits at `lba`. The error says why
/// the copy cannot be used, phrased to follow "primary GPT " or similar.
pub fn read_table(
    dev: &dyn ReadAt,
    lba: u64,
    sector_size: u64,
    sectors: u64,
) -> Result<Table, CopyError> {
    if lba >= sectors {
        return Err(CopyError::PastEnd(lba));
    }
    let sector =
        read_lba(dev, lba, sector_size).map_err(|e| CopyError::HeaderUnreadable(lba, e))?;
    let header = Header::parse(&sector)?;
    check_header(&header, lba, sector_size, sectors)?;
    let entries = read_entries(dev, &header, sector_size)?;
    Ok(Table { header, entries })
}

/// Checks on a header's fields that the CRC cannot vouch for.
fn check_header(h: &Header, lba: u64, sector_size: u64, sectors: u64) -> Result<(), CopyError> {
    if h.my_lba != lba {
        return Err(CopyError::Misplaced { lba, my_lba: h.my_lba });
    }
    if h.entry_size < ENTRY_SIZE || h.entry_size % 8 != 0 {
        return Err(CopyError::EntrySize(h.entry_size));
    }
    if h.entries_bytes() > MAX_ENTRIES_BYTES {
        return Err(CopyError::ArrayTooLarge(h.entries_bytes()));
    }
    if h.first_usable_lba > h.last_usable_lba {
        return Err(CopyError::Inverted(h.first_usable_lba, h.last_usable_lba));
    }
    let array_sectors = h.entries_bytes().div_ceil(sector_size);
    if h.entries_lba.checked_add(array_sectors).is_none_or(|end| end > sectors) {
        return Err(CopyError::ArrayPastEnd(h.entries_lba));
    }
    Ok(())
}

fn read_entries(
    dev: &dyn ReadAt,
    h: &Header,
    sector_size: u64,
) -> Result<Vec<GptEntry>, CopyError> {
    let lba = h.entries_lba;
    let count = h.entries_bytes().div_ceil(sector_size);
    let raw = read_sectors(dev, lba, count, sector_size)
        .map_err(|e| CopyError::ArrayUnreadable(lba, e))?;
    // Bounded by MAX_ENTRIES_BYTES, so it fits in usize.
    let len = usize::try_from(h.entries_bytes()).map_err(|_| CopyError::ArrayBytes)?;
    let array = raw.get(..len).ok_or(CopyError::ArrayTruncated)?;
    let computed = crc32fast::hash(array);
    if computed != h.entries_crc {
        return Err(CopyError::ArrayCrc { stored: h.entries_crc, computed });
    }
    let size = usize::try_from(h.entry_size).map_err(|_| CopyError::EntryBytes)?;
    array
        .chunks_exact(size)
        .map(|raw| GptEntry::parse(raw).ok_or(CopyError::EntryTruncated))
        .collect()
}

/// The GUID partition table, behind its protective MBR.
pub struct Gpt;

impl Scheme for Gpt {
    fn name(&self) -> &'static str {
        "gpt"
    }

    /// Read when an MBR guards it with a 0xEE entry, or when no MBR is in
    /// use and LBA 1 holds a valid GPT (which Linux ignores without `gpt`).
    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        let mbr = Mbr::parse(&disk.sector0);
        let guarded = mbr.as_ref().is_some_and(Mbr::guards_gpt);
        let mbr_in_use = mbr.as_ref().is_some_and(Mbr::in_use);
        if !guarded && (mbr_in_use || !disk.gpt_at_lba1) {
            return Ok(Found::No);
        }
        if let Some(mbr) = &mbr {
            layout.mbr = Some(mbr.gpt_guard_info(&mut layout.problems));
        }
        if !guarded {
            layout.problems.push(Problem::new(
                "gpt_without_protective_mbr",
                "valid GPT at LBA 1 but no protective MBR (type 0xEE): \
                 Linux ignores this GPT unless booted with `gpt`",
            ));
        }
        read_into(disk.dev, disk.sectors, layout)?;
        Ok(Found::Table)
    }
}

/// Whether LBA 1 holds a fully valid primary GPT.
pub(crate) fn primary_valid(dev: &dyn ReadAt, sector_size: u64, sectors: u64) -> bool {
    read_table(dev, 1, sector_size, sectors).is_ok()
}

/// Fill `layout` from the best copy of the GPT, noting every problem.
fn read_into(dev: &dyn ReadAt, sectors: u64, layout: &mut Layout) -> Result<(), TableError> {
    let ss = layout.sector_size;
    let last = sectors.saturating_sub(1);
    let primary = read_table(dev, 1, ss, sectors);
    // Trust the primary's pointer; else look where the backup belongs.
    let mut backup_lba = match &primary {
        Ok(t) if t.header.alternate_lba != 1 => t.header.alternate_lba,
        _ => last,
    };
    let mut backup = if backup_lba > 1 {
        read_table(dev, backup_lba, ss, sectors)
    } else {
        Err(CopyError::NoRoom)
    };
    // A primary pointing the wrong way must not hide a good backup at the end.
    if backup.is_err() && backup_lba != last && last > 1 {
        if let Ok(found) = read_table(dev, last, ss, sectors) {
            let msg = format!(
                "the primary GPT puts its backup at LBA {backup_lba}, but it is at LBA {last}"
            );
            layout.problems.push(Problem::new("gpt_alternate_lba_wrong", msg));
            (backup, backup_lba) = (Ok(found), last);
        }
    }
    let problems = &mut layout.problems;
    let (table, header_lba, used_backup) = match (primary, backup) {
        (Ok(p), Ok(b)) => {
            compare(&p, &b, problems);
            (p, 1, false)
        }
        (Ok(p), Err(why)) => {
            let msg = format!("backup GPT at LBA {backup_lba} is unusable: {why}");
            problems.push(Problem::new("gpt_backup_invalid", msg));
            (p, 1, false)
        }
        (Err(why), Ok(b)) => {
            let msg = format!(
                "primary GPT {why}; using the backup at LBA {backup_lba}. Linux reads the backup \
                 only when booted with `gpt`: without it, it sees no partitions here"
            );
            problems.push(Problem::new("gpt_primary_invalid", msg));
            (b, backup_lba, true)
        }
        (Err(primary), Err(backup)) => {
            return Err(TableError::Unusable { primary, backup_lba, backup })
        }
    };
    check_placement(&table.header, used_backup, sectors, problems);
    for (slot, entry) in (1u32..).zip(&table.entries) {
        if let Some(part) = partition(slot, entry, &table.header, problems) {
            layout.partitions.push(part);
        }
    }
    let h = table.header;
    layout.label = Label::Gpt;
    layout.gpt = Some(GptInfo {
        header_lba,
        alternate_lba: h.alternate_lba,
        used_backup,
        first_usable_lba: h.first_usable_lba,
        last_usable_lba: h.last_usable_lba,
        entries_lba: h.entries_lba,
        entry_count: h.entry_count,
        entry_size: h.entry_size,
        disk_guid: h.disk_guid.to_string(),
    });
    Ok(())
}

/// Note where two valid copies disagree; the primary wins.
fn compare(p: &Table, b: &Table, problems: &mut Vec<Problem>) {
    let (ph, bh) = (&p.header, &b.header);
    let checks = [
        (ph.entries_crc != bh.entries_crc || p.entries != b.entries, "partition entries"),
        (
            ph.first_usable_lba != bh.first_usable_lba || ph.last_usable_lba != bh.last_usable_lba,
            "usable range",
        ),
        (ph.disk_guid != bh.disk_guid, "disk GUID"),
        (ph.entry_count != bh.entry_count || ph.entry_size != bh.entry_size, "entry count or size"),
        (bh.alternate_lba != 1, "backup's pointer to the primary"),
    ];
    let diffs: Vec<&str> =
        checks.iter().filter(|(differs, _)| *differs).map(|&(_, what)| what).collect();
    if !diffs.is_empty() {
        let msg =
            format!("primary and backup GPT differ in: {}; using the primary", diffs.join(", "));
        problems.push(Problem::new("gpt_backup_differs", msg));
    }
}

/// The table should end where the device ends; images get grown or cut.
fn check_placement(h: &Header, used_backup: bool, sectors: u64, problems: &mut Vec<Problem>) {
    let last = sectors.saturating_sub(1);
    let backup_at = if used_backup { h.my_lba } else { h.alternate_lba };
    // Linux's is_gpt_valid: a header whose usable range runs past the
    // device is rejected, and the backup is only read through a valid primary.
    if !used_backup && h.last_usable_lba > last {
        let msg = format!(
            "Linux will not use this GPT: its usable space runs to LBA {} but the device ends at \
             LBA {last} (a truncated image?), so it sees no partitions",
            h.last_usable_lba
        );
        problems.push(Problem::new("gpt_ignored_by_linux", msg));
    }
    if backup_at != last || h.last_usable_lba >= last {
        let msg = format!(
            "the GPT puts its backup header at LBA {backup_at} and usable space up to LBA {}, \
             but the device's last LBA is {last} (image grown or truncated?)",
            h.last_usable_lba
        );
        problems.push(Problem::new("gpt_backup_not_at_end", msg));
    }
    if h.entry_size != ENTRY_SIZE {
        let msg = format!(
            "entries are {} bytes: valid per UEFI, but Linux reads only 128-byte entries",
            h.entry_size
        );
        problems.push(Problem::new("gpt_entry_size", msg));
    }
}

/// The partition in entry `slot`, if used and sane.
fn partition(
    slot: u32,
    e: &GptEntry,
    h: &Header,
    problems: &mut Vec<Problem>,
) -> Option<Partition> {
    if !e.is_used() {
        return None;
    }
    let (first, last) = (e.first_lba, e.last_lba);
    let Some(size) = last.checked_sub(first).and_then(|n| n.checked_add(1)) else {
        let msg = format!("entry {slot} has the invalid range LBA {first}..={last}; ignored");
        problems.push(Problem::new("gpt_entry_inverted", msg));
        return None;
    };
    if first < h.first_usable_lba || last > h.last_usable_lba {
        let msg = format!(
            "partition {slot} (LBA {first}..={last}) lies outside the usable range {}..={}",
            h.first_usable_lba, h.last_usable_lba
        );
        problems.push(Problem::new("outside_usable", msg));
    }
    Some(Partition {
        number: slot,
        start: first,
        size,
        kind: PartKind::Gpt,
        type_id: e.type_guid.to_string(),
        name: e.name(),
        ebr: None,
    })
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn guid() -> impl Strategy<Value = Guid> {
        any::<[u8; 16]>().prop_map(Guid)
    }

    fn header() -> impl Strategy<Value = Header> {
        let lbas = any::<[u64; 5]>();
        let counts = (any::<u16>(), any::<u32>(), any::<u32>(), any::<u32>());
        (guid(), lbas, counts).prop_map(|(disk_guid, l, (minor, count, size, crc))| {
            let mut h = Header {
                revision: REVISION | u32::from(minor),
                header_size: HEADER_SIZE,
                header_crc: 0,
                my_lba: l[0],
                alternate_lba: l[1],
                first_usable_lba: l[2],
                last_usable_lba: l[3],
                disk_guid,
                entries_lba: l[4],
                entry_count: count,
                entry_size: size,
                entries_crc: crc,
            };
            h.seal();
            h
        })
    }

    proptest! {
        #[test]
        fn header_round_trips(h in header()) {
            let raw = h.encode();
            prop_assert_eq!(Header::parse(&raw), Ok(h));
            prop_assert_eq!(Header::parse(&raw).map(|h| h.encode()), Ok(raw));
        }

        #[test]
        fn entry_round_trips(raw in proptest::collection::vec(any::<u8>(), 128)) {
            let e = GptEntry::parse(&raw).unwrap();
            prop_assert_eq!(e.encode().to_vec(), raw);
            prop_assert_eq!(GptEntry::parse(&e.encode()), Some(e));
        }

        #[test]
        fn names_are_cut_to_36_units(name in "\\PC{0,40}") {
            let mut e = GptEntry::parse(&[0u8; 128]).unwrap();
            e.set_name(&name);
            let units: Vec<u16> = name.encode_utf16().take(36).collect();
            let want = String::from_utf16_lossy(&units);
            prop_assert_eq!(e.name().unwrap_or_default(), want);
        }
    }

    #[test]
    fn header_errors_say_why() {
        let mut h = Header::parse(&header_bytes()).unwrap();
        assert_eq!(Header::parse(&[0u8; 92]), Err(HeaderError::Signature));
        h.revision = 0x0002_0000;
        h.seal();
        assert_eq!(Header::parse(&h.encode()), Err(HeaderError::Revision(0x0002_0000)));
        let mut raw = header_bytes();
        raw[HEADER_CRC_AT] ^= 1;
        let err = Header::parse(&raw).unwrap_err();
        assert!(err.to_string().starts_with("header CRC mismatch (stored 0x"), "{err}");
    }

    fn header_bytes() -> [u8; HEADER_BYTES] {
        let mut h = Header {
            revision: REVISION,
            header_size: HEADER_SIZE,
            header_crc: 0,
            my_lba: 1,
            alternate_lba: 99,
            first_usable_lba: 34,
            last_usable_lba: 65,
            disk_guid: Guid([7; 16]),
            entries_lba: 2,
            entry_count: 128,
            entry_size: ENTRY_SIZE,
            entries_crc: 0,
        };
        h.seal();
        h.encode()
    }
}
