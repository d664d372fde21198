//! A move over a failing disk, on the real kernel's own fault injector
//! (docs/kernel-lab.md): scsi_debug's medium errors on one 4 KiB block of a
//! file in an ext4 at LBA 63 (tests/lab/faults.sh). The read check refuses
//! the move with nothing written, naming the file; a move that meets the
//! error half-way is undone to the partition's exact bytes; a rescued move
//! zero-fills exactly the failing sectors, which its GNU ddrescue map lists
//! as ddrescuelog reads it, and the file they hit equals the original with
//! that block zeroed. A write error from a device-mapper `error` segment
//! stops the move naming the LBA, and `--undo`, or a rerun once the table
//! is linear again, ends in the partition whole. Each finished journal is
//! a few KiB holding none of the partition's bytes.

mod common;

use common::lab;
use serde_json::Value;

#[test]
fn a_failing_disk_cannot_corner_a_move() {
    let tools = ["mkfs.ext4", "e2fsck", "debugfs", "ddrescuelog"];
    if !lab::ready() || !common::needs(true, &tools) {
        return;
    }
    let dir = lab::Dir::new();
    let file: Vec<u8> =
        (0..2_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(dir.rw().join("f.bin"), &file).expect("f.bin");
    lab::run(&dir, &[], "faults.sh", &[dir.rw().display().to_string()]);
    let rw = dir.rw();
    let text = |name: &str| std::fs::read_to_string(rw.join(name)).unwrap_or_default();
    let json = |name: &str| -> Value {
        serde_json::from_str(&text(name))
            .unwrap_or_else(|e| panic!("{name}: {e}\nbuild.err:\n{}", text("build.err")))
    };
    let said =
        |name: &str| format!("{}{}", text(&format!("{name}.out")), text(&format!("{name}.err")));

    let refused = json("refused.json");
    let bad = refused["bad"].as_u64().expect("bad LBA");
    assert_eq!(refused["exit"], 2, "{}", said("refused"));
    assert_eq!(refused["unchanged"], true, "the disk was written: {refused}");
    let words = said("refused");
    let named = format!("LBA {bad}-{} (8 sectors) cannot be read", bad + 7);
    assert!(words.contains(&named) && words.contains("/f.bin"), "{named}: {words}");

    let undone = json("undone.json");
    assert_eq!(undone["stop"], 2, "{}", said("stopped"));
    let stopped = said("stopped");
    assert!(stopped.contains("--undo") && stopped.contains("--rescue"), "{stopped}");
    assert!(undone["status"]["chunks_done"].as_u64() >= Some(1), "something moved: {undone}");
    assert_eq!(undone["exit"], 0, "{}", said("undone"));
    assert_eq!(
        (&undone["start"], &undone["same"], &undone["fsck"]),
        (&Value::from(63), &Value::from(true), &Value::from(0)),
        "{undone}\n{}",
        text("undone.fsck")
    );
    assert_journal_clean(&undone);

    let rescued = json("rescued.json");
    assert_eq!(rescued["exit"], 0, "{}", said("rescued"));
    let listed: Vec<u64> = text("rescued.list").lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(listed, (bad..bad + 8).collect::<Vec<_>>(), "ddrescuelog -l- of the map");
    let result: Value = serde_json::from_str(&text("rescued.out")).expect("realign --json");
    assert!(result["rescued"]["holders"].to_string().contains("/f.bin"), "{result}");
    assert_eq!(
        (&rescued["start"], &rescued["fsck"], &rescued["marker_same"]),
        (&Value::from(83968), &Value::from(0), &Value::from(true)),
        "{rescued}\n{}",
        text("rescued.fsck")
    );
    let moved = std::fs::read(rw.join("f.rescued")).expect("f.bin as moved");
    let expected = std::fs::read(rw.join("f.expected")).expect("f.bin, its bad block zeroed");
    assert_ne!(expected, file);
    assert!(moved == expected, "f.bin after the rescue is not the original with block 10 zeroed");
    assert_journal_clean(&rescued);

    // A write error (a device-mapper error segment where the first chunk
    // lands) stops the move; --undo, or the same command once the fault is
    // gone (the table reloaded linear), ends in a whole partition.
    for way in ["undo", "rerun"] {
        let r = json(&format!("write-{way}.json"));
        let stopped = said(&format!("write-{way}-stopped"));
        assert_eq!(r["stop"], 2, "{stopped}");
        assert!(stopped.contains("I/O error writing LBA 81000"), "names the LBA: {stopped}");
        assert_eq!(r["exit"], 0, "{}", said(&format!("write-{way}")));
        assert_eq!(
            (&r["start"], &r["same"], &r["fsck"]),
            (&r["expected_start"], &Value::from(true), &Value::from(0)),
            "{way}: {r}\n{}",
            text(&format!("write-{way}.fsck"))
        );
        assert_journal_clean(&r);
    }
}

/// A finished journal keeps its record only: a few KiB, no user bytes.
fn assert_journal_clean(result: &Value) {
    let bytes = result["journal_bytes"].as_i64().expect("journal size");
    assert!((0..64 << 10).contains(&bytes), "journal of {bytes} bytes: {result}");
    assert_eq!(result["journal_has_marker"], false, "user bytes in the journal: {result}");
}
