//! bcache superblocks (the kernel's `struct cache_sb_disk`, read as
//! `bcache-super-show` reads it): a backing device's data starts
//! `data_offset` sectors in and is what /dev/bcacheN shows; a cache device
//! holds cached copies in buckets from its first bucket on.

use super::layers::{Details, Found, Layer};
use super::region::{text, Contents, Region};
use crate::io::{le_u16, le_u32, le_u64};

/// The superblock's place on the device (`SB_SECTOR` 8) and its length.
const SB_OFFSET: u64 = 4096;
const SB_LEN: usize = 4096;
const MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
];
const SECTOR: u64 = 512;
/// `d[]` holds at most this many journal bucket numbers (`SB_JOURNAL_BUCKETS`).
const JOURNAL_BUCKETS: usize = 256;
/// Where `d[]` starts: the checksum covers bytes 8 up to its last key.
const KEYS_AT: usize = 208;
/// A version 1 backing device's data starts here (`BDEV_DATA_START_DEFAULT`).
const DATA_START_DEFAULT: u64 = 16;
/// `feature_incompat` bits of version 5 cache devices: bucket sizes over
/// 16 bits, as a high half (obsolete) or as a power of two.
const OBSO_LARGE_BUCKET: u64 = 0x1;
const LOG_LARGE_BUCKET_SIZE: u64 = 0x2;
/// Where the obsolete high half of the bucket size lies, after `d[]`.
const BUCKET_SIZE_HI_AT: usize = 2256;

/// What a superblock says, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub(crate) version: u64,
    /// A backing device (versions 1, 4, 6); else a cache device (0, 3, 5).
    pub(crate) backing: bool,
    /// Backing: `data_offset`. Cache: the first bucket's start.
    pub(crate) data_offset_bytes: u64,
    pub(crate) block_bytes: u64,
    pub(crate) bucket_bytes: u64,
    /// Cache: `nbuckets` buckets.
    pub(crate) cache_bytes: Option<u64>,
    pub(crate) uuid: String,
    pub(crate) set_uuid: String,
    pub(crate) label: Option<String>,
}

/// Whether the region starts with a bcache superblock as libblkid accepts
/// one: the magic, its own sector recorded, the checksum right.
pub(crate) fn present(region: &Region) -> Option<Vec<u8>> {
    let sb = region.bytes(SB_OFFSET, SB_LEN)?;
    if sb.get(24..40) != Some(&MAGIC[..]) || le_u64(&sb, 8)? != SB_OFFSET / SECTOR {
        return None;
    }
    let keys = usize::from(le_u16(&sb, 206)?);
    let end = (keys <= JOURNAL_BUCKETS).then(|| KEYS_AT + 8 * keys)?;
    (le_u64(&sb, 0)? == crc64(sb.get(8..end)?)).then_some(sb)
}

/// The fields of a checked superblock, or why they make no sense.
pub(crate) fn parse(sb: &[u8]) -> Result<Superblock, String> {
    let short = || "superblock cut short".to_string();
    let version = le_u64(sb, 16).ok_or_else(short)?;
    let backing = match version {
        1 | 4 | 6 => true,
        0 | 3 | 5 => false,
        v => return Err(format!("unknown superblock version {v}")),
    };
    let sectors = |s: u64, what: &str| {
        s.checked_mul(SECTOR).filter(|&b| b > 0).ok_or_else(|| format!("{what} of {s} sectors"))
    };
    let block_bytes = sectors(u64::from(le_u16(sb, 192).ok_or_else(short)?), "a block size")?;
    if !block_bytes.is_power_of_two() {
        return Err(format!("a block size of {block_bytes} bytes, not a power of two"));
    }
    let bucket_bytes = sectors(bucket_sectors(sb, version).ok_or_else(short)?, "a bucket size")?;
    let (data_offset_bytes, cache_bytes) = if backing {
        // Version 1 predates the field; the kernel refuses less than 16.
        let offset =
            if version == 1 { DATA_START_DEFAULT } else { le_u64(sb, 184).ok_or_else(short)? };
        if offset < DATA_START_DEFAULT {
            return Err(format!("a data offset of {offset} sectors, inside the superblock"));
        }
        (sectors(offset, "a data offset")?, None)
    } else {
        let first = u64::from(le_u16(sb, 204).ok_or_else(short)?);
        let first = first.checked_mul(bucket_bytes).ok_or("the first bucket past 2^64")?;
        (first, le_u64(sb, 184).and_then(|n| n.checked_mul(bucket_bytes)))
    };
    Ok(Superblock {
        version,
        backing,
        data_offset_bytes,
        block_bytes,
        bucket_bytes,
        cache_bytes,
        uuid: uuid(sb, 40).ok_or_else(short)?,
        set_uuid: uuid(sb, 56).ok_or_else(short)?,
        label: text(sb, 72, 32),
    })
}

/// The bucket size in sectors, as the kernel's `get_bucket_size` reads it.
fn bucket_sectors(sb: &[u8], version: u64) -> Option<u64> {
    let low = u64::from(le_u16(sb, 194)?);
    let incompat = if version >= 5 { le_u64(sb, 128)? } else { 0 };
    if incompat & LOG_LARGE_BUCKET_SIZE != 0 {
        1u64.checked_shl(u32::try_from(low).ok().filter(|&o| o < 16)?)
    } else if incompat & OBSO_LARGE_BUCKET != 0 {
        Some(low | u64::from(le_u32(sb, BUCKET_SIZE_HI_AT)?) << 16)
    } else {
        Some(low)
    }
}

/// Sixteen bytes as `uuid_unparse` prints them.
fn uuid(sb: &[u8], at: usize) -> Option<String> {
    let b = sb.get(at..at.checked_add(16)?)?;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// bcache's CRC-64: ECMA-182 polynomial, not reflected, all ones in and out.
fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x42f0_e1eb_a9ea_3693;
    let mut crc = !0u64;
    for &byte in data {
        crc ^= u64::from(byte) << 56;
        for _ in 0..8 {
            crc = if crc & (1 << 63) != 0 { crc << 1 ^ POLY } else { crc << 1 };
        }
    }
    !crc
}

/// The layer: a backing device's data area holds more layers (what
/// /dev/bcacheN shows); a cache device's buckets hold no layers.
pub(crate) fn found(region: &Region, contents: &Contents) -> Found {
    let parsed = present(region).ok_or_else(|| "superblock unreadable".to_string());
    let sb = match parsed.and_then(|sb| parse(&sb)) {
        Ok(sb) => sb,
        Err(why) => return Found::leaf(Layer::new(contents, 0, Details::None {}).note(why)),
    };
    let details = Details::Bcache {
        version: sb.version,
        device: if sb.backing { "backing" } else { "cache" },
        data_offset_bytes: sb.data_offset_bytes,
        block_bytes: sb.block_bytes,
        bucket_bytes: sb.bucket_bytes,
        uuid: sb.uuid,
        set_uuid: sb.set_uuid,
    };
    let layer = Layer::new(contents, sb.data_offset_bytes, details);
    if !sb.backing {
        let layer = layer.unit(Some(sb.bucket_bytes)).size(sb.cache_bytes);
        return Found::leaf(
            layer.note("a cache device: its buckets hold cached copies, no layers"),
        );
    }
    let size = region.size.checked_sub(sb.data_offset_bytes);
    let Some(size) = size else {
        return Found::leaf(layer.note("its data offset lies past the end of the device"));
    };
    Found { layer: layer.unit(Some(sb.block_bytes)).size(Some(size)), inner: Some(size) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::walk;

    /// A backing device superblock as make-bcache 1.0.8 writes it.
    fn backing(img: &mut [u8], version: u64, data_offset: u64, block: u16) {
        let sb = &mut img[4096..8192];
        sb[8..16].copy_from_slice(&8u64.to_le_bytes());
        sb[16..24].copy_from_slice(&version.to_le_bytes());
        sb[24..40].copy_from_slice(&MAGIC);
        sb[40..56].copy_from_slice(&[0x11; 16]);
        sb[56..72].copy_from_slice(&[0x22; 16]);
        sb[184..192].copy_from_slice(&data_offset.to_le_bytes());
        sb[192..194].copy_from_slice(&block.to_le_bytes());
        sb[194..196].copy_from_slice(&1024u16.to_le_bytes());
        seal(img);
    }

    fn seal(img: &mut [u8]) {
        let keys = usize::from(u16::from_le_bytes([img[4096 + 206], img[4096 + 207]])).min(256);
        let crc = crc64(&img[4096 + 8..4096 + KEYS_AT + 8 * keys]);
        img[4096..4104].copy_from_slice(&crc.to_le_bytes());
    }

    fn region(img: &Vec<u8>) -> Region<'_> {
        Region { dev: img, offset: 0, size: img.len() as u64 }
    }

    #[test]
    fn crc64_check_value() {
        // CRC-64/WE's check value for "123456789".
        assert_eq!(crc64(b"123456789"), 0x62ec_59e3_f1a4_f00a);
    }

    #[test]
    fn backing_data_area_holds_the_next_layer() {
        let mut img = vec![0u8; 1 << 20];
        backing(&mut img, 4, 17, 8);
        let layers = walk(&img, 0, 1 << 20);
        let [bcache] = &layers[..] else { panic!("{layers:?}") };
        assert_eq!(
            (bcache.name, bcache.offset_bytes, bcache.unit_bytes),
            ("bcache", 17 * 512, Some(4096))
        );
        assert_eq!(bcache.size_bytes, Some((1 << 20) - 17 * 512));
        assert!(matches!(&bcache.details, Details::Bcache { device: "backing", set_uuid, .. }
            if set_uuid == "22222222-2222-2222-2222-222222222222"));
        // Version 1 has no data_offset field: 16 sectors whatever it holds.
        backing(&mut img, 1, 99, 1);
        assert_eq!(
            parse(&present(&region(&img)).expect("present")).expect("parse").data_offset_bytes,
            8192
        );
    }

    #[test]
    fn corrupt_superblocks() {
        let mut img = vec![0u8; 1 << 20];
        backing(&mut img, 4, 16, 1);
        assert!(present(&region(&img)).is_some());
        // A flipped bit: the checksum no longer holds, not bcache.
        img[4096 + 100] ^= 1;
        assert!(present(&region(&img)).is_none());
        for (version, offset, block, why) in [
            (9, 16, 1, "unknown superblock version 9"),
            (4, 8, 1, "a data offset of 8 sectors, inside the superblock"),
            (4, 16, 0, "a block size of 0 sectors"),
            (4, 16, 3, "a block size of 1536 bytes, not a power of two"),
            (4, u64::MAX, 1, "a data offset of 18446744073709551615 sectors"),
        ] {
            backing(&mut img, version, offset, block);
            let sb = present(&region(&img)).expect("sealed");
            assert_eq!(parse(&sb), Err(why.to_string()));
            let layers = walk(&img, 0, 1 << 20);
            assert_eq!(layers[0].note.as_deref(), Some(why), "{layers:?}");
        }
        // A data offset past the device's end: a leaf, said so.
        backing(&mut img, 4, 4096, 1);
        let layers = walk(&img, 0, 1 << 20);
        assert_eq!(layers.len(), 1);
        assert_eq!(
            layers[0].note.as_deref(),
            Some("its data offset lies past the end of the device")
        );
        // Cut short: the superblock's 4 KiB must lie in the region.
        assert!(present(&Region { dev: &img, offset: 0, size: 8191 }).is_none());
        assert!(parse(&img[4096..4200]).is_err());
        // More journal keys than d[] holds.
        img[4096 + 206..4096 + 208].copy_from_slice(&257u16.to_le_bytes());
        assert!(present(&region(&img)).is_none());
    }

    proptest::proptest! {
        /// Random superblocks that pass the checks before the fields (the
        /// magic, the sector, the checksum), in regions of any size.
        #[test]
        fn sealed_random_superblocks_never_panic(
            sb in proptest::collection::vec(proptest::prelude::any::<u8>(), 4096),
            keys in 0u16..300,
            size in 0u64..1 << 20,
        ) {
            let mut img = vec![0u8; 8192];
            img[4096..].copy_from_slice(&sb);
            img[4096 + 8..4096 + 16].copy_from_slice(&8u64.to_le_bytes());
            img[4096 + 24..4096 + 40].copy_from_slice(&MAGIC);
            img[4096 + 206..4096 + 208].copy_from_slice(&keys.to_le_bytes());
            seal(&mut img);
            img.resize(1 << 20, 0);
            let _ = walk(&img, 0, size);
            if let Some(sb) = present(&region(&img)) {
                let _ = parse(&sb);
            }
        }
    }

    #[test]
    fn cache_device_is_a_leaf() {
        let mut img = vec![0u8; 1 << 20];
        backing(&mut img, 3, 0, 8);
        img[4096 + 184..4096 + 192].copy_from_slice(&100u64.to_le_bytes());
        img[4096 + 204..4096 + 206].copy_from_slice(&1u16.to_le_bytes());
        seal(&mut img);
        let layers = walk(&img, 0, 1 << 20);
        let [cache] = &layers[..] else { panic!("{layers:?}") };
        assert_eq!(
            (cache.offset_bytes, cache.unit_bytes, cache.size_bytes),
            (1 << 19, Some(1 << 19), Some(100 << 19))
        );
        // Large buckets: a power of two (version 5), or a high half.
        img[4096 + 16] = 5;
        img[4096 + 128] = 2;
        img[4096 + 194..4096 + 196].copy_from_slice(&12u16.to_le_bytes());
        assert_eq!(bucket_sectors(&img[4096..], 5), Some(4096));
        img[4096 + 128] = 1;
        img[4096 + 2256..4096 + 2260].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(bucket_sectors(&img[4096..], 5), Some(2 << 16 | 12));
        img[4096 + 128] = 2;
        img[4096 + 194] = 16;
        assert_eq!(bucket_sectors(&img[4096..], 5), None);
    }
}
