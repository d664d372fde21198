//! Apple partition maps, read as Linux's block/partitions/mac.c reads them:
//! the driver descriptor in sector 0 gives the map's block size, the map's
//! entries fill blocks 1 to N, and Linux numbers them in that order.

use super::common::{in_logical_sectors, libblkid_differs, read_bytes};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::io::ReadAt;
use crate::io::{be_u16, be_u32};

const DRIVER_MAGIC: u16 = 0x4552; // "ER"
const ENTRY_MAGIC: u16 = 0x504D; // "PM"
/// The bytes of an entry Linux reads.
const ENTRY_SIZE: usize = 136;
/// Linux ignores a map claiming this many entries or more (DISK_MAX_PARTS).
const MAX_ENTRIES: u32 = 256;
/// Types of entries that hold no data: the map itself and free space.
pub(crate) const NO_DATA: [&str; 3] = ["Apple_partition_map", "Apple_Free", "Apple_Void"];

/// The Apple partition map.
pub(crate) struct Apm;

impl Scheme for Apm {
    fn name(&self) -> &'static str {
        "mac"
    }

    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        Ok(if read_into(disk.dev, layout)? { Found::Table } else { Found::No })
    }

    fn holds_no_data(&self, p: &Partition) -> bool {
        p.kind == PartKind::Mac && NO_DATA.contains(&p.type_id.as_str())
    }
}

/// Fill `layout` when the disk holds an Apple partition map; false when
/// it does not. A map Linux ignores is reported with no partitions.
fn read_into(dev: &dyn ReadAt, layout: &mut Layout) -> Result<bool, TableError> {
    let Some(descriptor) = read_bytes(dev, 0, 512)? else { return Ok(false) };
    if be_u16(&descriptor, 0) != Some(DRIVER_MAGIC) {
        return Ok(false);
    }
    let block = u64::from(be_u16(&descriptor, 2).unwrap_or(0));
    let Some(first) = entry(dev, block, 1)? else { return Ok(false) };
    layout.label = Label::Mac;
    let count = be_u32(&first, 4).unwrap_or(0);
    if block < 512 || count >= MAX_ENTRIES {
        let msg = format!(
            "the Apple partition map has blocks of {block} bytes and claims {count} entries: \
             Linux ignores it and sees no partitions"
        );
        layout.problems.push(Problem::new("label_ignored_by_linux", msg));
        return Ok(true);
    }
    let mut found = Vec::new();
    for slot in 1..=count {
        let Some(raw) = entry(dev, block, slot)? else {
            let why = format!(
                "entry {slot} of the {count} the map claims has no signature: Linux stops \
                 there, libblkid drops the whole map"
            );
            layout.problems.extend(libblkid_differs("Apple", &found, &[], &why));
            break;
        };
        found.extend(partition(&raw, slot, block / 512, layout));
    }
    layout.partitions.extend(found);
    Ok(true)
}

/// Entry `slot` of the map (at byte slot × block), or None without its
/// signature or past the end of the device.
fn entry(dev: &dyn ReadAt, block: u64, slot: u32) -> Result<Option<Vec<u8>>, TableError> {
    let raw = read_bytes(dev, block.saturating_mul(u64::from(slot)), ENTRY_SIZE)?;
    Ok(raw.filter(|raw| be_u16(raw, 0) == Some(ENTRY_MAGIC)))
}

/// The partition an entry describes, its blocks counted as Linux counts
/// them (whole 512-byte units a block); None when it is empty.
fn partition(raw: &[u8], number: u32, units: u64, layout: &mut Layout) -> Option<Partition> {
    let size = u64::from(be_u32(raw, 12)?) * units;
    if size == 0 {
        return None;
    }
    let text = |range: std::ops::Range<usize>| {
        let bytes = raw.get(range).unwrap_or_default();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    };
    let name = text(16..48);
    let p = Partition {
        number,
        start: u64::from(be_u32(raw, 8)?) * units,
        size,
        kind: PartKind::Mac,
        type_id: text(48..80),
        name: (!name.is_empty()).then_some(name),
        ebr: None,
    };
    in_logical_sectors(p, layout)
}

/// Hand-built maps for tests. Test fixtures only, not a table writer.
#[cfg(test)]
pub(crate) mod fixtures {
    /// A disk of `sectors` 512-byte sectors holding a map of `block`-byte
    /// blocks: the map entry itself, then (start, count, type) entries.
    pub(crate) fn apm_image(sectors: usize, block: u16, parts: &[(u32, u32, &str)]) -> Vec<u8> {
        let mut img = vec![0u8; sectors * 512];
        img[..2].copy_from_slice(b"ER");
        img[2..4].copy_from_slice(&block.to_be_bytes());
        let map = [(1, 63, "Apple_partition_map")];
        let count = u32::try_from(parts.len() + 1).unwrap();
        for (slot, (start, size, kind)) in map.iter().chain(parts).enumerate() {
            let at = (slot + 1) * usize::from(block);
            img[at..at + 2].copy_from_slice(b"PM");
            img[at + 4..at + 8].copy_from_slice(&count.to_be_bytes());
            img[at + 8..at + 12].copy_from_slice(&start.to_be_bytes());
            img[at + 12..at + 16].copy_from_slice(&size.to_be_bytes());
            img[at + 16..at + 20].copy_from_slice(b"part");
            img[at + 48..at + 48 + kind.len()].copy_from_slice(kind.as_bytes());
        }
        img
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use crate::table::common::test_support::read_mutated;
    use crate::table::{read, Label, Layout};
    use proptest::prelude::*;

    fn read_img(img: &[u8], ss: u64) -> Layout {
        read(&img.to_vec(), ss, img.len() as u64).unwrap()
    }

    fn got(layout: &Layout) -> Vec<(u32, u64, u64, &str)> {
        layout.partitions.iter().map(|p| (p.number, p.start, p.size, p.type_id.as_str())).collect()
    }

    #[test]
    fn entries_in_map_order() {
        let img = apm_image(4096, 512, &[(2048, 1024, "Apple_HFS"), (64, 1984, "Apple_Free")]);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mac);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(
            got(&layout),
            [
                (1, 1, 63, "Apple_partition_map"),
                (2, 2048, 1024, "Apple_HFS"),
                (3, 64, 1984, "Apple_Free")
            ]
        );
        assert_eq!(layout.partitions[1].name.as_deref(), Some("part"));
    }

    #[test]
    fn blocks_of_2048_bytes() {
        let img = apm_image(4096, 2048, &[(256, 128, "Apple_HFS")]);
        assert_eq!(got(&read_img(&img, 512))[1], (2, 1024, 512, "Apple_HFS"));
        assert_eq!(got(&read_img(&img, 4096))[1], (2, 128, 64, "Apple_HFS"));
    }

    #[test]
    fn missing_entry_stops_the_map() {
        let mut img = apm_image(4096, 512, &[(2048, 1024, "Apple_HFS"), (3072, 8, "Apple_HFS")]);
        img[3 * 512] = 0;
        let layout = read_img(&img, 512);
        assert_eq!(layout.partitions.len(), 2);
        assert_eq!(layout.problems[0].code, "libblkid_differs");
    }

    #[test]
    fn oversized_map_is_ignored_by_linux() {
        let mut img = apm_image(4096, 512, &[]);
        img[512 + 4..512 + 8].copy_from_slice(&300u32.to_be_bytes());
        let layout = read_img(&img, 512);
        assert_eq!((layout.label, layout.partitions.len()), (Label::Mac, 0));
        assert_eq!(layout.problems[0].code, "label_ignored_by_linux");
        // No map entry after the descriptor: not an Apple disk at all.
        img[512] = 0;
        assert_eq!(read_img(&img, 512).label, Label::None);
    }

    proptest! {
        #[test]
        fn mutated_maps_never_panic(
            muts in proptest::collection::vec((0usize..2048, any::<u8>()), 1..12),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let img = apm_image(64, 512, &[(8, 16, "Apple_HFS"), (24, 40, "Apple_Free")]);
            read_mutated(img, &muts, None, ss);
        }
    }
}
