//! What a move cannot fix and what it leaves behind (issue 21): a FAT data
//! area off the physical sector grid is said before and after the move, and
//! the stale copy a move to the right leaves in the gap is recognised as
//! ours, not refused as boot-loader data.

use crate::common;

use common::{needs, run, run_unchecked, Image};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Output;

tests![
    a_fat_data_area_on_the_grid_ends_aligned_and_audit_agrees,
    a_fat_data_area_off_the_grid_is_said_and_the_moves_stale_copy_is_ours,
];

const SECTORS: u64 = 260 * 2048;

/// State records stay out of /var/lib.
struct State(tempfile::TempDir);

impl State {
    fn new() -> State {
        State(tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("state dir"))
    }

    fn blkalign(&self, args: &[&str]) -> Output {
        common::blkalign()
            .env("BLKALIGN_STATE_DIR", self.0.path())
            .args(args)
            .output()
            .expect("run blkalign")
    }
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exit code")
}

fn partition_bytes(path: &Path, start: u64) -> Vec<u8> {
    let mut buf = vec![0u8; (SECTORS * 512) as usize];
    File::open(path).expect("open").read_exact_at(&mut buf, start * 512).expect("read");
    buf
}

fn sha(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// fsck.fat has no offset option: check a copy of the partition.
fn fsck_clean(image: &Image, start: u64) {
    let copy = image.path.with_extension("part");
    std::fs::write(&copy, partition_bytes(&image.path, start)).expect("copy partition");
    run("fsck.fat", &["-n", copy.to_str().expect("utf-8")]);
    std::fs::remove_file(copy).expect("remove copy");
}

/// A 260 MiB FAT32 (4 KiB clusters, no mkfs alignment) at LBA 63 with
/// `reserved` reserved sectors: 34 puts its data area 548864 bytes (a whole
/// number of 4 KiB) into the partition, 36 puts it 1024 bytes past one.
fn fat32_at_63(reserved: u32) -> Image {
    let image = Image::sfdisk(300 << 20, &format!("start=63, size={SECTORS}, type=c\n"));
    let (r, blocks) = (reserved.to_string(), (SECTORS / 2).to_string());
    let args = ["-F", "32", "--offset", "63", "-s", "8", "-R", &r, "-a", image.str(), &blocks];
    run("mkfs.vfat", &args);
    image
}

fn a_fat_data_area_on_the_grid_ends_aligned_and_audit_agrees() {
    if !needs(false, &["sfdisk", "mkfs.vfat", "fsck.fat"]) {
        return;
    }
    let (image, state) = (fat32_at_63(34), State::new());
    let before = sha(&partition_bytes(&image.path, 63));
    let dry = state.blkalign(&["realign", image.str()]);
    assert_eq!(code(&dry), 0, "{}", text(&dry));
    assert!(!text(&dry).contains("data area"), "{}", text(&dry));
    let out = state.blkalign(&["realign", image.str(), "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!text(&out).contains("warning"), "{}", text(&out));
    assert_eq!(sha(&partition_bytes(&image.path, 2048)), before);
    fsck_clean(&image, 2048);
    let audit = state.blkalign(&["audit", image.str()]);
    assert_eq!(code(&audit), 0, "{}", text(&audit));
}

fn a_fat_data_area_off_the_grid_is_said_and_the_moves_stale_copy_is_ours() {
    if !needs(false, &["sfdisk", "mkfs.vfat", "fsck.fat"]) {
        return;
    }
    let (image, state) = (fat32_at_63(36), State::new());
    let before = sha(&partition_bytes(&image.path, 63));
    let warning = "the FAT32 data area starts 549888 bytes into the partition, 1024 bytes past \
                   a 4096-byte boundary";
    let dry = state.blkalign(&["realign", image.str()]);
    assert_eq!(code(&dry), 0, "{}", text(&dry));
    assert!(text(&dry).contains(warning) && text(&dry).contains("mkfs.vfat -F 32 -s 8"));
    let out = state.blkalign(&["realign", image.str(), "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains(&format!("warning: {warning}")), "{}", text(&out));
    assert_eq!(sha(&partition_bytes(&image.path, 2048)), before);
    fsck_clean(&image, 2048);
    // Honest: the layer inside is still misaligned, and audit says so.
    assert_eq!(code(&state.blkalign(&["audit", image.str()])), 1);

    // LBA 63-2047 now hold the partition's old first sectors: ours.
    let back = state.blkalign(&["realign", image.str(), "1", "--to", "64"]);
    assert_eq!(code(&back), 0, "{}", text(&back));
    assert!(
        text(&back).contains(
            "sectors 64-2047 hold a stale copy of partition 1's first sectors, left by an \
             earlier move"
        ),
        "{}",
        text(&back)
    );
    // One foreign byte in the gap and it is someone's data again.
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&image.path).expect("open");
    let mut sector = [0u8; 512];
    file.read_exact_at(&mut sector, 1000 * 512).expect("read");
    let kept = sector;
    sector[7] ^= 0x5A;
    file.write_all_at(&sector, 1000 * 512).expect("write");
    let refused = state.blkalign(&["realign", image.str(), "1", "--to", "64", "--yes"]);
    assert_eq!(code(&refused), 2, "{}", text(&refused));
    assert!(text(&refused).contains("boot loaders"), "{}", text(&refused));
    assert_eq!(sha(&partition_bytes(&image.path, 2048)), before);
    file.write_all_at(&kept, 1000 * 512).expect("restore");

    let moved = state.blkalign(&["realign", image.str(), "1", "--to", "64", "--yes"]);
    assert_eq!(code(&moved), 0, "{}", text(&moved));
    assert_eq!(sha(&partition_bytes(&image.path, 64)), before);
    fsck_clean(&image, 64);
    let table = run_unchecked("sfdisk", &["--verify", image.str()], None);
    assert!(table.status.success(), "{}", text(&table));
}
