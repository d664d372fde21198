//! The other partition schemes: BSD disklabels, Sun, SGI, the Apple partition map, and the schemes
//! only named (AIX, LDM, PC-98, Amiga, Atari, ...). Seeded with parted's bsd, sun, dvh and mac
//! labels.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::read_table(&mut img);
});
