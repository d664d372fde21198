//! Encoding a [`Plan`] into the bytes of its table: a list of writes, in
//! the order they must reach the disk so that a crash part-way leaves
//! either the old table or a recoverable new one.

use crate::plan::{Label, Plan, Planned, Role, GPT_ENTRIES_BYTES};
use crate::table::gpt::{self, Guid};
use crate::table::{mbr, types};
use std::io::Read;

/// Bytes to put at a byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// What the bytes are, for messages and the backup sidecar.
    pub what: &'static str,
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
}

/// Entries in the array the planner made room for.
const ENTRY_COUNT: u32 = (GPT_ENTRIES_BYTES / gpt::ENTRY_SIZE as u64) as u32;
const ENTRY_SIZE: usize = gpt::ENTRY_SIZE as usize;

/// The writes that put `plan` on a disk, in the order to make them (each
/// followed by a flush).
pub fn encode(plan: &Plan, ids: &Ids) -> Result<Vec<Chunk>, WriteError> {
    match plan.label {
        Label::Gpt => gpt(plan, ids),
        Label::Mbr => mbr(plan, ids),
    }
}

/// UEFI order: the backup copy first, then the primary, then the
/// protective MBR that makes the GPT visible.
fn gpt(plan: &Plan, ids: &Ids) -> Result<Vec<Chunk>, WriteError> {
    let data: Vec<&Planned> = plan.partitions.iter().collect();
    if ids.partition_guids.len() < data.len() {
        return Err(WriteError::Ids(data.len(), ids.partition_guids.len()));
    }
    let ss = plan.sector_size;
    let entries = entry_array(&data, ids)?;
    let array_sectors = (entries.len() as u64).div_ceil(ss);
    let last = plan.total_sectors - 1;
    let backup_entries = last - array_sectors;
    let crc = crc32fast::hash(&entries);
    let header = |my: u64, alt: u64, at: u64| gpt_header(plan, ids, [my, alt, at], crc);
    Ok(vec![
        chunk(backup_entries * ss, entries.clone(), "gpt backup entries"),
        chunk(last * ss, header(last, 1, backup_entries), "gpt backup header"),
        chunk(2 * ss, entries, "gpt primary entries"),
        chunk(ss, header(1, last, 2), "gpt primary header"),
        chunk(0, protective_mbr(plan), "protective mbr"),
    ])
}

fn chunk(offset: u64, bytes: Vec<u8>, what: &'static str) -> Chunk {
    Chunk { offset, bytes, what }
}

/// One sector holding the 92-byte header; `lbas` = (my, alternate, entries).
fn gpt_header(plan: &Plan, ids: &Ids, lbas: [u64; 3], entries_crc: u32) -> Vec<u8> {
    let mut h = vec![0u8; plan.sector_size as usize];
    put(&mut h, 0, gpt::SIGNATURE);
    put(&mut h, 8, &gpt::REVISION.to_le_bytes());
    put(&mut h, 12, &gpt::HEADER_SIZE.to_le_bytes());
    put(&mut h, 24, &lbas[0].to_le_bytes());
    put(&mut h, 32, &lbas[1].to_le_bytes());
    put(&mut h, 40, &plan.first_usable_lba.to_le_bytes());
    put(&mut h, 48, &plan.last_usable_lba.to_le_bytes());
    put(&mut h, 56, &ids.disk_guid);
    put(&mut h, 72, &lbas[2].to_le_bytes());
    put(&mut h, 80, &ENTRY_COUNT.to_le_bytes());
    put(&mut h, 84, &gpt::ENTRY_SIZE.to_le_bytes());
    put(&mut h, 88, &entries_crc.to_le_bytes());
    let crc = gpt::header_crc_of(&h[..gpt::HEADER_SIZE as usize]);
    put(&mut h, gpt::HEADER_CRC_AT, &crc.to_le_bytes());
    h
}

/// 128 entries of 128 bytes; partition N in slot N so numbers stay stable.
fn entry_array(parts: &[&Planned], ids: &Ids) -> Result<Vec<u8>, WriteError> {
    let mut array = vec![0u8; ENTRY_COUNT as usize * ENTRY_SIZE];
    for (p, guid) in parts.iter().zip(&ids.partition_guids) {
        let slot = (p.number as usize).checked_sub(1).filter(|&s| s < ENTRY_COUNT as usize);
        let kind = p.type_id.parse::<Guid>().ok().filter(|g| !g.is_zero());
        let (Some(slot), Some(kind)) = (slot, kind) else {
            return Err(WriteError::Type(p.number, p.type_id.clone()));
        };
        let e = slot * ENTRY_SIZE;
        put(&mut array, e, &kind.0);
        put(&mut array, e + 16, guid);
        put(&mut array, e + 32, &p.start.to_le_bytes());
        put(&mut array, e + 40, &(p.start + p.size - 1).to_le_bytes());
        let name: Vec<u8> = p
            .name
            .iter()
            .flat_map(|n| n.encode_utf16())
            .take(36)
            .flat_map(u16::to_le_bytes)
            .collect();
        put(&mut array, e + 56, &name);
    }
    Ok(array)
}

/// A single 0xEE entry from LBA 1 over the disk, capped at 32 bits.
fn protective_mbr(plan: &Plan) -> Vec<u8> {
    let mut s = boot_sector(plan.sector_size);
    let size = (plan.total_sectors - 1).min(u64::from(u32::MAX)) as u32;
    mbr_entry(&mut s, 0, mbr::TYPE_GPT, 1, size, 1);
    s
}

/// An empty boot sector: zeros with the 0x55AA signature.
fn boot_sector(sector_size: u64) -> Vec<u8> {
    let mut s = vec![0u8; sector_size as usize];
    put(&mut s, 510, &mbr::SIGNATURE.to_le_bytes());
    s
}

/// Entry `slot` of a boot record: type, start and size as stored (relative
/// where EBRs need it), CHS from the absolute LBA `abs_start`.
fn mbr_entry(sector: &mut [u8], slot: usize, kind: u8, start: u32, size: u32, abs_start: u64) {
    let e = mbr::ENTRIES_OFFSET + slot * mbr::ENTRY_SIZE;
    let abs_end = abs_start + u64::from(size.max(1)) - 1;
    put(sector, e + 1, &chs(abs_start));
    sector[e + 4] = kind;
    put(sector, e + 5, &chs(abs_end));
    put(sector, e + 8, &start.to_le_bytes());
    put(sector, e + 12, &size.to_le_bytes());
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

/// MBR: EBRs first (unreachable until the MBR points at them), then the
/// MBR, then zeros over any GPT headers an earlier table left, so no tool
/// mistakes the disk for GPT.
fn mbr(plan: &Plan, ids: &Ids) -> Result<Vec<Chunk>, WriteError> {
    let ss = plan.sector_size;
    let mut out = ebrs(plan)?;
    let mut sector = boot_sector(ss);
    put(&mut sector, 440, &ids.mbr_signature.to_le_bytes());
    let slots = plan.partitions.iter().filter(|p| p.role != Role::Logical);
    for p in slots {
        let slot = (p.number as usize).checked_sub(1).filter(|&s| s < 4);
        let kind = types::parse_mbr_code(&p.type_id);
        let (Some(slot), Some(kind)) = (slot, kind) else {
            return Err(WriteError::Type(p.number, p.type_id.clone()));
        };
        let (start, size) = (u32_of(p, p.start)?, u32_of(p, p.size)?);
        mbr_entry(&mut sector, slot, kind, start, size, p.start);
    }
    out.push(chunk(0, sector, "mbr"));
    out.extend(stale_gpt_wipes(plan));
    Ok(out)
}

/// One EBR per logical: entry 0 the logical relative to its EBR, entry 1
/// the next EBR relative to the extended start (empty for the last).
fn ebrs(plan: &Plan) -> Result<Vec<Chunk>, WriteError> {
    let Some(ext) = plan.partitions.iter().find(|p| p.role == Role::Extended) else {
        return Ok(Vec::new());
    };
    let logicals: Vec<&Planned> =
        plan.partitions.iter().filter(|p| p.role == Role::Logical).collect();
    let mut out = Vec::new();
    for (i, p) in logicals.iter().enumerate() {
        let ebr = p.ebr.ok_or(WriteError::MbrRange(p.number))?;
        let kind = types::parse_mbr_code(&p.type_id)
            .ok_or_else(|| WriteError::Type(p.number, p.type_id.clone()))?;
        let mut sector = boot_sector(plan.sector_size);
        mbr_entry(&mut sector, 0, kind, u32_of(p, p.start - ebr)?, u32_of(p, p.size)?, p.start);
        if let Some(next) = logicals.get(i + 1) {
            let next_ebr = next.ebr.ok_or(WriteError::MbrRange(next.number))?;
            let span = next.start + next.size - next_ebr;
            mbr_entry(
                &mut sector,
                1,
                0x05,
                u32_of(next, next_ebr - ext.start)?,
                u32_of(next, span)?,
                next_ebr,
            );
        }
        out.push(chunk(ebr * plan.sector_size, sector, "ebr"));
    }
    Ok(out)
}

/// Zero the sectors where a GPT header of either sector size would sit
/// (byte 512 or 4096, and the end of the disk), where no partition is.
fn stale_gpt_wipes(plan: &Plan) -> Vec<Chunk> {
    let ss = plan.sector_size;
    let first_used = plan.partitions.iter().map(|p| p.ebr.unwrap_or(p.start)).min().unwrap_or(0);
    let head = (1..=4096 / ss).filter(|&lba| lba < first_used);
    let tail_sectors = (4096 / ss).max(1);
    let last_used = plan.partitions.iter().map(|p| p.start + p.size).max().unwrap_or(0);
    let tail = (plan.total_sectors.saturating_sub(tail_sectors)..plan.total_sectors)
        .filter(|&lba| lba >= last_used);
    head.chain(tail).map(|lba| chunk(lba * ss, vec![0u8; ss as usize], "stale gpt wipe")).collect()
}

fn u32_of(p: &Planned, v: u64) -> Result<u32, WriteError> {
    u32::try_from(v).map_err(|_| WriteError::MbrRange(p.number))
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::plan::{plan, Align, Disk, Request, Size};
    use crate::table::{self, PartKind};

    fn ids(n: usize) -> Ids {
        Ids {
            disk_guid: [7; 16],
            partition_guids: (1..=n as u8).map(|i| [i; 16]).collect(),
            mbr_signature: 0xCAFE,
        }
    }

    fn make(label: Label, logical: u64, sizes: &[Size]) -> (Plan, Vec<u8>) {
        let disk = Disk {
            size_bytes: 64 * MIB,
            logical,
            physical: 4096,
            alignment_offset: 0,
            optimal_io: None,
        };
        let reqs: Vec<Request> = sizes
            .iter()
            .map(|&size| Request {
                min_start: None,
                size,
                type_id: "linux".into(),
                name: Some("p".into()),
            })
            .collect();
        let reqs: Vec<Request> = if label == Label::Mbr {
            reqs.into_iter().map(|r| Request { name: None, ..r }).collect()
        } else {
            reqs
        };
        let p = plan(&disk, label, Align::Optimal, false, &reqs).unwrap();
        let mut img = vec![0xA5u8; (64 * MIB) as usize];
        for c in encode(&p, &ids(p.partitions.len())).unwrap() {
            img[c.offset as usize..c.offset as usize + c.bytes.len()].copy_from_slice(&c.bytes);
        }
        (p, img)
    }

    // `&Vec`: ReadAt is implemented for Vec, not for the unsized slice.
    #[allow(clippy::ptr_arg)]
    fn read_back(p: &Plan, img: &Vec<u8>) -> table::Layout {
        let layout = table::read(img, p.sector_size, img.len() as u64).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<(u32, u64, u64)> =
            layout.partitions.iter().map(|x| (x.number, x.start, x.size)).collect();
        let want: Vec<(u32, u64, u64)> =
            p.partitions.iter().map(|x| (x.number, x.start, x.size)).collect();
        assert_eq!(got, want);
        layout
    }

    #[test]
    fn gpt_reads_back_at_512_and_4096() {
        for ss in [512, 4096] {
            let (p, img) = make(Label::Gpt, ss, &[Size::Bytes(MIB), Size::Rest]);
            let layout = read_back(&p, &img);
            assert_eq!(layout.label, table::Label::Gpt);
            assert_eq!(layout.partitions[0].name.as_deref(), Some("p"));
            assert_eq!(layout.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
            assert!(layout.mbr.unwrap().protective);
        }
    }

    #[test]
    fn gpt_order_is_backup_then_primary_then_mbr() {
        let (p, _) = make(Label::Gpt, 512, &[Size::Rest]);
        let order: Vec<&str> = encode(&p, &ids(1)).unwrap().iter().map(|c| c.what).collect();
        assert_eq!(
            order,
            [
                "gpt backup entries",
                "gpt backup header",
                "gpt primary entries",
                "gpt primary header",
                "protective mbr"
            ]
        );
    }

    #[test]
    fn mbr_with_logicals_reads_back() {
        let sizes = [Size::Bytes(4 * MIB); 6];
        let (p, img) = make(Label::Mbr, 512, &sizes);
        let layout = read_back(&p, &img);
        assert_eq!(layout.label, table::Label::Mbr);
        assert_eq!(layout.partitions.iter().filter(|x| x.kind == PartKind::Logical).count(), 3);
        let ebrs: Vec<u64> = p.partitions.iter().filter_map(|x| x.ebr).collect();
        assert_eq!(layout.mbr.unwrap().ebrs, ebrs);
        assert_eq!(&img[440..444], &0xCAFEu32.to_le_bytes());
    }

    #[test]
    fn mbr_wipes_stale_gpt_headers() {
        let (p, img) = make(Label::Mbr, 512, &[Size::Bytes(MIB)]);
        assert!(img[512..4096 + 512].iter().all(|&b| b == 0));
        assert!(img[img.len() - 4096..].iter().all(|&b| b == 0));
        read_back(&p, &img);
    }

    #[test]
    fn guids_and_chs() {
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
        assert_eq!(chs(0), [0, 1, 0]);
        assert_eq!(chs(2048), [32, 33, 0]);
        assert_eq!(chs(1 << 30), [0xFE, 0xFF, 0xFF]);
        let v = version4([0xFF; 16]);
        assert_eq!((v[7] >> 4, v[8] >> 6), (4, 2));
        let r = Ids::random(3).unwrap();
        assert_eq!(r.partition_guids.len(), 3);
        assert_ne!(r.partition_guids[0], r.partition_guids[1]);
    }
}
