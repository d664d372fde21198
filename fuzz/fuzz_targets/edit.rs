//! Read a table, move one partition with the editor (`table::edit`), write it and read it back: the
//! partition must be at its new start, the others where they were. Before that, on a copy, move a
//! logical's EBR: every partition must stay where it was.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    let Some(layout) = blkalign_fuzz::read_table(&mut img) else { return };
    let (pick, shift) = (img.a, img.b as i32);
    blkalign_fuzz::roundtrip::move_ebr(&mut img.clone(), &layout, pick, img.b);
    blkalign_fuzz::roundtrip::move_one(&mut img, &layout, pick, shift);
});
