//! LUKS headers: where the encrypted payload starts and its encryption
//! sector. What lies inside is ciphertext, so the walk stops here.

use super::layers::{Details, Found, Layer};
use super::region::{text, Contents, Region};
use crate::io::{be_u16, be_u32, be_u64};

/// LUKS1 counts in 512-byte sectors and always encrypts 512-byte sectors.
const SECTOR: u64 = 512;
const LUKS1_SLOTS: usize = 8;
const SLOT_ACTIVE: u32 = 0x00AC_71F3;
/// LUKS2 binary header; the JSON area follows it, up to `hdr_size`.
const LUKS2_BINARY: u64 = 4096;
const LUKS2_MAX_HEADER: u64 = 4 << 20;

const ENCRYPTED: &str = "encrypted: the layers inside cannot be read from the disk";

pub(crate) fn found(region: &Region, contents: &Contents) -> Found {
    let header = region.bytes(0, 592);
    let version = header.as_deref().and_then(|h| be_u16(h, 6));
    let details = match (header.as_deref(), version) {
        (Some(h), Some(1)) => luks1(h),
        (Some(h), Some(2)) => luks2(region, h),
        _ => None,
    };
    let Some(details) = details else {
        return Found::leaf(
            Layer::new(contents, 0, Details::None {})
                .note("unreadable LUKS header; ".to_string() + ENCRYPTED),
        );
    };
    let (offset, sector) = match &details {
        Details::Luks { payload_offset_bytes, sector_bytes, .. } => {
            (*payload_offset_bytes, *sector_bytes)
        }
        _ => (0, 0),
    };
    let size = region.size.checked_sub(offset);
    Found::leaf(Layer::new(contents, offset, details).unit(Some(sector)).size(size).note(ENCRYPTED))
}

/// LUKS1: big-endian fields; the payload offset in 512-byte sectors.
fn luks1(h: &[u8]) -> Option<Details> {
    let payload = u64::from(be_u32(h, 104)?).checked_mul(SECTOR)?;
    let key_bytes = u64::from(be_u32(h, 108)?);
    // Each active slot: its material's first sector and anti-forensic stripes.
    let slot_end = |i: usize| {
        let at = 208 + i * 48;
        if be_u32(h, at)? != SLOT_ACTIVE {
            return None;
        }
        let start = u64::from(be_u32(h, at + 40)?).checked_mul(SECTOR)?;
        let len = key_bytes.checked_mul(u64::from(be_u32(h, at + 44)?))?;
        start.checked_add(len.checked_next_multiple_of(SECTOR)?)
    };
    let cipher = match (text(h, 8, 32), text(h, 40, 32)) {
        (Some(name), Some(mode)) => Some(format!("{name}-{mode}")),
        (name, _) => name,
    };
    Some(Details::Luks {
        version: 1,
        payload_offset_bytes: payload,
        sector_bytes: SECTOR,
        cipher,
        key_material_end_bytes: (0..LUKS1_SLOTS).filter_map(slot_end).max(),
    })
}

/// LUKS2: the first data segment of the JSON metadata.
fn luks2(region: &Region, h: &[u8]) -> Option<Details> {
    let hdr_size = be_u64(h, 8)?;
    if !(LUKS2_BINARY..=LUKS2_MAX_HEADER).contains(&hdr_size) {
        return None;
    }
    let json = region.bytes(LUKS2_BINARY, usize::try_from(hdr_size - LUKS2_BINARY).ok()?)?;
    let end = json.iter().position(|&b| b == 0).unwrap_or(json.len());
    let meta: serde_json::Value = serde_json::from_slice(json.get(..end)?).ok()?;
    let segments = meta.get("segments")?.as_object()?;
    // Segments are keyed "0", "1", …: the lowest is the first.
    let (_, segment) = segments
        .iter()
        .filter_map(|(k, v)| Some((k.parse::<u64>().ok()?, v)))
        .min_by_key(|(k, _)| *k)?;
    let offset = segment.get("offset")?.as_str()?.parse().ok()?;
    Some(Details::Luks {
        version: 2,
        payload_offset_bytes: offset,
        sector_bytes: segment.get("sector_size").and_then(|s| s.as_u64()).unwrap_or(SECTOR),
        cipher: segment.get("encryption").and_then(|e| e.as_str()).map(str::to_string),
        key_material_end_bytes: None,
    })
}
