//! The sfdisk-script parser of `plan --script` (and `--part`), then the plan it makes written to an
//! image and read back. Seeded with `sfdisk -d` dumps.
#![no_main]

use blkalign::plan;
use blkalign_fuzz::roundtrip;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = plan::parse_part(text);
    }
    let Ok(script) = plan::parse_script(data) else { return };
    let Some((plan, size)) = roundtrip::plan_script(&script) else { return };
    let ids = roundtrip::ids(plan.partitions.len(), data.len() as u32);
    roundtrip::check(&plan, &ids, size, data.len() as u32, 0);
});
