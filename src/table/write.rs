//! Putting a table on a disk. [`TableBytes`] holds every byte of a table,
//! whether the planner made it or it was read from a disk and edited;
//! [`encode`] turns it into writes, in the order that leaves the old table
//! or a recoverable new one when a crash stops them part-way.

use super::gpt::{self, Guid};
use super::{mbr, types, PartKind, Partition};
use std::io::Read;

/// Bytes to put at a byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// What the bytes are, for messages and the backup sidecar.
    pub what: &'static str,
}

/// A GPT as the bytes that hold it. The entry array is kept whole, so an
/// edit changes only the fields it means to (GUIDs, names, attributes and
/// unknown bytes stay as they were).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GptBytes {
    pub sector_size: u64,
    pub disk_guid: [u8; 16],
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub entry_size: u32,
    /// The entry array: entry count × entry size bytes.
    pub entries: Vec<u8>,
    pub primary_entries_lba: u64,
    pub backup_header_lba: u64,
    pub backup_entries_lba: u64,
    /// LBA 0: the protective MBR, boot code and all.
    pub mbr: Vec<u8>,
}

/// An MBR and its EBR chain as the sectors that hold them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MbrBytes {
    pub sector_size: u64,
    /// LBA 0, boot code and disk signature included.
    pub mbr: Vec<u8>,
    /// (LBA, sector) of each EBR, in chain order.
    pub ebrs: Vec<(u64, Vec<u8>)>,
    /// LBAs to zero: headers of a GPT an earlier table left behind.
    pub wipes: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableBytes {
    Gpt(GptBytes),
    Mbr(MbrBytes),
}

/// The writes that put `table` on a disk, in the order to make them (each
/// followed by a flush).
pub fn encode_table(table: &TableBytes) -> Vec<Chunk> {
    match table {
        TableBytes::Gpt(g) => encode_gpt(g),
        TableBytes::Mbr(m) => encode_mbr(m),
    }
}

/// UEFI order: the backup copy first, then the primary, then the
/// protective MBR that makes the GPT visible.
fn encode_gpt(g: &GptBytes) -> Vec<Chunk> {
    let ss = g.sector_size;
    let crc = crc32fast::hash(&g.entries);
    let primary_lba = 1;
    vec![
        chunk(g.backup_entries_lba * ss, g.entries.clone(), "gpt backup entries"),
        chunk(
            g.backup_header_lba * ss,
            gpt_header(g, [g.backup_header_lba, primary_lba, g.backup_entries_lba], crc),
            "gpt backup header",
        ),
        chunk(g.primary_entries_lba * ss, g.entries.clone(), "gpt primary entries"),
        chunk(
            primary_lba * ss,
            gpt_header(g, [primary_lba, g.backup_header_lba, g.primary_entries_lba], crc),
            "gpt primary header",
        ),
        chunk(0, g.mbr.clone(), "protective mbr"),
    ]
}

/// MBR: EBRs first, the last of the chain first (each is unreachable
/// until the one before it, or the MBR, points at it), then the MBR, then
/// zeros over any GPT headers an earlier table left, so no tool mistakes
/// the disk for GPT.
fn encode_mbr(m: &MbrBytes) -> Vec<Chunk> {
    let ss = m.sector_size;
    let mut out: Vec<Chunk> =
        m.ebrs.iter().rev().map(|(lba, sector)| chunk(lba * ss, sector.clone(), "ebr")).collect();
    out.push(chunk(0, m.mbr.clone(), "mbr"));
    out.extend(m.wipes.iter().map(|lba| chunk(lba * ss, vec![0u8; ss as usize], "stale gpt wipe")));
    out
}

fn chunk(offset: u64, bytes: Vec<u8>, what: &'static str) -> Chunk {
    Chunk { offset, bytes, what }
}

/// One sector holding the header; `lbas` = (my, alternate, entries).
fn gpt_header(g: &GptBytes, lbas: [u64; 3], entries_crc: u32) -> Vec<u8> {
    let count = g.entries.len().checked_div(g.entry_size as usize).unwrap_or(0);
    let mut header = gpt::Header {
        revision: gpt::REVISION,
        header_size: gpt::HEADER_SIZE,
        header_crc: 0,
        my_lba: lbas[0],
        alternate_lba: lbas[1],
        first_usable_lba: g.first_usable_lba,
        last_usable_lba: g.last_usable_lba,
        disk_guid: Guid(g.disk_guid),
        entries_lba: lbas[2],
        entry_count: count as u32,
        entry_size: g.entry_size,
        entries_crc,
    };
    header.seal();
    let raw = header.encode();
    let mut sector = vec![0u8; g.sector_size as usize];
    sector[..raw.len()].copy_from_slice(&raw);
    sector
}

/// The random identities a new table gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ids {
    pub disk_guid: [u8; 16],
    pub partition_guids: Vec<[u8; 16]>,
    pub mbr_signature: u32,
}

impl Ids {
    /// Fresh version-4 GUIDs for the disk and `count` partitions.
    pub fn random(count: usize) -> std::io::Result<Ids> {
        let mut urandom = std::fs::File::open("/dev/urandom")?;
        let mut guid = || -> std::io::Result<[u8; 16]> {
            let mut g = [0u8; 16];
            urandom.read_exact(&mut g)?;
            Ok(version4(g))
        };
        let disk_guid = guid()?;
        let partition_guids = (0..count).map(|_| guid()).collect::<Result<_, _>>()?;
        let signature =
            u32::from_le_bytes([disk_guid[0], disk_guid[1], disk_guid[2], disk_guid[3]]);
        Ok(Ids { disk_guid, partition_guids, mbr_signature: signature.max(1) })
    }
}

/// Mark 16 random bytes (stored mixed-endian) as an RFC 4122 version-4 GUID.
fn version4(mut g: [u8; 16]) -> [u8; 16] {
    g[7] = (g[7] & 0x0F) | 0x40;
    g[8] = (g[8] & 0x3F) | 0x80;
    g
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    #[error("partition {0}: type {1:?} is not valid for this table")]
    Type(u32, String),
    #[error("partition {0} lies beyond what an MBR can address")]
    MbrRange(u32),
    #[error("{0} partitions but only {1} GUIDs")]
    Ids(usize, usize),
    #[error("partition {0} is not in the table's entries")]
    NoEntry(u32),
}

/// An empty boot sector: zeros with the 0x55AA signature.
pub fn boot_sector(sector_size: u64) -> Vec<u8> {
    let mut s = vec![0u8; sector_size as usize];
    mbr::sign(&mut s);
    s
}

/// Entry `slot` of a boot record: type, start and size as stored (relative
/// where EBRs need it), CHS from the absolute LBA `abs_start`; its boot
/// flag stays.
pub fn mbr_entry(sector: &mut [u8], slot: usize, kind: u8, start: u32, size: u32, abs_start: u64) {
    let boot = mbr::entry_at(sector, slot).map_or(0, |e| e.boot);
    let e = mbr::MbrEntry { boot, ..mbr::MbrEntry::new(kind, start, size, abs_start) };
    mbr::put_entry(sector, slot, &e);
}

/// A new GPT on a disk of `total_sectors`, with usable LBAs `usable`, and
/// `ids` for its GUIDs. Partition N goes in entry N so numbers stay stable.
pub(crate) fn new_gpt(
    sector_size: u64,
    total_sectors: u64,
    usable: (u64, u64),
    partitions: &[Partition],
    ids: &Ids,
) -> Result<GptBytes, WriteError> {
    if ids.partition_guids.len() < partitions.len() {
        return Err(WriteError::Ids(partitions.len(), ids.partition_guids.len()));
    }
    let array_sectors = gpt::NEW_ARRAY_BYTES.div_ceil(sector_size);
    let last = total_sectors - 1;
    let size = last.min(u64::from(u32::MAX)) as u32;
    let mut guard = mbr::Mbr::default();
    guard.entries[0] = mbr::MbrEntry::new(mbr::TYPE_GPT, 1, size, 1);
    let mut pmbr = vec![0u8; sector_size as usize];
    guard.encode_into(&mut pmbr);
    Ok(GptBytes {
        sector_size,
        disk_guid: ids.disk_guid,
        first_usable_lba: usable.0,
        last_usable_lba: usable.1,
        entry_size: gpt::ENTRY_SIZE,
        entries: entry_array(partitions, ids)?,
        primary_entries_lba: 2,
        backup_header_lba: last,
        backup_entries_lba: last - array_sectors,
        mbr: pmbr,
    })
}

fn entry_array(partitions: &[Partition], ids: &Ids) -> Result<Vec<u8>, WriteError> {
    let size = gpt::ENTRY_SIZE as usize;
    let mut array = vec![0u8; gpt::NEW_ARRAY_BYTES as usize];
    for (p, guid) in partitions.iter().zip(&ids.partition_guids) {
        let slot = (p.number as usize).checked_sub(1).filter(|&s| s < array.len() / size);
        let kind = p.type_id.parse::<Guid>().ok().filter(|g| !g.is_zero());
        let (Some(slot), Some(type_guid)) = (slot, kind) else {
            return Err(WriteError::Type(p.number, p.type_id.clone()));
        };
        let mut entry = gpt::GptEntry {
            type_guid,
            unique_guid: Guid(*guid),
            first_lba: p.start,
            last_lba: p.start + p.size - 1,
            attributes: 0,
            name: [0; 36],
        };
        entry.set_name(p.name.as_deref().unwrap_or_default());
        array[slot * size..(slot + 1) * size].copy_from_slice(&entry.encode());
    }
    Ok(array)
}

/// A new MBR holding `partitions` (primaries and the extended one by
/// number, logicals through one EBR each), signed `ids.mbr_signature`.
pub(crate) fn new_mbr(
    sector_size: u64,
    total_sectors: u64,
    partitions: &[Partition],
    ids: &Ids,
) -> Result<MbrBytes, WriteError> {
    let mut record = mbr::Mbr { disk_signature: ids.mbr_signature, ..mbr::Mbr::default() };
    for p in partitions.iter().filter(|p| p.kind != PartKind::Logical) {
        let slot = (p.number as usize).checked_sub(1).filter(|&s| s < 4);
        let (Some(slot), Some(kind)) = (slot, mbr_code(p)) else {
            return Err(WriteError::Type(p.number, p.type_id.clone()));
        };
        record.entries[slot] =
            mbr::MbrEntry::new(kind, u32_of(p, p.start)?, u32_of(p, p.size)?, p.start);
    }
    let mut sector = vec![0u8; sector_size as usize];
    record.encode_into(&mut sector);
    Ok(MbrBytes {
        sector_size,
        mbr: sector,
        ebrs: ebrs(sector_size, partitions)?,
        wipes: stale_gpt_lbas(sector_size, total_sectors, partitions),
    })
}

/// One EBR per logical: entry 0 the logical relative to its EBR, entry 1
/// the next EBR relative to the extended start (empty for the last).
fn ebrs(sector_size: u64, partitions: &[Partition]) -> Result<Vec<(u64, Vec<u8>)>, WriteError> {
    let Some(ext) = partitions.iter().find(|p| p.kind == PartKind::Extended) else {
        return Ok(Vec::new());
    };
    let logicals: Vec<&Partition> =
        partitions.iter().filter(|p| p.kind == PartKind::Logical).collect();
    let mut out = Vec::new();
    for (i, p) in logicals.iter().enumerate() {
        let ebr = p.ebr.ok_or(WriteError::MbrRange(p.number))?;
        let kind = mbr_code(p).ok_or_else(|| WriteError::Type(p.number, p.type_id.clone()))?;
        let mut record = mbr::Mbr::default();
        let (start, size) = (u32_of(p, p.start - ebr)?, u32_of(p, p.size)?);
        record.entries[0] = mbr::MbrEntry::new(kind, start, size, p.start);
        if let Some(next) = logicals.get(i + 1) {
            let next_ebr = next.ebr.ok_or(WriteError::MbrRange(next.number))?;
            let span = u32_of(next, next.start + next.size - next_ebr)?;
            let link = u32_of(next, next_ebr - ext.start)?;
            record.entries[1] = mbr::MbrEntry::new(0x05, link, span, next_ebr);
        }
        let mut sector = vec![0u8; sector_size as usize];
        record.encode_into(&mut sector);
        out.push((ebr, sector));
    }
    Ok(out)
}

/// The sectors where a GPT header of either sector size would sit (byte
/// 512 or 4096, and the end of the disk), where no partition is.
fn stale_gpt_lbas(sector_size: u64, total_sectors: u64, partitions: &[Partition]) -> Vec<u64> {
    let ss = sector_size;
    let first_used = partitions.iter().map(|p| p.ebr.unwrap_or(p.start)).min().unwrap_or(0);
    let head = (1..=4096 / ss).filter(|&lba| lba < first_used);
    let tail_sectors = (4096 / ss).max(1);
    let last_used = partitions.iter().map(|p| p.start + p.size).max().unwrap_or(0);
    let tail =
        (total_sectors.saturating_sub(tail_sectors)..total_sectors).filter(|&lba| lba >= last_used);
    head.chain(tail).collect()
}

fn mbr_code(p: &Partition) -> Option<u8> {
    types::parse_mbr_code(&p.type_id)
}

fn u32_of(p: &Partition, v: u64) -> Result<u32, WriteError> {
    u32::try_from(v).map_err(|_| WriteError::MbrRange(p.number))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_and_version4() {
        let text = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
        let g: Guid = text.parse().unwrap();
        assert_eq!(g.0, crate::table::fixtures::LINUX);
        assert_eq!(g.to_string(), text, "Display is the inverse");
        assert_eq!(text.to_ascii_lowercase().parse::<Guid>(), Ok(g));
        for bad in
            ["0FC63DAF84834772-8E79-3D69D8477DE4-", "0FC63DAF-8483-4772-8E79-3D69D8477DEX", ""]
        {
            assert!(bad.parse::<Guid>().is_err(), "{bad}");
        }
        let v = version4([0xFF; 16]);
        assert_eq!((v[7] >> 4, v[8] >> 6), (4, 2));
        let r = Ids::random(3).unwrap();
        assert_eq!(r.partition_guids.len(), 3);
        assert_ne!(r.partition_guids[0], r.partition_guids[1]);
    }
}
