//! LVM2 physical volumes: label, PV header, metadata area and the volume group's metadata text
//! (CRCs fixed up when the input asks); seeded with pvcreate/vgcreate/lvcreate.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::contents(&mut img);
});
