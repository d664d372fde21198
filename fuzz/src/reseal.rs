//! Checksums recomputed after mutation, so that the fuzzer reaches the
//! code behind them: a mutated GPT header or LVM metadata text otherwise
//! never gets past its CRC. Each fix-up touches only the checksum field of
//! a structure whose magic is already there.

use crate::image::Image;
use blkalign::table::gpt;

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// Every partition table checksum: GPT headers and entry arrays, BSD
/// (whole disk and in MBR slices), Sun, SGI, Amiga (RDB and partition blocks).
pub fn tables(img: &mut Image) {
    let ss = img.sector_size();
    let last = (img.size / ss).saturating_sub(1);
    let alternate = gpt_header(img, 1, ss);
    for lba in [Some(last), alternate].into_iter().flatten() {
        gpt_header(img, lba, ss);
    }
    let Some(sector0) = img.bytes(0, 512) else { return };
    bsd(img, 64, 448);
    bsd(img, 512, 512);
    for slot in 0..4 {
        let e = 446 + slot * 16;
        if [0xA5, 0xA6, 0xA9].contains(&sector0[e + 4]) {
            let start = u64::from(le_u32(&sector0, e + 8));
            if let Some(at) = start.checked_mul(ss).and_then(|s| s.checked_add(512)) {
                bsd(img, at, 512);
            }
        }
    }
    sun(img, &sector0);
    sgi(img, &sector0);
    amiga(img);
}

/// Reseal the GPT header at `lba` and its entry array; returns the LBA
/// of the other header it names.
fn gpt_header(img: &mut Image, lba: u64, ss: u64) -> Option<u64> {
    let at = lba.checked_mul(ss)?;
    let mut h = img.bytes(at, ss as usize)?;
    if !h.starts_with(gpt::SIGNATURE) {
        return None;
    }
    let entries = u64::from(le_u32(&h, 80)) * u64::from(le_u32(&h, 84));
    let array = le_u64(&h, 72).checked_mul(ss).filter(|_| entries <= gpt::MAX_ENTRIES_BYTES);
    if let Some(raw) = array.and_then(|array| img.bytes(array, entries as usize)) {
        h[88..92].copy_from_slice(&crc32fast::hash(&raw).to_le_bytes());
    }
    let len = (le_u32(&h, 12) as usize).clamp(gpt::HEADER_SIZE as usize, h.len());
    let crc = gpt::header_crc_of(&h[..len]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    img.write_at(at, &h);
    Some(le_u64(&h, 32))
}

/// A BSD disklabel at byte `at`, `room` bytes long: d_checksum makes the
/// xor of its 16-bit words up to the last entry zero.
fn bsd(img: &mut Image, at: u64, room: usize) {
    let Some(mut label) = img.bytes(at, room) else { return };
    let end = 148 + usize::from(le_u16(&label, 138)) * 16;
    if le_u32(&label, 0) != 0x8256_4557 || end > room {
        return;
    }
    label[136..138].fill(0);
    let xor = label[..end].chunks_exact(2).fold(0u16, |x, w| x ^ le_u16(w, 0));
    img.write_at(at + 136, &xor.to_le_bytes());
}

/// A Sun label: the last word makes the xor of all 256 words zero.
fn sun(img: &mut Image, sector0: &[u8]) {
    if sector0[508..510] != [0xDA, 0xBE] {
        return;
    }
    let xor =
        sector0[..510].chunks_exact(2).fold(0u16, |x, w| x ^ u16::from_be_bytes([w[0], w[1]]));
    img.write_at(510, &xor.to_be_bytes());
}

/// An SGI volume header: vh_csum makes the sum of its 128 words zero.
fn sgi(img: &mut Image, sector0: &[u8]) {
    if be_u32(sector0, 0) != 0x0BE5_A941 {
        return;
    }
    let sum =
        (0..128).filter(|&i| i != 126).fold(0u32, |s, i| s.wrapping_add(be_u32(sector0, i * 4)));
    img.write_at(504, &sum.wrapping_neg().to_be_bytes());
}

/// An Amiga Rigid Disk Block in one of the first 16 sectors, and partition
/// blocks ("PART") in the first 64: each checksum (the third long) makes
/// the sum of the block's first SummedLongs longs zero.
fn amiga(img: &mut Image) {
    for lba in 0..64u64 {
        let Some(block) = img.bytes(lba * 512, 512) else { return };
        let longs = (be_u32(&block, 4) & 0x7F) as usize;
        let rdb = lba < 16 && block.starts_with(b"RDSK");
        if !(rdb || block.starts_with(b"PART")) || longs < 3 {
            continue;
        }
        let sum =
            (0..longs).filter(|&i| i != 2).fold(0u32, |s, i| s.wrapping_add(be_u32(&block, i * 4)));
        img.write_at(lba * 512 + 8, &sum.wrapping_neg().to_be_bytes());
    }
}

/// LVM's CRC-32: the IEEE polynomial seeded with 0xf597a6cf, no final xor.
fn lvm_crc(data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(!0xf597_a6cf);
    hasher.update(data);
    !hasher.finalize()
}

/// An LVM2 physical volume starting at byte `base`: the label's CRC, and
/// in each metadata area the text's CRC and the area header's.
pub fn lvm(img: &mut Image, base: u64) {
    for sector in 0..4u64 {
        let Some(at) = base.checked_add(sector * 512) else { return };
        let Some(mut label) = img.bytes(at, 512) else { return };
        if !label.starts_with(b"LABELONE") || &label[24..32] != b"LVM2 001" {
            continue;
        }
        for (offset, size) in metadata_areas(&label) {
            if let Some(mda) = base.checked_add(offset) {
                lvm_area(img, mda, size);
            }
        }
        let crc = lvm_crc(&label[20..]);
        label[16..20].copy_from_slice(&crc.to_le_bytes());
        img.write_at(at, &label);
        return;
    }
}

/// bcache's CRC-64: ECMA-182 polynomial, not reflected, all ones in and out.
fn bcache_crc(data: &[u8]) -> u64 {
    let mut crc = !0u64;
    for &byte in data {
        crc ^= u64::from(byte) << 56;
        for _ in 0..8 {
            crc = if crc >> 63 != 0 { crc << 1 ^ 0x42f0_e1eb_a9ea_3693 } else { crc << 1 };
        }
    }
    !crc
}

const BCACHE_MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
];

/// A bcache superblock at byte 4096 past `base`: its checksum, over bytes
/// 8 up to the last journal bucket it lists.
pub fn bcache(img: &mut Image, base: u64) {
    let Some(at) = base.checked_add(4096) else { return };
    let Some(mut sb) = img.bytes(at, 4096) else { return };
    if sb[24..40] != BCACHE_MAGIC {
        return;
    }
    let keys = usize::from(le_u16(&sb, 206)).min(256);
    let crc = bcache_crc(&sb[8..208 + 8 * keys]);
    sb[..8].copy_from_slice(&crc.to_le_bytes());
    img.write_at(at, &sb);
}

/// (offset, size) of each metadata area the PV header lists.
fn metadata_areas(label: &[u8]) -> Vec<(u64, u64)> {
    let mut pos = le_u32(label, 20) as usize + 40;
    let mut lists = [Vec::new(), Vec::new()];
    for list in &mut lists {
        while pos + 16 <= label.len() {
            let (offset, size) = (le_u64(label, pos), le_u64(label, pos + 8));
            pos += 16;
            if offset == 0 {
                break;
            }
            list.push((offset, size));
        }
    }
    let [_, metadata] = lists;
    metadata
}

/// The metadata area at `at`: its first raw location's text (read as a
/// circular buffer after the 512-byte header), then the header itself.
fn lvm_area(img: &mut Image, at: u64, size: u64) {
    let Some(mut header) = img.bytes(at, 512) else { return };
    if &header[4..20] != b" LVM2 x[5A%r0N*>" {
        return;
    }
    let (offset, len) = (le_u64(&header, 40), le_u64(&header, 48));
    if (512..size).contains(&offset) && len > 0 && len <= (size - 512).min(4 << 20) {
        let first = len.min(size - offset);
        let text = at.checked_add(offset).and_then(|o| img.bytes(o, first as usize));
        let wrapped = at.checked_add(512).and_then(|o| img.bytes(o, (len - first) as usize));
        if let (Some(mut text), Some(wrapped)) = (text, wrapped) {
            text.extend(wrapped);
            header[56..60].copy_from_slice(&lvm_crc(&text).to_le_bytes());
        }
    }
    let crc = lvm_crc(&header[4..]);
    header[..4].copy_from_slice(&crc.to_le_bytes());
    img.write_at(at, &header);
}

/// A realign journal file: in each header slot with the signature, the
/// CRCs of the move record, of the checksum table and of the header.
pub fn journal(file: &mut [u8]) {
    const RECORD_AT: usize = 8192;
    for slot in [0, 4096] {
        let Some(h) = file.get(slot..slot + 96) else { return };
        if !h.starts_with(b"BLKALNJ2") && !h.starts_with(b"BLKALNJ1") {
            continue;
        }
        let (cursor, record_len) = (le_u64(h, 24), le_u64(h, 56));
        let record = usize::try_from(record_len).ok().and_then(|n| {
            let record = file.get(RECORD_AT..RECORD_AT.checked_add(n)?)?;
            Some((crc32fast::hash(record), RECORD_AT + n.div_ceil(4096) * 4096))
        });
        if let Some((crc, table_at)) = record {
            file[slot + 52..slot + 56].copy_from_slice(&crc.to_le_bytes());
            let table = usize::try_from(cursor).ok().and_then(|c| {
                file.get(table_at..table_at.checked_add(c.checked_mul(4)?)?).map(crc32fast::hash)
            });
            if let Some(crc) = table {
                file[slot + 64..slot + 68].copy_from_slice(&crc.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&file[slot..slot + 92]);
        file[slot + 92..slot + 96].copy_from_slice(&crc.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roundtrip;
    use blkalign::align::Geometry;
    use blkalign::plan::{self, Align, NewLabel, Size};
    use blkalign::stack::{self, Kind};
    use blkalign::table;

    fn put(img: &mut Image, at: u64, bytes: &[u8]) {
        img.write_at(at, bytes);
    }

    #[test]
    fn a_mutated_gpt_reads_again_once_resealed() {
        let size_bytes = 64 << 20;
        let geometry = Geometry {
            logical: 512,
            physical: 4096,
            physical_assumed: false,
            alignment_offset: 0,
            optimal_io: None,
        };
        let request = roundtrip::request(Size::Rest, "linux", None, None);
        let plan = plan::plan_table(&geometry, size_bytes, NewLabel::Gpt, Align::Optimal, false, &[request])
            .unwrap();
        let mut img = Image::blank(size_bytes);
        roundtrip::apply(&mut img, &plan.table(&roundtrip::ids(1, 7)).unwrap());
        // Partition 1 ends one sector earlier, in both entry arrays.
        let last = plan.partitions[0].start + plan.partitions[0].size - 2;
        let backup_entries = (size_bytes / 512 - 33) * 512;
        for array in [2 * 512, backup_entries] {
            put(&mut img, array + 40, &last.to_le_bytes());
        }
        assert!(table::read(&img, 512, img.size).is_err(), "both CRCs fail");
        tables(&mut img);
        let layout = table::read(&img, 512, img.size).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(layout.partitions[0].size, plan.partitions[0].size - 1);
    }

    /// A PV whose label, metadata area header and text all carry no CRC.
    #[test]
    fn an_lvm_pv_is_read_once_resealed() {
        let uuid = "AAAAAABBBBCCCCDDDDEEEEFFFFGGGGGG";
        let text = format!(
            "vg0 {{\nextent_size = 8192\nphysical_volumes {{\npv0 {{\nid = \"{}\"\n}}\n}}\n}}\n",
            "AAAAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GGGGGG"
        );
        let mut img = Image::blank(64 << 20);
        let mut label = vec![0u8; 512];
        label[..8].copy_from_slice(b"LABELONE");
        label[20..24].copy_from_slice(&32u32.to_le_bytes());
        label[24..32].copy_from_slice(b"LVM2 001");
        label[32..64].copy_from_slice(uuid.as_bytes());
        label[72..80].copy_from_slice(&(1u64 << 20).to_le_bytes()); // data area: pe_start
        label[104..112].copy_from_slice(&4096u64.to_le_bytes()); // metadata area
        label[112..120].copy_from_slice(&((1u64 << 20) - 4096).to_le_bytes());
        put(&mut img, 512, &label);
        let mut mda = vec![0u8; 512];
        mda[4..20].copy_from_slice(b" LVM2 x[5A%r0N*>");
        mda[24..32].copy_from_slice(&4096u64.to_le_bytes());
        mda[40..48].copy_from_slice(&512u64.to_le_bytes());
        mda[48..56].copy_from_slice(&(text.len() as u64).to_le_bytes());
        put(&mut img, 4096, &mda);
        put(&mut img, 4096 + 512, text.as_bytes());
        assert!(stack::walk(&img, 0, img.size).is_empty(), "no valid label");
        // The label is in sector 1, where pvcreate puts it.
        put(&mut img, 512 + 8, &1u64.to_le_bytes());
        lvm(&mut img, 0);
        let layers = stack::walk(&img, 0, img.size);
        assert_eq!((layers[0].kind, layers[0].label.as_deref()), (Kind::LvmPv, Some("vg0")));
        assert_eq!(layers[0].unit_bytes, Some(8192 * 512));
    }
}
