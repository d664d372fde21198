//! Putting a table on a disk. [`TableBytes`] holds every byte of a table,
//! whether the planner made it or it was read from a disk and edited;
//! [`encode`] turns it into writes, in the order that leaves the old table
//! or a recoverable new one when a crash stops them part-way.

use crate::table::gpt;
use crate::table::mbr;
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
pub fn encode(table: &TableBytes) -> Vec<Chunk> {
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

/// MBR: EBRs first (unreachable until the MBR points at them), then the
/// MBR, then zeros over any GPT headers an earlier table left, so no tool
/// mistakes the disk for GPT.
fn encode_mbr(m: &MbrBytes) -> Vec<Chunk> {
    let ss = m.sector_size;
    let mut out: Vec<Chunk> =
        m.ebrs.iter().map(|(lba, sector)| chunk(lba * ss, sector.clone(), "ebr")).collect();
    out.push(chunk(0, m.mbr.clone(), "mbr"));
    out.extend(m.wipes.iter().map(|lba| chunk(lba * ss, vec![0u8; ss as usize], "stale gpt wipe")));
    out
}

fn chunk(offset: u64, bytes: Vec<u8>, what: &'static str) -> Chunk {
    Chunk { offset, bytes, what }
}

/// One sector holding the 92-byte header; `lbas` = (my, alternate, entries).
fn gpt_header(g: &GptBytes, lbas: [u64; 3], entries_crc: u32) -> Vec<u8> {
    let count = g.entries.len().checked_div(g.entry_size as usize).unwrap_or(0);
    let mut h = vec![0u8; g.sector_size as usize];
    put(&mut h, 0, gpt::SIGNATURE);
    put(&mut h, 8, &gpt::REVISION.to_le_bytes());
    put(&mut h, 12, &gpt::HEADER_SIZE.to_le_bytes());
    put(&mut h, 24, &lbas[0].to_le_bytes());
    put(&mut h, 32, &lbas[1].to_le_bytes());
    put(&mut h, 40, &g.first_usable_lba.to_le_bytes());
    put(&mut h, 48, &g.last_usable_lba.to_le_bytes());
    put(&mut h, 56, &g.disk_guid);
    put(&mut h, 72, &lbas[2].to_le_bytes());
    put(&mut h, 80, &(count as u32).to_le_bytes());
    put(&mut h, 84, &g.entry_size.to_le_bytes());
    put(&mut h, 88, &entries_crc.to_le_bytes());
    let crc = gpt::header_crc_of(&h[..gpt::HEADER_SIZE as usize]);
    put(&mut h, gpt::HEADER_CRC_AT, &crc.to_le_bytes());
    h
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
    put(&mut s, 510, &mbr::SIGNATURE.to_le_bytes());
    s
}

/// Entry `slot` of a boot record: type, start and size as stored (relative
/// where EBRs need it), CHS from the absolute LBA `abs_start`.
pub fn mbr_entry(sector: &mut [u8], slot: usize, kind: u8, start: u32, size: u32, abs_start: u64) {
    let e = mbr::ENTRIES_OFFSET + slot * mbr::ENTRY_SIZE;
    sector[e + 4] = kind;
    put(sector, e + 12, &size.to_le_bytes());
    set_mbr_start(sector, slot, start, abs_start);
}

/// Move entry `slot` to `start` (as stored) keeping its size, type and
/// boot flag; the CHS fields follow the absolute LBA `abs_start`.
pub fn set_mbr_start(sector: &mut [u8], slot: usize, start: u32, abs_start: u64) {
    let e = mbr::ENTRIES_OFFSET + slot * mbr::ENTRY_SIZE;
    let size = u32::from_le_bytes([sector[e + 12], sector[e + 13], sector[e + 14], sector[e + 15]]);
    let abs_end = abs_start + u64::from(size.max(1)) - 1;
    put(sector, e + 1, &chs(abs_start));
    put(sector, e + 5, &chs(abs_end));
    put(sector, e + 8, &start.to_le_bytes());
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

pub(crate) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::plan::{plan, Align, Disk, Label, Plan, Request, Size};
    use crate::table::gpt::Guid;
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
        for c in encode(&p.table(&ids(p.partitions.len())).unwrap()) {
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
        let order: Vec<&str> = encode(&p.table(&ids(1)).unwrap()).iter().map(|c| c.what).collect();
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
