//! `realign` never loses data: scripts/realign-crash-trials, shortened to
//! 10 kills and 5 power cuts, against the binary under test. The script
//! does the work (a fresh image or emulated drive per trial, a SIGKILL or a
//! power cut at a random moment, the same command rerun, then SHA-256,
//! e2fsck, sfdisk, parted, audit and a dry run); this checks its verdict.

use crate::common;

use std::process::Command;

tests![
    realign_survives_kills_and_power_cuts,
];

fn realign_survives_kills_and_power_cuts() {
    let tools = [
        "sfdisk",
        "jq",
        "mkfs.ext4",
        "e2fsck",
        "parted",
        "dd",
        "sha256sum",
        "partx",
        "losetup",
        "nbdkit",
        "nbdfuse",
    ];
    if !common::needs(true, &tools) {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/realign-crash-trials");
    let out = Command::new(script)
        .args(["10", "5"])
        .env("BLKALIGN", env!("CARGO_BIN_EXE_blkalign"))
        // On the disk (journals are refused on tmpfs), inside target/.
        .env("REALIGN_TRIALS_DIR", env!("CARGO_TARGET_TMPDIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let report = format!("{script} 10 5 exited {}:\n{stdout}\n{stderr}", out.status);
    assert!(out.status.success(), "{report}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("kills: "))
        .unwrap_or_else(|| panic!("no summary: {report}"));
    assert!(
        summary.contains("kills: 10/10 intact") && summary.contains("power cuts: 5/5 intact"),
        "{report}"
    );
    // Some of the 15 interruptions land mid-move (7 did in a run here): none
    // means the script no longer tells them apart, as when the resume
    // message became "resuming the copy" and every one counted as before.
    let mid: u32 = summary
        .split(" mid-move")
        .filter_map(|part| part.rsplit(' ').next()?.parse::<u32>().ok())
        .sum();
    assert!(mid > 0, "no kill or power cut counted mid-move: {report}");
}
