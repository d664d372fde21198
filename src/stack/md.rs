//! md RAID member superblocks (0.90, 1.0, 1.1, 1.2): where the member's
//! data starts, the chunk, level and slot, and whether the array's first
//! bytes (where the next layer's header is) lie on this member.

use super::layers::{Details, Found, Layer};
use super::region::{Contents, Region};
use super::signature::{md_superblock, MD_MAGIC};
use crate::io::be_u32;
use crate::io::{le_u16, le_u32, le_u64};

const LINEAR: i32 = -1;
/// raid5/6 layouts that put the first data chunk on the member in slot 0.
const LEFT_ASYMMETRIC: u32 = 0;
const LEFT_SYMMETRIC: u32 = 2;

/// The fields of either superblock format that the layer needs.
struct Member {
    version: &'static str,
    level: i32,
    layout: u32,
    raid_disks: u32,
    role: Option<u32>,
    chunk_bytes: u64,
    data_offset: u64,
    data_size: Option<u64>,
}

pub(crate) fn found(region: &Region, contents: &Contents) -> Found {
    let plain = || Found::leaf(Layer::new(contents, 0, Details::None {}));
    let Some(first) = region.bytes(0, 512) else { return plain() };
    let Some((at, version, _)) = md_superblock(region, &first) else { return plain() };
    let member = if version == "0.90" { v090(region, at) } else { v1(region, at, version) };
    let Some(m) = member else {
        return Found::leaf(Layer::new(contents, 0, Details::None {}).note("superblock cut short"));
    };
    let striped = matches!(m.level, 0 | 4 | 5 | 6 | 10);
    let details = Details::Md {
        version: m.version,
        level: level_name(m.level),
        layout: m.layout,
        raid_disks: m.raid_disks,
        role: m.role,
        chunk_bytes: m.chunk_bytes,
        data_offset_bytes: m.data_offset,
    };
    let layer = Layer::new(contents, m.data_offset, details)
        .size(m.data_size)
        .unit(striped.then_some(m.chunk_bytes));
    let inner = holds_array_start(&m).then(|| {
        let whole = m.data_size.unwrap_or(region.size.saturating_sub(m.data_offset));
        if striped {
            whole.min(m.chunk_bytes)
        } else {
            whole
        }
    });
    let layer = match inner {
        None => layer.note(format!(
            "the array's first bytes are on another member: the layers above are not followed \
             from {} slot {}",
            level_name(m.level),
            m.role.map_or("spare".into(), |r| r.to_string())
        )),
        Some(_) if striped => layer.note("striped: only the array's first chunk is looked into"),
        Some(_) => layer,
    };
    Found { layer, inner }
}

/// Whether this member holds the array's first chunk: every mirror does;
/// in linear and striped arrays the member in slot 0 does, unless parity
/// rotates onto it first (raid6, right-hand raid5 layouts).
fn holds_array_start(m: &Member) -> bool {
    match m.level {
        1 => true,
        LINEAR | 0 | 10 | 4 => m.role == Some(0),
        5 => m.role == Some(0) && matches!(m.layout, LEFT_ASYMMETRIC | LEFT_SYMMETRIC),
        _ => false,
    }
}

fn level_name(level: i32) -> String {
    match level {
        LINEAR => "linear".into(),
        -4 => "multipath".into(),
        -5 => "faulty".into(),
        n => format!("raid{n}"),
    }
}

/// A 0.90 superblock: 4 KiB of 32-bit words in its host's byte order;
/// data from the member's start.
fn v090(region: &Region, at: u64) -> Option<Member> {
    let sb = region.bytes(at, 4096)?;
    let read = if le_u32(&sb, 0) == Some(MD_MAGIC) { le_u32 } else { be_u32 };
    let word = |i: usize| read(&sb, i * 4);
    // this_disk (word 992) holds number, major, minor, raid_disk, state.
    let role = word(995)?;
    Some(Member {
        version: "0.90",
        level: word(7)? as i32,
        layout: word(64)?,
        raid_disks: word(10)?,
        role: Some(role),
        chunk_bytes: u64::from(word(65)?),
        data_offset: 0,
        data_size: u64::from(word(8)?).checked_mul(1024),
    })
}

/// A 1.x superblock: little-endian, sizes in 512-byte sectors; the slot
/// comes from `dev_roles[dev_number]`.
fn v1(region: &Region, at: u64, version: &'static str) -> Option<Member> {
    let sb = region.bytes(at, 1024)?;
    let sectors = |at: usize| le_u64(&sb, at).and_then(|s| s.checked_mul(512));
    let dev_number = usize::try_from(le_u32(&sb, 160)?).ok()?;
    let role_at = dev_number.checked_mul(2).and_then(|o| o.checked_add(256));
    let role = role_at.and_then(|o| le_u16(&sb, o));
    Some(Member {
        version,
        level: le_u32(&sb, 72)? as i32,
        layout: le_u32(&sb, 76)?,
        raid_disks: le_u32(&sb, 92)?,
        // 0xffff: spare; 0xfffe: faulty.
        role: role.filter(|&r| r < 0xfffe).map(u32::from),
        chunk_bytes: u64::from(le_u32(&sb, 88)?).checked_mul(512)?,
        data_offset: sectors(128)?,
        data_size: sectors(136),
    })
}
