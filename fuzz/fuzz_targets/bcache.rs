//! bcache superblocks: backing devices (and what their data area holds), cache devices.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::contents(&mut img);
});
