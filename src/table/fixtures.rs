//! Hand-built images for tests.

use super::gpt::{self, header_crc_of, Guid};
use super::mbr;

/// Linux filesystem data, 0FC63DAF-8483-4772-8E79-3D69D8477DE4, as stored.
pub(crate) const LINUX: [u8; 16] = [
    0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4,
];
pub(crate) const DISK_GUID: [u8; 16] = [7; 16];

fn put(img: &mut [u8], at: usize, bytes: &[u8]) {
    img[at..at + bytes.len()].copy_from_slice(bytes);
}

fn at(lba: u64, ss: u64) -> usize {
    usize::try_from(lba * ss).unwrap()
}

/// Write entry `slot` of the boot record at byte `base` (its boot flag
/// and CHS fields as they were), and sign it.
pub fn mbr_entry(img: &mut [u8], base: usize, slot: usize, kind: u8, start: u32, sectors: u32) {
    let record = &mut img[base..];
    let e = mbr::entry_at(record, slot).unwrap();
    mbr::put_entry(record, slot, &mbr::MbrEntry { kind, start_lba: start, sectors, ..e });
    mbr::sign(record);
}

/// 512 sectors: primary 1 (1+63), extended 2 (64+256) holding EBRs at
/// 64, 128, 192 that describe logicals 65+63, 129+63, 193+100.
pub(crate) fn mbr_extended() -> Vec<u8> {
    let mut img = vec![0u8; 512 * 512];
    mbr_entry(&mut img, 0, 0, 0x83, 1, 63);
    mbr_entry(&mut img, 0, 1, 0x05, 64, 256);
    for (ebr, size, next) in [(64, 63, 64), (128, 63, 128), (192, 100, 0)] {
        mbr_entry(&mut img, ebr * 512, 0, 0x83, 1, size);
        if next != 0 {
            mbr_entry(&mut img, ebr * 512, 1, 0x05, next, 64);
        }
    }
    img
}

/// A GPT image with `sectors` sectors, 128 entries of `entry_size`
/// bytes, and partitions (first, last, name) in slots 1, 2, ...
pub(crate) fn gpt_image(
    ss: u64,
    sectors: u64,
    entry_size: u32,
    parts: &[(u64, u64, &str)],
) -> Vec<u8> {
    let mut img = vec![0u8; at(sectors, ss)];
    mbr_entry(&mut img, 0, 0, 0xEE, 1, u32::try_from(sectors - 1).unwrap_or(u32::MAX));
    let mut array = vec![0u8; 128 * entry_size as usize];
    for (i, &(first_lba, last_lba, name)) in parts.iter().enumerate() {
        let mut entry = gpt::GptEntry {
            type_guid: Guid(LINUX),
            unique_guid: Guid([i as u8 + 1; 16]),
            first_lba,
            last_lba,
            attributes: 0,
            name: [0; 36],
        };
        entry.set_name(name);
        put(&mut array, i * entry_size as usize, &entry.encode());
    }
    let array_sectors = (array.len() as u64).div_ceil(ss);
    let last = sectors - 1;
    let usable = (2 + array_sectors, last - 1 - array_sectors);
    let crc = crc32fast::hash(&array);
    put(&mut img, at(2, ss), &array);
    put(&mut img, at(last - array_sectors, ss), &array);
    let header = |my_lba: u64, alternate_lba: u64, entries_lba: u64| {
        let mut h = gpt::Header {
            revision: gpt::REVISION,
            header_size: gpt::HEADER_SIZE,
            header_crc: 0,
            my_lba,
            alternate_lba,
            first_usable_lba: usable.0,
            last_usable_lba: usable.1,
            disk_guid: Guid(DISK_GUID),
            entries_lba,
            entry_count: 128,
            entry_size,
            entries_crc: crc,
        };
        h.seal();
        h.encode()
    };
    put(&mut img, at(1, ss), &header(1, last, 2));
    put(&mut img, at(last, ss), &header(last, 1, last - array_sectors));
    img
}

/// Change the valid header at `lba` with `edit`, and reseal it.
pub(crate) fn edit_header(img: &mut [u8], ss: u64, lba: u64, edit: impl FnOnce(&mut gpt::Header)) {
    let h = at(lba, ss);
    let mut header = gpt::Header::parse(&img[h..h + ss as usize]).unwrap();
    edit(&mut header);
    header.seal();
    put(img, h, &header.encode());
}

/// Change the boot record at byte `base` with `edit`.
pub(crate) fn edit_record(img: &mut [u8], base: usize, edit: impl FnOnce(&mut mbr::Mbr)) {
    let mut record = mbr::Mbr::parse(&img[base..]).unwrap();
    edit(&mut record);
    record.encode_into(&mut img[base..]);
}

/// Recompute the CRC of the header at `lba`, whatever its bytes hold.
pub fn reseal(img: &mut [u8], ss: u64, lba: u64) {
    let h = at(lba, ss);
    if let Some(raw) = img.get(h..h + gpt::HEADER_SIZE as usize) {
        let crc = header_crc_of(raw);
        put(img, h + gpt::HEADER_CRC_AT, &crc.to_le_bytes());
    }
}
