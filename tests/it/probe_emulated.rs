//! `blkalign probe` on emulated drives: the right physical sector size and
//! alignment offset for every preset and custom geometry, each within 10 s.

use crate::common;

use common::emulate::{run_probe, EmulatedDrive};
use std::sync::Mutex;

tests![
    // Timed: run first, one at a time (common/harness.rs).
    alone(
        wd_ears_is_4096_and_the_kernel_is_wrong,
        xp_jumper_is_found_at_3584,
        native_512_has_no_measurable_penalty,
        four_k_native_agrees_with_the_kernel,
        eight_kib_physical,
        sixteen_kib_physical_aligned_at_4096,
        odd_alignment_offset,
        human_sentence_names_the_lie,
        where_free_never_touches_partitions,
        a_regular_file_is_refused_not_judged,
    ),
];

const TOOLS: &[&str] = &["nbdkit", "nbdfuse", "losetup"];

/// Timing tests disturb each other on two cores: one probe at a time.
static TIMING: Mutex<()> = Mutex::new(());

/// Probes a drive started with `args` and returns the JSON result.
fn probe(args: &[&str]) -> Option<serde_json::Value> {
    if !common::needs(true, TOOLS) {
        return None;
    }
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let mut start = vec!["--size", "64MiB"];
    start.extend_from_slice(args);
    let drive = EmulatedDrive::start(&start);
    let out = run_probe(&["probe", "--json", drive.str()]);
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 1)), "probe failed: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("probe --json prints JSON");
    eprintln!("{args:?}: {json}");
    let elapsed = json["elapsed_s"].as_f64().expect("elapsed_s");
    assert!(elapsed <= 10.0, "{args:?} took {elapsed} s");
    let agrees = json["agrees_with_kernel"].as_bool().expect("agrees_with_kernel");
    assert_eq!(code, Some(if agrees { 0 } else { 1 }), "exit 1 when the kernel is wrong");
    Some(json)
}

fn geometry(json: &serde_json::Value) -> (u64, u64, bool) {
    (
        json["physical_sector_size"].as_u64().expect("physical_sector_size"),
        json["alignment_offset"].as_u64().expect("alignment_offset"),
        json["agrees_with_kernel"].as_bool().expect("agrees_with_kernel"),
    )
}

fn wd_ears_is_4096_and_the_kernel_is_wrong() {
    let Some(json) = probe(&["--preset", "wd-ears"]) else { return };
    assert_eq!(geometry(&json), (4096, 0, false));
    assert_eq!(json["kernel"]["physical_sector_size"], 512);
    assert!(json["penalty"].as_f64().expect("penalty") >= 2.0);
    assert!(json["confidence"].as_f64().expect("confidence") >= 0.8);
    for key in ["lowest_aligned_lba", "elapsed_s", "kernel"] {
        assert!(json.get(key).is_some(), "no {key} in {json}");
    }
}

fn xp_jumper_is_found_at_3584() {
    let Some(json) = probe(&["--preset", "wd-ears-jumper"]) else { return };
    assert_eq!(geometry(&json), (4096, 3584, false));
    assert_eq!(json["lowest_aligned_lba"], 7);
}

fn native_512_has_no_measurable_penalty() {
    let Some(json) = probe(&["--preset", "native-512"]) else { return };
    assert_eq!(geometry(&json), (512, 0, true));
    assert!(json["penalty"].is_null());
}

fn four_k_native_agrees_with_the_kernel() {
    let Some(json) = probe(&["--preset", "4kn"]) else { return };
    assert_eq!(geometry(&json), (4096, 0, true));
}

fn eight_kib_physical() {
    let Some(json) = probe(&["--physical", "8192"]) else { return };
    assert_eq!(geometry(&json), (8192, 0, false));
}

fn sixteen_kib_physical_aligned_at_4096() {
    let Some(json) = probe(&["--physical", "16384", "--lowest-aligned", "8"]) else { return };
    assert_eq!(geometry(&json), (16384, 4096, false));
}

fn odd_alignment_offset() {
    let Some(json) = probe(&["--physical", "4096", "--lowest-aligned", "3"]) else { return };
    assert_eq!(geometry(&json), (4096, 1536, false));
    assert_eq!(json["lowest_aligned_lba"], 3);
}

fn human_sentence_names_the_lie() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let drive = EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB"]);
    let out = run_probe(&["probe", drive.str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("reports 512-byte physical sectors but behaves like 4096")
            && text.contains("the kernel is wrong about this drive"),
        "exit {:?}: {text}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--where free` keeps to space no partition claims: with the partition's
/// sectors made to fail, only a probe that never touches them succeeds.
fn where_free_never_touches_partitions() {
    if !common::needs(true, &["nbdkit", "nbdfuse", "losetup", "sfdisk"]) {
        return;
    }
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let drive = EmulatedDrive::start(&[
        "--preset",
        "wd-ears-jumper",
        "--size",
        "64MiB",
        "--fail-lba",
        "40000-80000",
    ]);
    let script = "label: dos\nstart=2048, size=81920\n";
    common::run_stdin("sfdisk", &["--no-reread", "--no-tell-kernel", drive.str()], Some(script));
    let out = common::blkalign()
        .args(["probe", "--json", "--where", "free", drive.str()])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(geometry(&json), (4096, 3584, false));
    let anywhere = common::blkalign().args(["probe", drive.str()]).output().expect("run");
    assert_eq!(
        anywhere.status.code(),
        Some(2),
        "the default probe writes inside the partition and meets the bad sectors"
    );
    let bare = EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB"]);
    let none =
        common::blkalign().args(["probe", "--where", "free", bare.str()]).output().expect("run");
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no partition table"));
}

/// A regular file has no drive to time (its writes land in the page cache
/// and the host's file system): refused with the way to a real answer,
/// never "no penalty" with a confidence.
fn a_regular_file_is_refused_not_judged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("disk.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(64 << 20)).expect("image");
    let out = common::blkalign().arg("probe").arg(&image).output().expect("run probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("regular file") && stderr.contains("emulate start"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
}
