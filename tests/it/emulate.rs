//! `blkalign emulate`: every preset starts with the stated geometry and
//! penalty, and every way of ending a drive leaves nothing behind.

use crate::common;

use common::emulate::{paired_medians, queue_value, state_dir, AlignedBuf, EmulatedDrive};
use std::os::unix::fs::FileExt;

tests![
    presets_report_the_stated_geometry,
    custom_geometry,
    sfdisk_partitions_appear,
    power_cut_loses_exactly_the_unflushed_writes,
    stop_keeps_the_file_data,
    failing_lbas_fail_with_eio_and_only_they,
    pending_sectors_read_again_once_written_whole,
    stop_leaves_nothing_behind,
    stop_works_after_nbdkit_crashed,
    stop_all_cleans_up_after_crashed_callers,
    missing_tools_name_their_packages,
    bad_arguments_are_errors,
    // Timed: run first, one at a time (common/harness.rs).
    alone(
        wd_ears_penalises_misaligned_writes,
        jumper_is_fast_at_lba_7_and_slow_at_lba_0,
        native_512_and_4kn_have_no_penalty,
    ),
];

const TOOLS: &[&str] = &["nbdkit", "nbdfuse", "losetup"];

/// Writes per offset grid when timing; at ~1-5 ms each a test stays short.
const WRITES: u64 = 40;

/// The kernel's view of the drive, as sysfs shows it.
fn kernel_geometry(drive: &EmulatedDrive) -> (u64, u64) {
    let logical = queue_value(&drive.device, "logical_block_size");
    let physical = queue_value(&drive.device, "physical_block_size");
    (logical, physical)
}

fn presets_report_the_stated_geometry() {
    if !common::needs(true, TOOLS) {
        return;
    }
    // (preset, logical, physical, alignment offset, kernel's physical)
    let cases = [
        ("wd-ears", 512, 4096, 0, 512),
        ("wd-ears-jumper", 512, 4096, 3584, 512),
        ("4kn", 4096, 4096, 0, 4096),
        ("native-512", 512, 512, 0, 512),
    ];
    for (preset, logical, physical, offset, reported) in cases {
        let drive = EmulatedDrive::start(&["--preset", preset, "--size", "16MiB"]);
        assert_eq!(drive.json["preset"], preset);
        assert_eq!(drive.field("logical_sector_size"), logical, "{preset}");
        assert_eq!(drive.field("physical_sector_size"), physical, "{preset}");
        assert_eq!(drive.field("alignment_offset"), offset, "{preset}");
        assert_eq!(drive.field("reported_physical_sector_size"), reported, "{preset}");
        assert_eq!(kernel_geometry(&drive), (logical, reported), "{preset}");
        let mut dev = std::fs::File::open(&drive.device).expect("open device");
        let size = std::io::Seek::seek(&mut dev, std::io::SeekFrom::End(0)).expect("device size");
        assert_eq!(size, 16 << 20, "{preset}");
    }
}

fn custom_geometry() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let args =
        ["--physical", "16384", "--lowest-aligned", "8", "--latency-ms", "0", "--size", "16MiB"];
    let drive = EmulatedDrive::start(&args);
    assert_eq!(drive.json["preset"], "custom");
    assert_eq!(drive.field("logical_sector_size"), 512);
    assert_eq!(drive.field("physical_sector_size"), 16384);
    assert_eq!(drive.field("alignment_offset"), 4096);
    assert_eq!(kernel_geometry(&drive), (512, 512));
}

fn wd_ears_penalises_misaligned_writes() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let drive = EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB"]);
    let file = drive.open_direct();
    let [aligned, misaligned] = paired_medians(&file, [0, 512], 8192, WRITES);
    let ratio = misaligned.as_secs_f64() / aligned.as_secs_f64();
    eprintln!("wd-ears: aligned {aligned:?}, misaligned {misaligned:?}, ratio {ratio:.2}");
    assert!(ratio >= 2.5, "misaligned/aligned = {ratio:.2}");
}

fn jumper_is_fast_at_lba_7_and_slow_at_lba_0() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let drive = EmulatedDrive::start(&["--preset", "wd-ears-jumper", "--size", "64MiB"]);
    let file = drive.open_direct();
    let [at_0, at_3584] = paired_medians(&file, [0, 3584], 8192, WRITES);
    let ratio = at_0.as_secs_f64() / at_3584.as_secs_f64();
    eprintln!("jumper: offset 3584 {at_3584:?}, offset 0 {at_0:?}, ratio {ratio:.2}");
    assert!(ratio >= 2.5, "slow/fast = {ratio:.2}");
}

fn native_512_and_4kn_have_no_penalty() {
    if !common::needs(true, TOOLS) {
        return;
    }
    // (preset, first grid, second grid): the second is as misaligned as the
    // drive's logical sectors allow.
    for (preset, second) in [("native-512", 512), ("4kn", 4096)] {
        let drive = EmulatedDrive::start(&["--preset", preset, "--size", "64MiB"]);
        let file = drive.open_direct();
        let [first, other] =
            paired_medians(&file, [0, second], 8192, WRITES).map(|d| d.as_secs_f64());
        let spread = (first - other).abs() / first.min(other);
        eprintln!("{preset}: {first:.4}s vs {other:.4}s");
        assert!(spread <= 0.3, "{preset}: timings differ by {:.0} %", spread * 100.0);
    }
}

fn sfdisk_partitions_appear() {
    if !common::needs(true, &["nbdkit", "nbdfuse", "losetup", "sfdisk", "partx"]) {
        return;
    }
    let drive =
        EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB", "--latency-ms", "0"]);
    common::run_stdin("sfdisk", &[drive.str()], Some("label: gpt\nstart=2048, size=16MiB\n"));
    common::add_partitions(drive.str(), 1);
    assert!(drive.partition(1).exists());
}

/// Fills `len` bytes at `offset` with `byte`, O_DIRECT.
fn fill(file: &std::fs::File, offset: u64, len: usize, byte: u8) {
    let buf = AlignedBuf::new(len, byte);
    file.write_all_at(buf.bytes(), offset).expect("pwrite");
}

/// Whether `len` bytes at `offset` are all `byte`.
fn holds(file: &std::fs::File, offset: u64, len: usize, byte: u8) -> bool {
    let mut buf = AlignedBuf::new(len, !byte);
    file.read_exact_at(buf.bytes_mut(), offset).expect("pread");
    buf.bytes().iter().all(|&b| b == byte)
}

fn power_cut_loses_exactly_the_unflushed_writes() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let platter = dir.path().join("platter.img");
    let platter = platter.to_str().expect("utf-8 path");
    let args = [
        "--preset",
        "wd-ears",
        "--size",
        "64MiB",
        "--file",
        platter,
        "--volatile-cache",
        "--latency-ms",
        "0",
    ];
    let drive = EmulatedDrive::start(&args);
    let file = drive.open_direct();
    // A, and the old contents of B's region: written and flushed.
    fill(&file, 1 << 20, 65536, 0xaa);
    fill(&file, 8 << 20, 65536, 0x11);
    file.sync_all().expect("flush");
    // B (misaligned, as a repair tool's would be): never flushed.
    fill(&file, (8 << 20) + 512, 32768, 0xbb);
    assert!(holds(&file, (8 << 20) + 512, 32768, 0xbb), "the cache serves B before the cut");
    drop(file);
    drive.power_cut();

    let drive =
        EmulatedDrive::start(&["--preset", "wd-ears", "--file", platter, "--latency-ms", "0"]);
    let file = drive.open_direct();
    assert!(holds(&file, 1 << 20, 65536, 0xaa), "flushed data A survives");
    assert!(holds(&file, 8 << 20, 65536, 0x11), "unflushed B is lost; the old data remains");
}

fn stop_keeps_the_file_data() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let platter = dir.path().join("platter.img");
    let platter = platter.to_str().expect("utf-8 path");
    let args =
        ["--preset", "wd-ears-jumper", "--size", "16MiB", "--file", platter, "--volatile-cache"];
    let drive = EmulatedDrive::start(&args);
    fill(&drive.open_direct(), 4096, 4096, 0x42);
    drive.stop();
    let drive = EmulatedDrive::start(&["--preset", "wd-ears-jumper", "--file", platter]);
    assert_eq!(drive.field("size") as u64, 16 << 20, "the size comes from the file");
    assert!(holds(&drive.open_direct(), 4096, 4096, 0x42), "stop flushes the cache");
}

fn failing_lbas_fail_with_eio_and_only_they() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let args =
        ["--preset", "wd-ears", "--size", "16MiB", "--fail-lba", "1000-1999", "--latency-ms", "0"];
    let drive = EmulatedDrive::start(&args);
    let file = drive.open_direct();
    let mut buf = AlignedBuf::new(4096, 0);
    for (lba, bad) in [(992, false), (1000, true), (1992, true), (2000, false)] {
        let result = file.read_exact_at(buf.bytes_mut(), lba * 512);
        match (result, bad) {
            (Ok(()), false) => {}
            (Err(err), true) => assert_eq!(err.raw_os_error(), Some(5), "LBA {lba}: {err}"),
            (result, _) => panic!("reading LBA {lba}: {result:?}"),
        }
    }
    let write = file.write_all_at(AlignedBuf::new(4096, 1).bytes(), 1500 * 512);
    assert_eq!(write.expect_err("writing a bad LBA").raw_os_error(), Some(5));
    fill(&file, 4096, 4096, 7);
    assert!(holds(&file, 4096, 4096, 7), "good sectors still work");
}

/// `--until-written`: a worn drive's pending sectors. Reads of them fail,
/// as does a write of part of one (the drive must read it first); a write
/// of a whole physical sector remaps it, and it reads back what was written.
fn pending_sectors_read_again_once_written_whole() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let args = [
        "--preset",
        "wd-ears",
        "--size",
        "16MiB",
        "--fail-lba",
        "1000-1015",
        "--until-written",
        "--latency-ms",
        "0",
    ];
    let drive = EmulatedDrive::start(&args);
    assert_eq!(drive.json["until_written"], true, "{}", drive.json);
    let file = drive.open_direct();
    let mut buf = AlignedBuf::new(4096, 0);
    let eio = |r: std::io::Result<()>| r.expect_err("EIO").raw_os_error() == Some(5);
    assert!(eio(file.read_exact_at(buf.bytes_mut(), 1000 * 512)));
    assert!(eio(file.read_exact_at(buf.bytes_mut(), 1008 * 512)));
    let part = AlignedBuf::new(512, 3);
    assert!(eio(file.write_all_at(part.bytes(), 1001 * 512)), "a partial write reads first");
    fill(&file, 1000 * 512, 4096, 9);
    assert!(holds(&file, 1000 * 512, 4096, 9), "remapped by the write");
    assert!(eio(file.read_exact_at(buf.bytes_mut(), 1008 * 512)), "the next one still pending");
}

/// Whether `pid` is alive (a zombie is not: it holds nothing).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

fn stop_leaves_nothing_behind() {
    if !common::needs(true, TOOLS) {
        return;
    }
    for cut in [false, true] {
        let drive =
            EmulatedDrive::start(&["--preset", "wd-ears", "--size", "16MiB", "--volatile-cache"]);
        let record_path = state_dir().join(format!("{}.json", drive.id));
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&record_path).expect("record"))
                .expect("JSON record");
        let pids: Vec<u64> =
            ["nbdkit_pid", "nbdfuse_pid"].iter().map(|k| record[k].as_u64().expect(k)).collect();
        let mount = state_dir().join(&drive.id).join("mnt");
        let listed = common::blkalign().args(["emulate", "list", "--json"]).output().expect("list");
        assert!(String::from_utf8_lossy(&listed.stdout).contains(&drive.id));
        common::check_schema("emulate", &String::from_utf8_lossy(&listed.stdout));
        common::json_of(&listed.stdout);
        let (id, device) = (drive.id.clone(), drive.str().to_string());
        if cut {
            drive.power_cut()
        } else {
            drive.stop()
        }

        let loops = common::run("losetup", &["-a"]);
        let loops = String::from_utf8_lossy(&loops.stdout);
        assert!(!loops.contains(&format!("/{id}/mnt/")), "{device} left attached: {loops}");
        let mounts = std::fs::read_to_string("/proc/mounts").expect("mounts");
        assert!(!mounts.contains(mount.to_str().expect("utf-8")), "mount left: {mounts}");
        assert!(pids.iter().all(|&pid| !alive(pid)), "process left: {pids:?}");
        assert!(!record_path.exists() && !state_dir().join(&id).exists(), "state left");
        common::blkalign().args(["emulate", "stop", &id]).assert().code(2);
    }
}

fn stop_works_after_nbdkit_crashed() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let drive =
        EmulatedDrive::start(&["--preset", "wd-ears", "--size", "16MiB", "--volatile-cache"]);
    let record = std::fs::read_to_string(state_dir().join(format!("{}.json", drive.id)));
    let record: serde_json::Value = serde_json::from_str(&record.expect("record")).expect("JSON");
    let pid = record["nbdkit_pid"].as_u64().and_then(|p| i32::try_from(p).ok());
    let pid = pid.and_then(rustix::process::Pid::from_raw).expect("nbdkit pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill nbdkit");
    let listed = common::blkalign().args(["emulate", "list"]).output().expect("list");
    assert_eq!(listed.status.code(), Some(1), "a broken drive is a problem");
    let id = drive.id.clone();
    drive.stop();
    assert!(!state_dir().join(format!("{id}.json")).exists());
}

fn stop_all_cleans_up_after_crashed_callers() {
    if !common::needs(true, TOOLS) {
        return;
    }
    // A private state dir, so this never stops other tests' drives.
    let state = tempfile::tempdir().expect("tempdir");
    let blkalign = |args: &[&str]| {
        let mut cmd = common::blkalign();
        cmd.env("BLKALIGN_EMULATE_DIR", state.path()).args(args);
        cmd
    };
    let out = blkalign(&["emulate", "start", "--preset", "4kn", "--size", "16MiB", "--json"])
        .output()
        .expect("start");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    common::check_schema("emulate", &String::from_utf8_lossy(&out.stdout));
    let started = common::json_of(&out.stdout);
    // A caller that died just after claiming an id, and one that lost its record.
    std::fs::write(state.path().join("emu1.json"), "").expect("half record");
    std::fs::create_dir_all(state.path().join("emu2/mnt")).expect("orphan dir");

    blkalign(&["emulate", "stop", "--all"]).assert().success();
    let left: Vec<_> = std::fs::read_dir(state.path()).expect("state dir").collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let device = started["device"].as_str().expect("device");
    let backing = format!("/sys/block/{}/loop/backing_file", &device[5..]);
    let still = std::fs::read_to_string(backing).unwrap_or_default();
    assert!(!still.contains(state.path().to_str().expect("utf-8")), "loop left: {still}");
}

fn missing_tools_name_their_packages() {
    let out = common::blkalign()
        .env("PATH", "/nonexistent")
        .args(["emulate", "start", "--preset", "wd-ears"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for package in ["nbdkit", "libnbd-bin", "fuse3"] {
        assert!(stderr.contains(package), "{package} not named in: {stderr}");
    }
}

fn bad_arguments_are_errors() {
    for args in [
        &["--preset", "wd-eadrs"][..],
        &["--preset", "wd-ears", "--size", "1.5.0G"],
        &["--physical", "3000"],
        &["--preset", "wd-ears", "--fail-lba", "9-3"],
    ] {
        common::blkalign().args(["emulate", "start"]).args(args).assert().code(2);
    }
}
