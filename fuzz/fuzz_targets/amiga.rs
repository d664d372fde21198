//! Amiga Rigid Disk Blocks: the RDB search in the first 16 blocks, its
//! checksum (and the trashed-word retry), the partition list by pb_Next
//! (loops, links past the end) and each partition's DosEnvec geometry.
//! Seeded with parted's amiga labels and the amiga_* cases of
//! tests/it/linux_view.rs.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::read_table(&mut img);
});
