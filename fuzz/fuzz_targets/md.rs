//! md superblocks 0.90 and 1.0/1.1/1.2, at the start and the end of a member.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::contents(&mut img);
});
