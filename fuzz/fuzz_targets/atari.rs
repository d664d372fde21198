//! Atari AHDI root sectors: the kernel's validity test of the four entries
//! (32-bit sums), XGM extended chains (loops, links past the end, the
//! partition limit) and ICD entries. Seeded with parted's atari labels and
//! the atari_* cases of tests/it/linux_view.rs.
#![no_main]

use blkalign_fuzz::image::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    blkalign_fuzz::read_table(&mut img);
});
