//! Sun (SPARC) disk labels, read as Linux's block/partitions/sun.c reads
//! them: eight partitions starting on cylinders, sizes in 512-byte units.

use super::common::{in_logical_sectors, libblkid_differs, read_bytes, VTOC_SANE};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::io::ReadAt;
use crate::io::{be_u16, be_u32};

pub(crate) const MAGIC: u16 = 0xDABE;
/// The type of the entry that covers the whole disk (slice 2 by custom):
/// VTOC tag 5. Linux makes a partition of it; libblkid leaves it out.
pub(crate) const WHOLE_DISK: &str = "0x05";

/// The Sun VTOC label.
pub struct Sun;

impl Scheme for Sun {
    fn name(&self) -> &'static str {
        "sun"
    }

    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        Ok(if read_into(disk.dev, layout)? { Found::Table } else { Found::No })
    }

    fn holds_no_data(&self, p: &Partition) -> bool {
        p.kind == PartKind::Sun && p.type_id == WHOLE_DISK
    }
}

/// Fill `layout` when sector 0 holds a Sun label; false when it does not.
/// A label whose checksum fails is reported with no partitions, as Linux
/// and libblkid ignore it.
fn read_into(dev: &dyn ReadAt, layout: &mut Layout) -> Result<bool, TableError> {
    let Some(label) = read_bytes(dev, 0, 512)? else { return Ok(false) };
    if be_u16(&label, 508) != Some(MAGIC) {
        return Ok(false);
    }
    layout.label = Label::Sun;
    if xor_of(&label) != 0 {
        layout.problems.push(Problem::new(
            "label_bad_checksum",
            "the Sun disk label's checksum fails: Linux and libblkid ignore it and see no \
             partitions",
        ));
        return Ok(true);
    }
    let found = partitions(&label, layout);
    let theirs: Vec<(u32, u64, u64)> = found
        .iter()
        .filter(|p| p.type_id != WHOLE_DISK)
        .map(|p| (p.number, p.start, p.size))
        .collect();
    let why = "libblkid leaves out the whole-disk entry";
    layout.problems.extend(libblkid_differs("Sun", &found, &theirs, why));
    layout.partitions.extend(found);
    Ok(true)
}

/// The xor of the label's 16-bit words: 0 when its checksum holds.
fn xor_of(label: &[u8]) -> u16 {
    label.chunks_exact(2).fold(0u16, |x, w| x ^ u16::from_be_bytes([w[0], w[1]]))
}

/// The partitions as the kernel numbers them: by slot, skipping empty ones.
fn partitions(label: &[u8], layout: &mut Layout) -> Vec<Partition> {
    let u16_at = |at: usize| be_u16(label, at).unwrap_or(0);
    let u32_at = |at: usize| be_u32(label, at).unwrap_or(0);
    let (version, parts, sanity) = (u32_at(128), u16_at(140), u32_at(188));
    // The VTOC gives the count and tags when sane; an all-zero one (old
    // Linux labels) still gives tags, eight slots as without one.
    let sane = sanity == VTOC_SANE && version == 1 && parts <= 8;
    let count = if sane { usize::from(parts) } else { 8 };
    let tags = sane || (sanity == 0 && version == 0 && parts == 0);
    let per_cylinder = u64::from(u16_at(436)) * u64::from(u16_at(438));
    let mut found = Vec::new();
    for (number, slot) in (1u32..).zip(0..count) {
        let cylinder = u64::from(u32_at(444 + slot * 8));
        let size = u64::from(u32_at(448 + slot * 8));
        if size == 0 {
            continue;
        }
        let tag = if tags { u16_at(142 + slot * 4) } else { 0 };
        let p = Partition {
            number,
            start: cylinder.saturating_mul(per_cylinder),
            size,
            kind: PartKind::Sun,
            type_id: format!("0x{tag:02x}"),
            name: None,
            ebr: None,
        };
        found.extend(in_logical_sectors(p, layout));
    }
    found
}

/// Hand-built labels for tests. Test fixtures only, not a table writer.
#[cfg(test)]
pub(crate) mod fixtures {
    /// A Sun label of `sectors` 512-byte sectors, 16 heads of 63 sectors
    /// (1008 a cylinder), with (slot, start cylinder, size, tag) entries.
    pub(crate) fn sun_image(sectors: usize, parts: &[(usize, u32, u32, u16)]) -> Vec<u8> {
        let mut img = vec![0u8; sectors * 512];
        img[128..132].copy_from_slice(&1u32.to_be_bytes());
        img[140..142].copy_from_slice(&8u16.to_be_bytes());
        img[188..192].copy_from_slice(&super::VTOC_SANE.to_be_bytes());
        img[436..438].copy_from_slice(&16u16.to_be_bytes());
        img[438..440].copy_from_slice(&63u16.to_be_bytes());
        for &(slot, cylinder, size, tag) in parts {
            img[142 + slot * 4..144 + slot * 4].copy_from_slice(&tag.to_be_bytes());
            img[444 + slot * 8..448 + slot * 8].copy_from_slice(&cylinder.to_be_bytes());
            img[448 + slot * 8..452 + slot * 8].copy_from_slice(&size.to_be_bytes());
        }
        img[508..510].copy_from_slice(&super::MAGIC.to_be_bytes());
        seal(&mut img);
        img
    }

    /// Recompute the checksum in bytes 510-511.
    pub(crate) fn seal(img: &mut [u8]) {
        img[510..512].fill(0);
        let sum = super::xor_of(&img[..512]);
        img[510..512].copy_from_slice(&sum.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use crate::table::common::test_support::{read_alone, read_mutated, Seal};
    use crate::table::{Label, Layout};
    use proptest::prelude::*;

    fn sun(img: &[u8], ss: u64) -> Layout {
        read_alone(super::read_into, img, ss, Label::Sun)
    }

    fn parts(img: &[u8], ss: u64) -> Vec<(u32, u64, u64, String)> {
        let layout = sun(img, ss);
        layout.partitions.into_iter().map(|p| (p.number, p.start, p.size, p.type_id)).collect()
    }

    #[test]
    fn slots_give_numbers_and_cylinders_give_starts() {
        let img = sun_image(8064, &[(0, 1, 2016, 0x83), (2, 0, 8064, 5), (5, 3, 1008, 0x82)]);
        let want = [
            (1, 1008, 2016, "0x83".to_string()),
            (3, 0, 8064, "0x05".to_string()),
            (6, 3024, 1008, "0x82".to_string()),
        ];
        assert_eq!(parts(&img, 512), want);
        let layout = sun(&img, 512);
        let codes: Vec<_> = layout.problems.iter().map(|p| p.code).collect();
        assert_eq!(codes, ["libblkid_differs"]);
        assert!(layout.problems[0].message.contains("lists 1 (1008+2016), 6 (3024+1008)"));
    }

    #[test]
    fn sane_vtoc_limits_the_slots() {
        let mut img = sun_image(8064, &[(0, 1, 1008, 0x83), (4, 2, 1008, 0x83)]);
        img[140..142].copy_from_slice(&3u16.to_be_bytes());
        seal(&mut img);
        assert_eq!(parts(&img, 512), [(1, 1008, 1008, "0x83".to_string())]);
        // Without a VTOC all eight slots count, untagged.
        img[188..192].fill(0xFF);
        seal(&mut img);
        assert_eq!(parts(&img, 512).len(), 2);
        assert!(parts(&img, 512).iter().all(|p| p.3 == "0x00"));
    }

    #[test]
    fn bad_checksum_hides_the_partitions() {
        let mut img = sun_image(8064, &[(0, 1, 1008, 0x83)]);
        img[100] ^= 1;
        let layout = sun(&img, 512);
        assert!(layout.partitions.is_empty());
        assert_eq!(layout.problems[0].code, "label_bad_checksum");
    }

    #[test]
    fn starts_in_4096_byte_sectors() {
        // 1008 units of 512 bytes is 126 sectors of 4096; 63 is not whole.
        let img = sun_image(8064, &[(0, 1, 1008, 0x83), (1, 0, 63, 0x83)]);
        assert_eq!(
            parts(&img, 4096)[..2],
            [(1, 126, 126, "0x83".into()), (2, 0, 7, "0x83".into())]
        );
        let mut img = sun_image(8064, &[(0, 1, 1008, 0x83)]);
        img[438..440].copy_from_slice(&63u16.to_be_bytes());
        img[436..438].copy_from_slice(&1u16.to_be_bytes());
        seal(&mut img);
        let layout = sun(&img, 4096);
        assert!(layout.problems.iter().any(|p| p.code == "start_not_whole_sector"));
    }

    proptest! {
        #[test]
        fn mutated_labels_never_panic(
            muts in proptest::collection::vec((0usize..512, any::<u8>()), 1..12),
            reseal in any::<bool>(),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let img = sun_image(64, &[(0, 0, 32, 0x83), (2, 0, 64, 5)]);
            read_mutated(img, &muts, reseal.then_some(&seal as Seal), ss);
        }
    }
}
