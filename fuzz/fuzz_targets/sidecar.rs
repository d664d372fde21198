//! The backup sidecar reader (`Sidecar::parse`): JSON as a damaged or hand-edited backup may leave
//! it, then the check that every region lies inside the backup file, against a few file lengths.
#![no_main]

use blkalign::backup::Sidecar;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(sidecar) = Sidecar::parse(data, Path::new("fuzz.bin.json")) else { return };
    for len in [0, 512, 1 << 20, u64::MAX] {
        let _ = sidecar.check_regions(Path::new("fuzz.bin"), len);
    }
});
