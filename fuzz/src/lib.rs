//! What the fuzz targets share: the input read as a sparse disk image
//! ([`image`]), checksums fixed up after mutation ([`reseal`]), and the
//! calls each kind of target makes. The targets in `fuzz_targets/` differ
//! mostly in their seeds (see `fuzz/seeds.sh`).

pub mod image;
pub mod reseal;
pub mod roundtrip;

use blkalign::stack::{self, Layer};
use blkalign::table::{self, detect, mbr, Layout, PartKind};
use image::Image;

/// Read the partition table of the image as `audit` does (after fixing up
/// checksums when the input asks), with the side readers that look at
/// the same bytes: every scheme on its own (not just until one is found),
/// nested tables in MBR slices.
pub fn read_table(img: &mut Image) -> Option<Layout> {
    if img.reseal() {
        reseal::tables(img);
    }
    let ss = img.sector_size();
    let layout = table::read(img, ss, img.size).ok()?;
    let _ = layout.free_ranges(img.size);
    if let Ok(disk) = detect::disk(img, ss, img.size) {
        for scheme in detect::SCHEMES {
            let _ = scheme.read(&disk, &mut Layout::blank(ss));
        }
    }
    for p in layout.partitions.iter().filter(|p| p.kind == PartKind::Primary) {
        let _ = mbr::nested(img, p, ss);
        let _ = table::holds_no_data(p);
    }
    Some(layout)
}

/// Everything `audit` reads from a disk image: the table, its sector size
/// as an image's is guessed, and the layers in each partition (or on the
/// whole disk without a table).
pub fn audit(img: &mut Image) {
    let _ = table::detect_sector_size(img, img.size);
    let Some(layout) = read_table(img) else { return };
    let ss = layout.sector_size;
    let spans: Vec<(u64, u64)> = if layout.partitions.is_empty() {
        vec![(0, img.size)]
    } else {
        let data = layout.partitions.iter().filter(|p| p.kind != PartKind::Extended);
        data.filter_map(|p| Some((p.start.checked_mul(ss)?, p.size.checked_mul(ss)?))).collect()
    };
    for (offset, len) in spans {
        walk(img, offset, len);
    }
}

/// The layers in `len` bytes at `offset`, judged; and what is at their
/// start, with the advice to shrink it.
pub fn walk(img: &mut Image, offset: u64, len: u64) -> Vec<Layer> {
    if img.reseal() {
        reseal::lvm(img, offset);
        reseal::bcache(img, offset);
    }
    let layers = stack::walk(img, offset, len);
    for layer in &layers {
        let _ = stack::judge(layer, 4096, 0, None);
        let _ = stack::judge(layer, 512 << (img.a & 7), u64::from(img.b), Some(u64::from(img.a)));
    }
    if let Ok(contents) = stack::identify(img, offset, len) {
        let node = blkalign::advise::Node::Device("/dev/fuzz".into());
        let _ = blkalign::advise::shrink_node(contents.as_ref(), &node, len, u64::from(img.a));
    }
    layers
}

/// The whole image as one partition: its layers, and the boot-sector
/// fixes a move from sector `a` to sector `b` would write.
pub fn contents(img: &mut Image) {
    walk(img, 0, img.size);
    let (old, new) = (u64::from(img.a), u64::from(img.b));
    let _ = stack::start_fixups(img, 0, img.size, img.sector_size(), old, new);
}
