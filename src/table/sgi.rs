//! SGI disk volume headers ("dvh"), read as Linux's block/partitions/sgi.c
//! reads them: sixteen partitions in 512-byte blocks.

use super::common::{in_logical_sectors, read_bytes};
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::io::be_u32;
use crate::io::ReadAt;

const MAGIC: u32 = 0x0BE5_A941;
/// The type of the entry that covers the whole disk (partition 11 by
/// custom, "volume"); the volume header itself (partition 9) is type 0.
pub(crate) const VOLUME: &str = "0x06";

/// The SGI disk volume header.
pub(crate) struct Sgi;

impl Scheme for Sgi {
    fn name(&self) -> &'static str {
        "sgi"
    }

    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        Ok(if read_into(disk.dev, layout)? { Found::Table } else { Found::No })
    }

    fn holds_no_data(&self, p: &Partition) -> bool {
        p.kind == PartKind::Sgi && p.type_id == VOLUME
    }
}

/// Fill `layout` when sector 0 holds an SGI volume header; false when it
/// does not. One whose checksum fails is reported with no partitions, as
/// Linux and libblkid ignore it.
fn read_into(dev: &dyn ReadAt, layout: &mut Layout) -> Result<bool, TableError> {
    let Some(label) = read_bytes(dev, 0, 512)? else { return Ok(false) };
    if be_u32(&label, 0) != Some(MAGIC) {
        return Ok(false);
    }
    layout.label = Label::Sgi;
    if sum_of(&label) != 0 {
        layout.problems.push(Problem::new(
            "label_bad_checksum",
            "the SGI volume header's checksum fails: Linux and libblkid ignore it and see no \
             partitions",
        ));
        return Ok(true);
    }
    // Numbered by slot; empty slots keep their numbers.
    for (number, slot) in (1u32..).zip(0..16usize) {
        let at = 312 + slot * 12;
        let field = |offset: usize| be_u32(&label, at + offset).unwrap_or(0);
        let (size, start, kind) = (field(0), field(4), field(8));
        if size == 0 {
            continue;
        }
        let p = Partition {
            number,
            start: u64::from(start),
            size: u64::from(size),
            kind: PartKind::Sgi,
            type_id: format!("0x{kind:02x}"),
            name: None,
            ebr: None,
        };
        if let Some(p) = in_logical_sectors(p, layout) {
            layout.partitions.push(p);
        }
    }
    Ok(true)
}

/// The sum of the header's 32-bit words: 0 when its checksum holds.
fn sum_of(label: &[u8]) -> u32 {
    (0..128).fold(0u32, |sum, i| sum.wrapping_add(be_u32(label, i * 4).unwrap_or(0)))
}

/// Hand-built volume headers for tests. Test fixtures only, not a writer.
#[cfg(test)]
pub(crate) mod fixtures {
    /// An SGI disk of `sectors` 512-byte sectors with (slot, start, size,
    /// type) entries.
    pub(crate) fn sgi_image(sectors: usize, parts: &[(usize, u32, u32, u32)]) -> Vec<u8> {
        let mut img = vec![0u8; sectors * 512];
        img[..4].copy_from_slice(&super::MAGIC.to_be_bytes());
        for &(slot, start, size, kind) in parts {
            let at = 312 + slot * 12;
            img[at..at + 4].copy_from_slice(&size.to_be_bytes());
            img[at + 4..at + 8].copy_from_slice(&start.to_be_bytes());
            img[at + 8..at + 12].copy_from_slice(&kind.to_be_bytes());
        }
        seal(&mut img);
        img
    }

    /// Recompute the checksum at byte 504.
    pub(crate) fn seal(img: &mut [u8]) {
        img[504..508].fill(0);
        let sum = super::sum_of(&img[..512]);
        img[504..508].copy_from_slice(&0u32.wrapping_sub(sum).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use crate::table::common::test_support::{read_alone, read_mutated, Seal};
    use crate::table::{read, Label, Layout};
    use proptest::prelude::*;

    fn sgi(img: &[u8], ss: u64) -> Layout {
        read_alone(super::read_into, img, ss, Label::Sgi)
    }

    #[test]
    fn slots_give_numbers() {
        let img = sgi_image(8192, &[(0, 4096, 2048, 3), (8, 0, 4096, 0), (10, 0, 8192, 6)]);
        let layout = sgi(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<_> = layout.partitions.iter().map(|p| (p.number, p.start, p.size)).collect();
        assert_eq!(got, [(1, 4096, 2048), (9, 0, 4096), (11, 0, 8192)]);
        assert_eq!(layout.partitions[2].type_id, super::VOLUME);
    }

    #[test]
    fn sgi_comes_before_the_mbr() {
        // Bytes 510-511 are padding: make them an MBR signature.
        let mut img = sgi_image(8192, &[(0, 4096, 2048, 3)]);
        crate::table::mbr::sign(&mut img);
        seal(&mut img);
        assert_eq!(read(&img, 512, img.len() as u64).unwrap().label, Label::Sgi);
    }

    #[test]
    fn bad_checksum_hides_the_partitions() {
        let mut img = sgi_image(8192, &[(0, 4096, 2048, 3)]);
        img[20] ^= 1;
        let layout = sgi(&img, 512);
        assert!(layout.partitions.is_empty());
        assert_eq!(layout.problems[0].code, "label_bad_checksum");
    }

    #[test]
    fn blocks_in_4096_byte_sectors() {
        let img = sgi_image(8192, &[(0, 4096, 2048, 3), (1, 6145, 100, 3)]);
        let layout = sgi(&img, 4096);
        let got: Vec<_> = layout.partitions.iter().map(|p| (p.number, p.start, p.size)).collect();
        assert_eq!(got, [(1, 512, 256), (2, 768, 12)]);
        let codes: Vec<_> = layout.problems.iter().map(|p| p.code).collect();
        assert_eq!(codes, ["start_not_whole_sector"]);
    }

    proptest! {
        #[test]
        fn mutated_headers_never_panic(
            muts in proptest::collection::vec((0usize..512, any::<u8>()), 1..12),
            reseal in any::<bool>(),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let img = sgi_image(64, &[(0, 8, 32, 3), (8, 0, 8, 0), (10, 0, 64, 6)]);
            read_mutated(img, &muts, reseal.then_some(&seal as Seal), ss);
        }
    }
}
