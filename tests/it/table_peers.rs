//! Our table readers against util-linux and GPT fdisk on the same images.

use crate::common;

use blkalign::table::{self, Label, Layout, PartKind};
use common::{run, sfdisk_json, Image};
use std::fs::File;
use std::os::unix::fs::FileExt;

tests![
    sfdisk_dos_with_logicals,
    sfdisk_gpt,
    sgdisk_gpt_and_its_backup,
    grown_image_is_flagged,
];

const MIB: u64 = 1 << 20;

fn read(image: &Image) -> Layout {
    let file = File::open(&image.path).expect("open image");
    let size = file.metadata().expect("stat image").len();
    table::read(&file, 512, size).expect("read table")
}

/// Our partitions in sfdisk's terms: dos types as bare lower-case hex.
fn our_view(layout: &Layout) -> Vec<(u32, u64, u64, String)> {
    let kind = |t: &str| {
        t.strip_prefix("0x").map_or(t.to_string(), |h| h.trim_start_matches('0').to_string())
    };
    layout.partitions.iter().map(|p| (p.number, p.start, p.size, kind(&p.type_id))).collect()
}

fn assert_same(image: &Image, label: Label) -> Layout {
    let layout = read(image);
    let (peer_label, peer) = sfdisk_json(image.str());
    assert_eq!(layout.label, label);
    assert_eq!(peer_label, if label == Label::Mbr { "dos" } else { "gpt" });
    assert_eq!(our_view(&layout), peer);
    layout
}

fn sfdisk_dos_with_logicals() {
    if !common::needs(false, &["sfdisk"]) {
        return;
    }
    let script = "label: dos\n,1M,83\n,1M,7\n,1M,83\n,10M,5\n,1M,83\n,2M,83\n,1M,82\n";
    let image = Image::sfdisk(32 * MIB, script);
    let layout = assert_same(&image, Label::Mbr);
    assert!(layout.problems.is_empty(), "{:?}", layout.problems);
    let logicals: Vec<_> =
        layout.partitions.iter().filter(|p| p.kind == PartKind::Logical).collect();
    assert_eq!(logicals.len(), 3);
    let mbr = layout.mbr.expect("mbr info");
    assert_eq!(mbr.ebrs, logicals.iter().filter_map(|p| p.ebr).collect::<Vec<_>>());
}

fn sfdisk_gpt() {
    if !common::needs(false, &["sfdisk"]) {
        return;
    }
    let script = "label: gpt\nsize=1M\nsize=3M, name=root\nstart=16M, size=5M\n";
    let image = Image::sfdisk(64 * MIB, script);
    let layout = assert_same(&image, Label::Gpt);
    assert!(layout.problems.is_empty(), "{:?}", layout.problems);
    assert_eq!(layout.partitions[1].name.as_deref(), Some("root"));
    assert!(layout.mbr.expect("pmbr").protective);
}

fn sgdisk_gpt_and_its_backup() {
    if !common::needs(false, &["sgdisk", "sfdisk"]) {
        return;
    }
    let image = Image::new(32 * MIB);
    let args = ["-n", "1:2048:+1M", "-c", "1:boot", "-n", "2:0:+3M", "-n", "3:0:0", image.str()];
    run("sgdisk", &args);
    let layout = assert_same(&image, Label::Gpt);
    assert!(layout.problems.is_empty(), "{:?}", layout.problems);
    let gpt = layout.gpt.expect("gpt info");
    assert_eq!(gpt.alternate_lba, 32 * MIB / 512 - 1);

    // Break the primary header: both tools fall back to the backup.
    let file = File::options().write(true).open(&image.path).expect("open rw");
    file.write_all_at(&[0xFF], 512 + 40).expect("corrupt primary");
    let layout = assert_same(&image, Label::Gpt);
    let codes: Vec<_> = layout.problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["gpt_primary_invalid"]);
    assert!(layout.gpt.expect("gpt info").used_backup);
}

fn grown_image_is_flagged() {
    if !common::needs(false, &["sfdisk"]) {
        return;
    }
    let image = Image::sfdisk(16 * MIB, "label: gpt\n,4M\n");
    File::options().write(true).open(&image.path).and_then(|f| f.set_len(32 * MIB)).expect("grow");
    let layout = read(&image);
    let codes: Vec<_> = layout.problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["gpt_backup_not_at_end"]);
    assert_eq!(
        table::detect_sector_size(&File::open(&image.path).expect("open"), 32 * MIB),
        blkalign::device::SectorGuess::Known(512, None)
    );
}
