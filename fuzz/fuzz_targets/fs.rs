//! File system superblocks (ext2/3/4, XFS, btrfs, FAT, exFAT, NTFS, swap, ISO 9660) and the boot-
//! sector fixes a move writes; seeded with mkfs.*.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::contents(&mut img);
});
