//! Ctrl-C during `realign --yes`: the move stops between chunks, says how
//! far it got and the exact command that finishes it, and exits 130; that
//! command finishes it, every byte intact. `--clean` then deletes the
//! finished journal, and never an unfinished one. No root, no peer tools:
//! the image's MBR is written here.

use crate::common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

tests![
    ctrl_c_stops_between_chunks_and_names_the_command_that_finishes,
];

const OLD_START: u64 = 63;
/// 256 MiB: 16 chunks, each saved in the journal and flushed (the shift is
/// under a chunk), so the move is still copying when the signal lands.
const SECTORS: u64 = 512 << 10;
const MIB: usize = 1 << 20;

/// MiB `i` of the partition: distinct per MiB, so a misplaced chunk shows.
fn mib(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// An image with one MBR partition of type 0x83 at LBA 63, filled.
fn make_image(path: &Path) {
    let f = File::create(path).unwrap();
    f.set_len((OLD_START + SECTORS + 4096) * 512).unwrap();
    let mut mbr = [0u8; 512];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&(OLD_START as u32).to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&(SECTORS as u32).to_le_bytes());
    mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    f.write_all_at(&mbr, 0).unwrap();
    for i in 0..SECTORS * 512 / MIB as u64 {
        f.write_all_at(&mib(i), OLD_START * 512 + i * MIB as u64).unwrap();
    }
    f.sync_all().unwrap();
}

/// Partition 1's start in the MBR, and whether its bytes there are the
/// original ones.
fn moved_intact(path: &Path) -> (u64, bool) {
    let f = File::open(path).unwrap();
    let mut entry = [0u8; 4];
    f.read_exact_at(&mut entry, 446 + 8).unwrap();
    let start = u64::from(u32::from_le_bytes(entry));
    let mut buf = vec![0u8; MIB];
    let intact = (0..SECTORS * 512 / MIB as u64).all(|i| {
        f.read_exact_at(&mut buf, start * 512 + i * MIB as u64).unwrap();
        buf == mib(i)
    });
    (start, intact)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn ctrl_c_stops_between_chunks_and_names_the_command_that_finishes() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = dir.path().join("state");
    let image = dir.path().join("disk.img");
    let img = image.to_str().unwrap();
    make_image(&image);
    let journal = dir.path().join("disk.img.blkalign-p1.journal");
    let blkalign = |args: &[&str]| {
        common::blkalign().env("BLKALIGN_STATE_DIR", &state).args(args).output().unwrap()
    };

    let child = Command::new(env!("CARGO_BIN_EXE_blkalign"))
        .env("BLKALIGN_STATE_DIR", &state)
        .args(["realign", img, "--yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The handler is in place before the journal exists.
    let started = Instant::now();
    while !journal.exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(130), "{said}");
    assert!(said.contains(&format!("interrupted: partition 1 of {img} is half-moved")), "{said}");
    let finish = said
        .lines()
        .find_map(|l| l.strip_prefix("Finish with: "))
        .unwrap_or_else(|| panic!("no command to finish: {said}"));
    assert_eq!(finish, format!("blkalign realign {img} 1 --yes"));

    // Unfinished: --clean keeps it, and says how to finish it.
    let clean = blkalign(&["realign", "--clean", img, "--yes"]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));
    assert!(text(&clean).contains("is unfinished: finish it with"), "{}", text(&clean));
    assert!(journal.exists(), "an unfinished journal was deleted");

    // A problem found (exit 1), not an error (2): the audit completed.
    let audit = blkalign(&["audit", "--json", img]);
    assert_eq!(audit.status.code(), Some(1), "{}", text(&audit));
    let target = &common::json_of(&audit.stdout)["targets"][0];
    assert!(target["error"].is_null(), "{target}");
    assert!(target["problems"].to_string().contains("realign_unfinished"), "{target}");
    common::check_schema("audit", &String::from_utf8_lossy(&audit.stdout));
    let unfinished = &target["unfinished_move"];
    assert_eq!((&unfinished["partition"], &unfinished["from"]), (&1.into(), &63.into()), "{target}");
    let human = blkalign(&["audit", img]);
    let said = text(&human);
    assert!(said.contains(&format!("hint: `{finish}` finishes the move")), "{said}");

    let words: Vec<&str> = finish.split_whitespace().collect();
    assert_eq!(words[0], "blkalign");
    let rerun = blkalign(&words[1..]);
    assert_eq!(rerun.status.code(), Some(0), "{}", text(&rerun));
    // Found by a user: "(Copying, …)", then "nothing to move" after moving.
    let said = text(&rerun);
    assert!(said.contains("resuming the copy of partition 1 at "), "{said}");
    assert!(!said.contains("Copying") && !said.contains("nothing to move"), "{said}");
    assert_eq!(moved_intact(&image), (2048, true));
    let audit = blkalign(&["audit", img]);
    assert_eq!(audit.status.code(), Some(0), "{}", text(&audit));

    // Another disk's finished move, journaled in the journal directory.
    let other = dir.path().join("other.img");
    File::create(&other).unwrap().set_len(16 << 20).unwrap();
    let mut mbr = [0u8; 512];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&(OLD_START as u32).to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&8000u32.to_le_bytes());
    mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    File::options().write(true).open(&other).unwrap().write_all_at(&mbr, 0).unwrap();
    std::fs::create_dir_all(state.join("journals")).unwrap();
    let elsewhere = state.join("journals/other.journal");
    let moved = blkalign(&[
        "realign",
        other.to_str().unwrap(),
        "--yes",
        "--journal",
        elsewhere.to_str().unwrap(),
    ]);
    assert_eq!(moved.status.code(), Some(0), "{}", text(&moved));

    // Finished: listed by the dry run, deleted with --yes; another disk's
    // journal is not TARGET's (found by a user), but listed without one.
    let dry = blkalign(&["realign", "--clean", img]);
    assert!(text(&dry).contains(&format!("would remove {}", journal.display())), "{}", text(&dry));
    assert!(!text(&dry).contains("other.journal"), "{}", text(&dry));
    let all = blkalign(&["realign", "--clean"]);
    assert!(text(&all).contains("other.journal"), "{}", text(&all));
    assert!(journal.exists(), "the dry run deleted");
    let clean = blkalign(&["realign", "--clean", img, "--yes"]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));
    assert!(text(&clean).contains(&format!("removed {}", journal.display())), "{}", text(&clean));
    assert!(!journal.exists());
    let again = blkalign(&["realign", "--clean", img]);
    assert!(text(&again).contains("no journals of finished moves"), "{}", text(&again));
    let audit = blkalign(&["audit", img]);
    assert_eq!(audit.status.code(), Some(0), "{}", text(&audit));
}
