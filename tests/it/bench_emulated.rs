//! `blkalign bench` on emulated drives: the penalty shows, default writes
//! change nothing, and unsafe writes are refused.

use crate::common;

use common::emulate::EmulatedDrive;
use std::io::Write;
use std::sync::Mutex;

tests![
    // Timed: run first, one at a time (common/harness.rs).
    alone(
        random_on_wd_ears_shows_the_penalty,
        default_writes_leave_every_byte_unchanged,
        destructive_needs_yes,
        mounted_target_is_refused,
        image_attached_to_a_loop_device_is_refused,
        oversized_workloads_are_refused,
        phybs_matrix_and_svg,
        io_uring_engine,
    ),
];

const TOOLS: &[&str] = &["nbdkit", "nbdfuse", "losetup"];

/// Timing tests disturb each other on two cores: one bench at a time.
static TIMING: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    TIMING.lock().unwrap_or_else(|e| e.into_inner())
}

fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = common::blkalign().arg("bench").args(args).arg("--json").output().expect("run bench");
    assert!(out.status.success(), "bench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("bench --json prints JSON")
}

/// Fills the device with bytes that differ everywhere, so a write of
/// anything else would show.
fn fill(path: &std::path::Path, size: usize) {
    let mut data = vec![0u8; size];
    let mut x: u32 = 0x1234_5678;
    for byte in &mut data {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *byte = x as u8;
    }
    let mut file = std::fs::OpenOptions::new().write(true).open(path).expect("open device");
    file.write_all(&data).expect("fill device");
    file.sync_all().expect("sync device");
}

fn random_on_wd_ears_shows_the_penalty() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let _serial = serial();
    let drive = EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB"]);
    let json = bench_json(&[drive.str(), "--pattern", "random", "--count", "200"]);
    assert_eq!(json["version"], 1);
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "offsets 0 and 512 by default");
    for r in results {
        for key in ["size", "offset", "step", "count", "msec", "iops", "kbps"] {
            assert!(r[key].is_number(), "{key} in {r}");
        }
        assert!(r["lat_us"]["p50"].is_number() && r["lat_us"]["p95"].is_number(), "{r}");
        assert_eq!(r["count"], 200);
    }
    let wall = json["wall_s"].as_f64().expect("wall_s");
    let throughput = json["throughput_iops"].as_f64().expect("throughput_iops");
    assert!(wall > 0.0 && (throughput * wall - 400.0).abs() < 1.0, "{json}");
    let ratio = &json["ratios"][0];
    eprintln!("wd-ears random: {ratio}");
    assert_eq!(
        (ratio["fast_offset"].as_u64(), ratio["slow_offset"].as_u64()),
        (Some(0), Some(512))
    );
    assert!(ratio["ratio"].as_f64().expect("ratio") >= 2.5, "{ratio}");
}

fn default_writes_leave_every_byte_unchanged() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let _serial = serial();
    let drive =
        EmulatedDrive::start(&["--preset", "wd-ears", "--size", "16MiB", "--latency-ms", "0"]);
    fill(&drive.device, 16 << 20);
    let before = common::sha256_file(&drive.device);
    bench_json(&[drive.str(), "--pattern", "random", "--count", "300"]);
    bench_json(&[drive.str(), "--pattern", "phybs", "--count", "20"]);
    bench_json(&[drive.str(), "--pattern", "stride", "--total", "256KiB", "--stride", "8KiB"]);
    bench_json(&[drive.str(), "--engine", "io_uring", "--iodepth", "8", "--count", "200"]);
    // With no latency the answer may be "inconclusive"; either way it wrote.
    let probe = common::blkalign().args(["probe", drive.str()]).output().expect("run probe");
    let err = String::from_utf8_lossy(&probe.stderr);
    assert!(probe.status.code().is_some_and(|c| c <= 1) || err.contains("inconclusive"), "{err}");
    assert_eq!(common::sha256_file(&drive.device), before, "a default bench or probe changed the data");
}

fn destructive_needs_yes() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let drive =
        EmulatedDrive::start(&["--preset", "native-512", "--size", "16MiB", "--latency-ms", "0"]);
    fill(&drive.device, 1 << 20);
    let before = common::sha256_file(&drive.device);
    let args = ["bench", drive.str(), "--destructive", "--count", "10"];
    common::blkalign().args(args).assert().code(2).stderr(predicates::str::contains("--yes"));
    assert_eq!(common::sha256_file(&drive.device), before);
    common::blkalign().args(args).arg("--yes").assert().success();
    assert_ne!(common::sha256_file(&drive.device), before, "--destructive --yes writes its pattern");
}

fn mounted_target_is_refused() {
    if !common::needs(true, &["nbdkit", "nbdfuse", "losetup", "mkfs.ext4", "mount", "umount"]) {
        return;
    }
    let drive =
        EmulatedDrive::start(&["--preset", "native-512", "--size", "16MiB", "--latency-ms", "0"]);
    common::run("mkfs.ext4", &["-q", "-F", drive.str()]);
    let dir = tempfile::tempdir().expect("tempdir");
    let point = dir.path().to_str().expect("utf-8 path");
    common::run("mount", &[drive.str(), point]);
    let bench = common::blkalign().args(["bench", drive.str(), "--count", "5"]).output();
    let probe = common::blkalign().args(["probe", drive.str()]).output();
    let read = common::blkalign().args(["bench", drive.str(), "--read", "--count", "5"]).output();
    common::run("umount", &[point]);
    for out in [bench, probe] {
        let out = out.expect("run blkalign");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("in use") && stderr.contains(point), "{stderr}");
    }
    assert!(read.expect("run blkalign").status.success(), "reading a mounted device is fine");
}

/// A regular file behind a loop device: writing it behind the device's
/// back could undo a mounted file system's writes.
fn image_attached_to_a_loop_device_is_refused() {
    if !common::needs(true, &["losetup"]) {
        return;
    }
    let image = common::Image::new(16 << 20);
    let attached = common::Loop::attach(&image.path, 512);
    let bench = common::blkalign().args(["bench", image.str(), "--count", "5"]).output();
    let out = bench.expect("run blkalign");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("in use") && stderr.contains(attached.str()), "{stderr}");
    // probe refuses every regular file (tests/it/probe_emulated.rs), attached or not.
    let probe = common::blkalign().args(["probe", image.str()]).output().expect("run probe");
    assert_eq!(probe.status.code(), Some(2));
    let read = common::blkalign().args(["bench", image.str(), "--read", "--count", "5"]).output();
    assert!(read.expect("run blkalign").status.success(), "reading it is fine");
}

/// Sizes and counts that would exhaust memory are refused up front.
fn oversized_workloads_are_refused() {
    let image = common::Image::new(1 << 20);
    for args in [
        ["--size", "128MiB", "--count", "1"],
        ["--size", "4096", "--count", "18446744073709551615"],
        ["--size", "4096", "--count", "0"],
    ] {
        let out = common::blkalign().arg("bench").arg(image.str()).args(args).output();
        let out = out.expect("run blkalign");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    }
    let out = common::blkalign().args(["bench", image.str(), "--size", "4 parsecs"]).output();
    let stderr = String::from_utf8_lossy(&out.expect("run blkalign").stderr).into_owned();
    assert!(stderr.contains("not a size"), "{stderr}");
}

fn phybs_matrix_and_svg() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let drive =
        EmulatedDrive::start(&["--preset", "wd-ears", "--size", "16MiB", "--latency-ms", "0"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("penalty.svg");
    let svg_arg = svg.to_str().expect("utf-8 path");
    let json = bench_json(&[drive.str(), "--pattern", "phybs", "--count", "5", "--svg", svg_arg]);
    let cells: Vec<(u64, u64, u64)> = json["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                r["size"].as_u64().unwrap_or(0),
                r["offset"].as_u64().unwrap_or(0),
                r["step"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(cells.len(), 15, "sizes 512..4096, every 512-byte offset below each");
    assert!(cells.contains(&(4096, 3584, 16384)) && cells.contains(&(1024, 512, 4096)));
    let text = std::fs::read_to_string(&svg).expect("svg written");
    assert!(text.starts_with("<svg") && text.matches("<polyline").count() == 4, "{text}");
}

/// io_uring at depth 1 measures what psync does; at depth 8 the report
/// says so and the penalty still shows, blunted: interleaved cells share
/// the queue, so aligned requests wait behind misaligned ones.
fn io_uring_engine() {
    if !common::needs(true, TOOLS) {
        return;
    }
    let _serial = serial();
    let drive = EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB"]);
    for (depth, least) in [("1", 2.5), ("8", 1.3)] {
        let json = bench_json(&[
            drive.str(),
            "--engine",
            "io_uring",
            "--iodepth",
            depth,
            "--count",
            "200",
        ]);
        assert_eq!(json["engine"], "io_uring", "io_uring must work on this machine: {json}");
        assert_eq!(json["iodepth"].to_string(), depth);
        let ratio = json["ratios"][0]["ratio"].as_f64().expect("ratio");
        assert!(ratio >= least, "depth {depth}: {json}");
    }
    // The run's own throughput: all requests over the timed wall time.
    let deep =
        bench_json(&[drive.str(), "--engine", "io_uring", "--iodepth", "8", "--count", "200"]);
    let (wall, throughput) = (deep["wall_s"].as_f64(), deep["throughput_iops"].as_f64());
    let (wall, throughput) = (wall.expect("wall_s"), throughput.expect("throughput_iops"));
    assert!(wall > 0.0 && (throughput * wall - 400.0).abs() < 1.0, "{deep}");
    let psync = bench_json(&[drive.str(), "--count", "200"]);
    let uring = bench_json(&[drive.str(), "--engine", "io_uring", "--count", "200"]);
    let iops = |j: &serde_json::Value| j["results"][0]["iops"].as_f64().expect("iops");
    let agreement = iops(&uring) / iops(&psync);
    assert!(
        (0.8..1.25).contains(&agreement),
        "depth 1: io_uring {} vs psync {}",
        iops(&uring),
        iops(&psync)
    );
}
