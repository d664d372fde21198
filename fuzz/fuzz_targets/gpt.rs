//! GPT headers and entry arrays, primary and backup, as `table::read` finds them; checksums are
//! fixed up when the input asks so that mutated headers are read. Seeded with sgdisk's and sfdisk's
//! GPTs.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::read_table(&mut img);
});
