//! MBR and its EBR chain (and BSD or other tables nested in its slices), as `table::read` finds
//! them; seeded with sfdisk's dos tables.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::read_table(&mut img);
});
