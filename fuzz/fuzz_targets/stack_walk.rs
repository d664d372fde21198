//! Everything audit reads from an image: the table, then the layers in each partition
//! (`stack::walk`), on every seed.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::audit(&mut img);
});
