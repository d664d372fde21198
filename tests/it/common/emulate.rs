//! Emulated Advanced Format drives for integration tests, and O_DIRECT
//! helpers to talk to them as a misaligned filesystem would.
//!
//! ```ignore
//! if !common::needs(true, &["nbdkit", "nbdfuse", "losetup"]) { return; }
//! let drive = EmulatedDrive::start(&["--preset", "wd-ears", "--size", "64MiB"]);
//! // drive.device is /dev/loopN; it is stopped when `drive` drops.
//! ```

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A drive started with `blkalign emulate start --json`, stopped with
/// `blkalign emulate stop` on drop (panics included).
pub struct EmulatedDrive {
    pub device: PathBuf,
    pub id: String,
    /// Everything `start --json` printed.
    pub json: serde_json::Value,
    stopped: bool,
}

impl EmulatedDrive {
    /// Starts a drive; `args` are those of `blkalign emulate start`.
    pub fn start(args: &[&str]) -> EmulatedDrive {
        let out = super::blkalign()
            .args(["emulate", "start", "--json"])
            .args(args)
            .output()
            .expect("run blkalign");
        assert!(
            out.status.success(),
            "emulate start {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("start --json prints JSON");
        let id = json["id"].as_str().expect("id").to_string();
        let device = PathBuf::from(json["device"].as_str().expect("device"));
        EmulatedDrive { device, id, json, stopped: false }
    }

    pub fn str(&self) -> &str {
        self.device.to_str().expect("utf-8 device path")
    }

    /// A number from the `start --json` output.
    pub fn field(&self, name: &str) -> u64 {
        self.json[name].as_u64().unwrap_or_else(|| panic!("no {name} in {}", self.json))
    }

    /// The node of partition `n` (/dev/loopNpM).
    pub fn partition(&self, n: u32) -> PathBuf {
        PathBuf::from(format!("{}p{n}", self.str()))
    }

    /// Stops the drive now, asserting that it stops cleanly.
    pub fn stop(mut self) {
        self.stopped = true;
        super::blkalign().args(["emulate", "stop", &self.id]).assert().success();
    }

    /// Ends the drive without flushing its volatile cache.
    pub fn power_cut(mut self) {
        self.stopped = true;
        super::blkalign().args(["emulate", "power-cut", &self.id]).assert().success();
    }

    /// Opens the device for O_DIRECT reads and writes.
    pub fn open_direct(&self) -> File {
        open_direct(&self.device)
    }
}

impl Drop for EmulatedDrive {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = super::blkalign().args(["emulate", "stop", &self.id]).output();
        }
    }
}

/// How many times a probe test runs the probe while it says the timings
/// were too noisy to decide, as it tells its users to: a 2-core machine
/// can be that noisy even alone (in one `.ci/run` a single run failed a
/// schema test; in another `audit --probe` decided only at its third).
pub const PROBE_RUNS: usize = 5;

/// `blkalign ARGS` (a probe), run again, [`PROBE_RUNS`] in all, while it
/// says "inconclusive" (exit 2). A wrong answer is not retried.
pub fn run_probe(args: &[&str]) -> std::process::Output {
    let run = || super::blkalign().args(args).output().expect("run probe");
    let mut out = run();
    for _ in 1..PROBE_RUNS {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() != Some(2) || !stderr.contains("inconclusive") {
            break;
        }
        eprintln!("probe inconclusive, run again: {stderr}");
        out = run();
    }
    out
}

/// Opens `path` with O_DIRECT, so each request reaches the emulator as is.
pub fn open_direct(path: &Path) -> File {
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(direct)
        .open(path)
        .unwrap_or_else(|e| panic!("open {} O_DIRECT: {e}", path.display()))
}

pub use blkalign::io::AlignedBuf;

/// How long one O_DIRECT write of `buf` at `offset` takes.
pub fn time_write(file: &File, offset: u64, buf: &AlignedBuf) -> Duration {
    let begin = Instant::now();
    file.write_all_at(buf.bytes(), offset).unwrap_or_else(|e| panic!("pwrite at {offset}: {e}"));
    begin.elapsed()
}

/// Median times of 4 KiB O_DIRECT writes on two grids, `bases[0] + i *
/// step` and `bases[1] + i * step`, taken in turns: load that comes and
/// goes (other tests, a build) weighs on both alike.
pub fn paired_medians(file: &File, bases: [u64; 2], step: u64, count: u64) -> [Duration; 2] {
    let buf = AlignedBuf::new(4096, 0x5a);
    let mut times: [Vec<Duration>; 2] = Default::default();
    for i in 0..count {
        for (grid, base) in bases.iter().enumerate() {
            times[grid].push(time_write(file, base + i * step, &buf));
        }
    }
    times.map(|mut t| {
        t.sort();
        t[t.len() / 2]
    })
}

/// A value from /sys/block/loopN/queue/.
pub fn queue_value(device: &Path, name: &str) -> u64 {
    let dev = device.file_name().and_then(|n| n.to_str()).expect("device name");
    let path = format!("/sys/block/{dev}/queue/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim().parse().unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The state directory `blkalign emulate` uses in this environment (not
/// every test binary asks for it).
#[allow(unused_imports)]
pub use blkalign::emulate::state_dir;
