//! Amiga Rigid SchemeDisk Blocks, read as Linux's block/partitions/amiga.c reads
//! them: the RDB in one of the first 16 blocks of 512 bytes (the first
//! whose longs sum to 0), then its list of partition blocks linked by
//! pb_Next (at most 16 visited), each partition's place computed from its
//! DosEnvec in blocks of rdb_BlockBytes. Big-endian. Linux counts 512-byte
//! units whatever the disk's logical sector.

use super::common::{in_logical_sectors, read_bytes};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::io::{be_u32, ReadAt};

/// "RDSK" and "PART".
const RDSK: u32 = 0x5244_534B;
const PART: u32 = 0x5041_5254;
/// Linux looks for the RDB in blocks 0..RDB_ALLOCATION_LIMIT.
pub(crate) const RDB_ALLOCATION_LIMIT: u64 = 16;
/// Linux visits at most this many partition blocks.
pub(crate) const MAX_BLOCKS: u32 = 16;
const BLOCK: usize = 512;
/// Offsets in the RDB of rdb_SummedLongs, rdb_BlockBytes,
/// rdb_PartitionList and rdb_CylBlocks.
const SUMMED_AT: usize = 4;
const BLOCK_BYTES_AT: usize = 16;
const LIST_AT: usize = 28;
const CYL_BLOCKS_AT: usize = 144;
/// The long Windows may trash, which Linux zeroes for a second try.
const TRASHED_AT: usize = 0xDC;
/// Offsets in a partition block of pb_Next, pb_DriveName and the DosEnvec
/// longs Linux reads (de_Surfaces, de_BlocksPerTrack, de_LowCyl,
/// de_HighCyl, de_DosType).
const NEXT_AT: usize = 16;
const NAME_AT: usize = 36;
const ENV_AT: usize = 128;
const SURFACES: usize = 3;
const BLOCKS_PER_TRACK: usize = 5;
const LOW_CYL: usize = 9;
const HIGH_CYL: usize = 10;
const DOS_TYPE: usize = 16;

/// The wrapping sum of a block's first `SummedLongs & 0x7F` longs, as
/// Linux checks it (0 when it holds).
fn sum_of(block: &[u8]) -> u32 {
    let longs = be_u32(block, SUMMED_AT).unwrap_or(0) & 0x7F;
    (0..longs as usize).fold(0u32, |sum, i| sum.wrapping_add(be_u32(block, i * 4).unwrap_or(0)))
}

/// The RDB Linux uses: its block number and bytes (with the trashed long
/// zeroed when that is what made it valid); problems for the ones skipped.
/// None when there is no RDB, or none whose checksum holds.
fn find_rdb(
    dev: &dyn ReadAt,
    problems: &mut Vec<Problem>,
) -> Result<Option<(u64, Vec<u8>)>, TableError> {
    let mut bad = Vec::new();
    for blk in 0..RDB_ALLOCATION_LIMIT {
        // Linux gives up at a block it cannot read (a device this short).
        let Some(mut block) = read_bytes(dev, blk * BLOCK as u64, BLOCK)? else { break };
        if be_u32(&block, 0) != Some(RDSK) {
            continue;
        }
        if sum_of(&block) == 0 {
            problems.extend(bad_rdbs(&bad, blk));
            return Ok(Some((blk, block)));
        }
        if let Some(word) = block.get_mut(TRASHED_AT..TRASHED_AT + 4) {
            word.fill(0);
        }
        if sum_of(&block) == 0 {
            problems.extend(bad_rdbs(&bad, blk));
            problems.push(Problem::new(
                "rdb_trashed_word",
                format!(
                    "the RDB in block {blk} checks only with bytes 0xdc..0xdf taken as zero \
                     (as Windows may trash them): Linux accepts it, AmigaOS may not"
                ),
            ));
            return Ok(Some((blk, block)));
        }
        bad.push(blk);
    }
    if !bad.is_empty() {
        problems.push(Problem::new(
            "label_bad_checksum",
            format!(
                "the Amiga RDB in block(s) {} fails its checksum: Linux ignores it and sees no \
                 partitions",
                list(&bad)
            ),
        ));
    }
    Ok(None)
}

/// A note for RDB copies with bad checksums before the one used.
fn bad_rdbs(bad: &[u64], used: u64) -> Option<Problem> {
    (!bad.is_empty()).then(|| {
        Problem::new(
            "rdb_bad_copy",
            format!(
                "an RDB in block(s) {} fails its checksum: Linux skips it and uses the one in \
                 block {used}",
                list(bad)
            ),
        )
    })
}

fn list(blocks: &[u64]) -> String {
    blocks.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// The Amiga Rigid SchemeDisk Block.
pub struct Amiga;

impl Scheme for Amiga {
    fn name(&self) -> &'static str {
        "amiga"
    }

    /// Linux's amiga.c gives way to the parsers after it when it makes no
    /// partition (an RDB without any, or one it cannot follow): `Empty`.
    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        Ok(match read_into(disk.dev, layout)? {
            false => Found::No,
            true if layout.partitions.is_empty() => Found::Empty,
            true => Found::Table,
        })
    }
}

/// Fill `layout` when the disk holds an Amiga RDB (one whose checksum
/// holds, or an "RDSK" block whose checksum fails); false when it does
/// not. Partitions are those Linux makes, numbered as it numbers them.
fn read_into(dev: &dyn ReadAt, layout: &mut Layout) -> Result<bool, TableError> {
    let mut problems = Vec::new();
    let found = find_rdb(dev, &mut problems)?;
    let Some((_, rdb)) = found else {
        if problems.is_empty() {
            return Ok(false);
        }
        layout.label = Label::Amiga;
        layout.problems.extend(problems);
        return Ok(true);
    };
    layout.label = Label::Amiga;
    layout.problems.extend(problems);
    let block_bytes = be_u32(&rdb, BLOCK_BYTES_AT).unwrap_or(0);
    // Blocks of 512-byte units, rounded down as Linux divides.
    let blksize = u64::from(block_bytes / 512);
    if block_bytes % 512 != 0 || blksize == 0 {
        layout.problems.push(Problem::new(
            "rdb_block_size",
            format!(
                "the RDB gives blocks of {block_bytes} bytes: Linux counts {blksize} units of \
                 512 bytes to a block"
            ),
        ));
    }
    let cyl_blocks = be_u32(&rdb, CYL_BLOCKS_AT).unwrap_or(0);
    let list_head = be_u32(&rdb, LIST_AT).unwrap_or(u32::MAX);
    let mut walk = Walk { blksize, cyl_blocks, found: Vec::new(), slot: 1 };
    if walk.partitions(dev, list_head, layout)? {
        for p in walk.found {
            let p = in_logical_sectors(p, layout);
            layout.partitions.extend(p);
        }
    }
    Ok(true)
}

/// The walk of the partition list.
struct Walk {
    /// 512-byte units to a block.
    blksize: u64,
    cyl_blocks: u32,
    /// In 512-byte units.
    found: Vec<Partition>,
    /// The number of the next partition Linux makes.
    slot: u32,
}

impl Walk {
    /// Follow the list from block `first`; false when a block cannot be
    /// read, where Linux drops every partition of the RDB.
    fn partitions(
        &mut self,
        dev: &dyn ReadAt,
        first: u32,
        layout: &mut Layout,
    ) -> Result<bool, TableError> {
        let mut blk = first;
        let mut seen = Vec::new();
        let mut visited = 0u32;
        // pb_Next ends the list at 0 or any value negative as an s32.
        while (blk as i32) > 0 {
            if visited == MAX_BLOCKS {
                layout.problems.push(Problem::new(
                    "rdb_chain_too_long",
                    format!(
                        "the RDB's partition list goes on past {MAX_BLOCKS} blocks (next {blk}): \
                         Linux reads no further"
                    ),
                ));
                break;
            }
            visited += 1;
            if seen.contains(&blk) {
                if !layout.problems.iter().any(|p| p.code == "rdb_loop") {
                    layout.problems.push(Problem::new(
                        "rdb_loop",
                        format!(
                            "the RDB's partition list comes back to block {blk}: Linux reads \
                             it again, up to {MAX_BLOCKS} blocks, and makes its partitions twice"
                        ),
                    ));
                }
            } else {
                seen.push(blk);
            }
            let units = u64::from(blk) * self.blksize; // < 2^64: u32 × u32
            let at = units.checked_mul(BLOCK as u64);
            let Some(block) = at.map(|at| read_bytes(dev, at, BLOCK)).transpose()?.flatten() else {
                layout.problems.push(Problem::new(
                    "rdb_unreadable",
                    format!(
                        "the RDB's partition block {blk} (512-byte unit {units}) lies past the \
                         end of the device: Linux makes no partition of this RDB"
                    ),
                ));
                return Ok(false);
            };
            blk = be_u32(&block, NEXT_AT).unwrap_or(0);
            if be_u32(&block, 0) != Some(PART) || sum_of(&block) != 0 {
                let why = if be_u32(&block, 0) == Some(PART) {
                    "fails its checksum"
                } else {
                    "is not a partition block (no \"PART\")"
                };
                layout.problems.push(Problem::new(
                    "rdb_partition_skipped",
                    format!("the RDB's list block at unit {units} {why}: Linux skips it"),
                ));
                continue;
            }
            self.partition(&block, units, layout);
        }
        Ok(true)
    }

    /// The partition a valid partition block describes, as Linux computes
    /// it; skipped ones are reported.
    fn partition(&mut self, block: &[u8], units: u64, layout: &mut Layout) {
        let env = |i: usize| be_u32(block, ENV_AT + i * 4).unwrap_or(0);
        let skip = |layout: &mut Layout, code: &'static str, why: String| {
            let msg = format!("the partition block at unit {units} {why}: Linux skips it");
            layout.problems.push(Problem::new(code, msg));
        };
        let (heads, sectors) = (env(SURFACES), env(BLOCKS_PER_TRACK));
        let Some(cylblk) = heads.checked_mul(sectors) else {
            let why = format!("has {heads} heads × {sectors} blocks a track, past 32 bits");
            return skip(layout, "rdb_geometry_overflow", why);
        };
        if cylblk > self.cyl_blocks {
            layout.problems.push(Problem::new(
                "rdb_cylinder_mismatch",
                format!(
                    "the partition block at unit {units} has cylinders of {cylblk} blocks, \
                     the RDB's of {}",
                    self.cyl_blocks
                ),
            ));
        }
        let Some(cyl_units) =
            u32::try_from(self.blksize).ok().and_then(|b| cylblk.checked_mul(b)).map(u64::from)
        else {
            let why = format!("has cylinders of {cylblk} blocks, past 32 bits in 512-byte units");
            return skip(layout, "rdb_geometry_overflow", why);
        };
        let (low, high) = (u64::from(env(LOW_CYL)), u64::from(env(HIGH_CYL)));
        if cyl_units == 0 {
            return; // no blocks: Linux makes nothing, silently
        }
        if high < low {
            if high + 1 < low {
                let why = format!("ends at cylinder {high}, before its start at {low}");
                skip(layout, "rdb_partition_inverted", why);
            }
            return;
        }
        // Below 2^64: cylinders < 2^32, units a cylinder < 2^32.
        let (start, size) = (low * cyl_units, (high - low + 1) * cyl_units);
        if size == 0 {
            return;
        }
        let number = self.slot;
        self.slot += 1;
        self.found.push(Partition {
            number,
            start,
            size,
            kind: PartKind::Amiga,
            type_id: dos_type(env(DOS_TYPE)),
            name: drive_name(block),
            ebr: None,
        });
    }
}

/// de_DosType as Linux prints it: "DOS^C" for DOS\3.
fn dos_type(raw: u32) -> String {
    let [a, b, c, d] = raw.to_be_bytes();
    let shown = |x: u8| if x.is_ascii_graphic() || x == b' ' { char::from(x) } else { '?' };
    let mut out: String = [a, b, c].into_iter().map(shown).collect();
    if d < b' ' {
        out.push('^');
        out.push(char::from(d + b'@'));
    } else {
        out.push(shown(d));
    }
    out
}

/// pb_DriveName, a BCPL string (length byte first), when not empty.
fn drive_name(block: &[u8]) -> Option<String> {
    let len = usize::from(*block.get(NAME_AT)?).min(31);
    let bytes = block.get(NAME_AT + 1..NAME_AT + 1 + len)?;
    let name = String::from_utf8_lossy(bytes).into_owned();
    (!name.is_empty()).then_some(name)
}

/// Hand-built RDBs for tests and fuzzing seeds. Test fixtures only.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    fn put(img: &mut [u8], at: usize, v: u32) {
        img[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Recompute the checksum of the block at byte `at` (64 longs summed).
    pub(crate) fn seal(img: &mut [u8], at: usize) {
        put(img, at + 8, 0);
        let sum = sum_of(&img[at..at + BLOCK]);
        put(img, at + 8, 0u32.wrapping_sub(sum));
    }

    /// A disk of `units` 512-byte units with an RDB in block `rdb` of
    /// `block_bytes`-byte blocks, cylinders of `heads` × `sectors` blocks,
    /// and partition blocks at the given block numbers (each entry: its
    /// block, low and high cylinder), linked in that order.
    pub(crate) fn rdb_image(
        units: usize,
        rdb: usize,
        block_bytes: u32,
        (heads, sectors): (u32, u32),
        parts: &[(u32, u32, u32)],
    ) -> Vec<u8> {
        let mut img = vec![0u8; units * BLOCK];
        let at = rdb * BLOCK;
        put(&mut img, at, RDSK);
        put(&mut img, at + SUMMED_AT, 64);
        put(&mut img, at + BLOCK_BYTES_AT, block_bytes);
        put(&mut img, at + LIST_AT, parts.first().map_or(u32::MAX, |p| p.0));
        put(&mut img, at + CYL_BLOCKS_AT, heads.wrapping_mul(sectors));
        seal(&mut img, at);
        for (i, &(blk, low, high)) in parts.iter().enumerate() {
            let at = blk as usize * block_bytes as usize;
            put(&mut img, at, PART);
            put(&mut img, at + SUMMED_AT, 64);
            put(&mut img, at + NEXT_AT, parts.get(i + 1).map_or(u32::MAX, |p| p.0));
            img[at + NAME_AT..at + NAME_AT + 4].copy_from_slice(b"\x03DH0");
            img[at + NAME_AT + 3] = b'0' + i as u8;
            put(&mut img, at + ENV_AT + SURFACES * 4, heads);
            put(&mut img, at + ENV_AT + BLOCKS_PER_TRACK * 4, sectors);
            put(&mut img, at + ENV_AT + LOW_CYL * 4, low);
            put(&mut img, at + ENV_AT + HIGH_CYL * 4, high);
            put(&mut img, at + ENV_AT + DOS_TYPE * 4, 0x444F_5303);
            seal(&mut img, at);
        }
        img
    }

    /// Point the block at byte `at`'s pb_Next at `next`, and reseal it.
    pub fn link(img: &mut [u8], at: usize, next: u32) {
        put(img, at + NEXT_AT, next);
        seal(img, at);
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use crate::table::common::test_support::{read_alone, read_mutated};
    use crate::table::{read, Label, Layout};
    use proptest::prelude::*;

    fn amiga(img: &[u8], ss: u64) -> Layout {
        read_alone(super::read_into, img, ss, Label::Amiga)
    }

    fn got(layout: &Layout) -> Vec<(u32, u64, u64)> {
        layout.partitions.iter().map(|p| (p.number, p.start, p.size)).collect()
    }

    fn codes(layout: &Layout) -> Vec<&'static str> {
        layout.problems.iter().map(|p| p.code).collect()
    }

    #[test]
    fn partitions_from_cylinders() {
        // Cylinders of 2 heads × 32 blocks = 64 units; partition 1 on
        // cylinders 2-17, partition 2 on 18-63.
        let img = rdb_image(4096, 0, 512, (2, 32), &[(1, 2, 17), (2, 18, 63)]);
        let layout = amiga(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(got(&layout), [(1, 128, 1024), (2, 1152, 2944)]);
        assert_eq!(layout.partitions[0].type_id, "DOS^C");
        assert_eq!(layout.partitions[1].name.as_deref(), Some("DH1"));
        let whole = read(&img, 512, img.len() as u64).unwrap();
        assert_eq!((whole.label, got(&whole)), (Label::Amiga, got(&layout)));
    }

    #[test]
    fn rdb_found_in_a_later_block_and_bad_copies_skipped() {
        let mut img = rdb_image(4096, 3, 512, (2, 32), &[(4, 2, 17)]);
        assert_eq!(got(&amiga(&img, 512)), [(1, 128, 1024)]);
        // A bad RDB in block 1 is skipped; the one in block 3 is used.
        img.copy_within(3 * 512..4 * 512, 512);
        img[512 + 40] ^= 1;
        let layout = amiga(&img, 512);
        assert_eq!((got(&layout), codes(&layout)), (vec![(1, 128, 1024)], vec!["rdb_bad_copy"]));
        // Past block 15 Linux does not look.
        let img = rdb_image(4096, 16, 512, (2, 32), &[(17, 2, 17)]);
        assert_ne!(read(&img, 512, img.len() as u64).unwrap().label, Label::Amiga);
    }

    #[test]
    fn bad_checksum() {
        let mut img = rdb_image(4096, 0, 512, (2, 32), &[(1, 2, 17)]);
        img[100] ^= 1;
        let layout = amiga(&img, 512);
        assert!(layout.partitions.is_empty());
        assert_eq!(codes(&layout), ["label_bad_checksum"]);
        // The trashed long at 0xdc: Linux zeroes it and tries again.
        let mut img = rdb_image(4096, 0, 512, (2, 32), &[(1, 2, 17)]);
        img[0xDC] = 0x55;
        let layout = amiga(&img, 512);
        assert_eq!(
            (got(&layout), codes(&layout)),
            (vec![(1, 128, 1024)], vec!["rdb_trashed_word"])
        );
        // A partition block whose checksum fails is skipped, and takes no number.
        let mut img = rdb_image(4096, 0, 512, (2, 32), &[(1, 2, 17), (2, 18, 20), (3, 30, 40)]);
        img[2 * 512 + 200] ^= 1;
        let layout = amiga(&img, 512);
        assert_eq!(got(&layout), [(1, 128, 1024), (2, 1920, 704)]);
        assert_eq!(codes(&layout), ["rdb_partition_skipped"]);
    }

    #[test]
    fn loop_in_the_list() {
        // 1 -> 2 -> 1 -> ...: Linux visits 16 blocks and makes 16 partitions.
        let mut img = rdb_image(4096, 0, 512, (2, 32), &[(1, 2, 17), (2, 18, 20)]);
        link(&mut img, 2 * 512, 1);
        let layout = amiga(&img, 512);
        assert_eq!(layout.partitions.len(), 16);
        assert_eq!(layout.partitions[2].start, layout.partitions[0].start);
        assert_eq!(codes(&layout), ["rdb_loop", "rdb_chain_too_long"]);
        let whole = read(&img, 512, img.len() as u64).unwrap();
        assert!(whole.problems.iter().any(|p| p.code == "overlap"));
    }

    #[test]
    fn partition_past_the_end() {
        // The partition ends past the disk: kept (the kernel cuts it).
        let img = rdb_image(2048, 0, 512, (2, 32), &[(1, 2, 63)]);
        let whole = read(&img, 512, img.len() as u64).unwrap();
        assert_eq!(got(&whole), [(1, 128, 3968)]);
        assert_eq!(codes(&whole), ["beyond_end"]);
        // A partition block past the end: Linux makes none of them.
        let mut img = rdb_image(2048, 0, 512, (2, 32), &[(1, 2, 17)]);
        link(&mut img, 512, 5000);
        let layout = amiga(&img, 512);
        assert!(layout.partitions.is_empty());
        assert_eq!(codes(&layout), ["rdb_unreadable"]);
    }

    #[test]
    fn geometry_edge_cases() {
        // Inverted cylinders, zero heads, overflowing heads × sectors.
        let img = rdb_image(4096, 0, 512, (2, 32), &[(1, 20, 10)]);
        assert_eq!(codes(&amiga(&img, 512)), ["rdb_partition_inverted"]);
        let img = rdb_image(4096, 0, 512, (0, 32), &[(1, 2, 10)]);
        assert!(amiga(&img, 512).partitions.is_empty());
        let img = rdb_image(4096, 0, 512, (0x10000, 0x10000), &[(1, 2, 10)]);
        assert!(codes(&amiga(&img, 512)).contains(&"rdb_geometry_overflow"));
    }

    #[test]
    fn blocks_of_1024_and_4096_byte_logical_sectors() {
        // Blocks of 1024 bytes: partition blocks at block 2 (byte 2048),
        // cylinders of 64 blocks = 128 units.
        let img = rdb_image(8192, 0, 1024, (2, 32), &[(2, 2, 9)]);
        assert_eq!(got(&amiga(&img, 512)), [(1, 256, 1024)]);
        // Read on a 4096-byte disk: units of 512 bytes become sectors of 4096.
        assert_eq!(got(&amiga(&img, 4096)), [(1, 32, 128)]);
        // A start inside a 4096-byte sector.
        let img = rdb_image(8192, 0, 512, (1, 9), &[(1, 1, 100)]);
        let layout = amiga(&img, 4096);
        assert_eq!(codes(&layout), ["start_not_whole_sector"]);
    }

    proptest! {
        #[test]
        fn mutated_rdbs_never_panic(
            muts in proptest::collection::vec((0usize..2048, any::<u8>()), 1..12),
            reseal in any::<bool>(),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let img = rdb_image(64, 0, 512, (2, 4), &[(1, 1, 3), (2, 4, 7), (3, 1, 7)]);
            let seal_all = |img: &mut [u8]| (0..4).for_each(|b| seal(img, b * 512));
            read_mutated(img, &muts, reseal.then_some(&seal_all as &dyn Fn(&mut [u8])), ss);
        }
    }
}
