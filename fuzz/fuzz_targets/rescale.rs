//! Rescale a table to the other logical sector size (`rescale::plan_rescale`) and
//! back: a rescale that is not refused must read back with every partition
//! on the same bytes, rescale back without refusal to the same partitions,
//! and a second round must write the same bytes as the first.
#![no_main]

use blkalign::rescale;
use blkalign::table;
use blkalign_fuzz::image::Image;
use blkalign_fuzz::roundtrip::apply;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(mut img) = Image::parse(data) else { return };
    let Some(layout) = blkalign_fuzz::read_table(&mut img) else { return };
    let from = layout.sector_size;
    let to = if from == 512 { 4096 } else { 512 };
    let Ok(there) = rescale::plan_rescale(&img, img.size, from, to) else { return };
    let mut moved = img.clone();
    apply(&mut moved, &there.table);
    let new = table::read(&moved, to, img.size).expect("a rescaled table reads");
    if let Err(e) = rescale::same_bytes(&there.old, &new) {
        panic!("rescaled to {to}: {e}");
    }
    let back = rescale::plan_rescale(&moved, img.size, to, from);
    let back = back.unwrap_or_else(|e| panic!("a rescaled table must rescale back: {e}"));
    let mut home = moved.clone();
    apply(&mut home, &back.table);
    let old = table::read(&home, from, img.size).expect("a table rescaled back reads");
    assert_eq!(old.partitions, there.old.partitions, "back at {from}: not the same partitions");
    let again = rescale::plan_rescale(&home, img.size, from, to).expect("rescales again");
    assert!(again.chunks == there.chunks, "a second round wrote other bytes");
});
