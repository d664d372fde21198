//! The whole of `table::read` and the sector size guess of an image, on every table seed.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    let _ = blkalign::table::detect_sector_size(&img, img.size);
    blkalign_fuzz::read_table(&mut img);
});
