//! The kernel lab (scripts/kernel-lab, docs/kernel-lab.md): a distro kernel
//! booted in QEMU with the disks a test attaches, running a guest script of
//! tests/lab/ that writes JSON files to a directory the test then reads.

use super::needs;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// True when the lab can boot; otherwise notes why (and fails under strict).
pub fn ready() -> bool {
    let tools = ["vng", "qemu-system-x86_64", "busybox", "jq", "sfdisk", "parted"];
    if !needs(true, &tools) {
        return false;
    }
    let kernel = std::fs::read_dir("/boot")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"));
    if !kernel {
        super::skip("needs a kernel image in /boot (apt-get install linux-image-amd64)");
    }
    kernel
}

/// A working directory the guest can see: under target/ (the guest sees
/// it read-only, and `rw/` read-write; scripts/kernel-lab --ro, --rw).
pub struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Dir {
        let tmp = tempfile::Builder::new()
            .prefix("kernel-lab-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir");
        std::fs::create_dir(tmp.path().join("rw")).expect("rw directory");
        Dir { tmp }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Where the guest writes its results.
    pub fn rw(&self) -> PathBuf {
        self.tmp.path().join("rw")
    }

    /// A sparse raw image of `size` bytes.
    pub fn image(&self, name: &str, size: u64) -> PathBuf {
        let path = self.tmp.path().join(name);
        let f = std::fs::File::create(&path).expect("create image");
        f.set_len(size).expect("size image");
        path
    }

    /// Every JSON file the guest wrote, by file stem, with the text of the
    /// .err file beside it as "stderr".
    pub fn results(&self) -> Vec<(String, Value)> {
        let mut out: Vec<(String, Value)> = std::fs::read_dir(self.rw())
            .expect("read results")
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).expect("read result");
                let mut value: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|err| panic!("{}: {err}: {text}", e.path().display()));
                let err = std::fs::read_to_string(e.path().with_extension("err"));
                value["stderr"] = Value::String(err.unwrap_or_default());
                (e.path().file_stem().unwrap_or_default().to_string_lossy().into_owned(), value)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// Boot the lab with `disks` (DRIVER:LOGICAL:PHYSICAL:IMAGE:SERIAL) and run
/// tests/lab/`script` with `args` in the guest; panics with the guest's
/// output unless it exits 0. $BLKALIGN is the binary under test, built
/// as [`guest_binary`] says.
pub fn run(dir: &Dir, disks: &[String], script: &str, args: &[String]) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut cmd = lab_command(dir, disks);
    cmd.arg(format!("{root}/tests/lab/{script}"));
    cmd.args(args);
    let started = std::time::Instant::now();
    let text = boot(cmd, script);
    println!("kernel lab: {script} took {:.0} s", started.elapsed().as_secs_f64());
    text
}

/// One boot for several scripts (tests/lab/batch.sh): the lab with every
/// case's `disks`, then each `(script, args)` of tests/lab/ in turn, given
/// `dir.rw()/NAME` (NAME: the script's without .sh) before `args`, as
/// [`run`] would run it in a boot of its own (a boot costs about 25 s of
/// CPU under TCG). The cases must not share disks, serials, volume names or
/// files outside /tmp/state and /tmp/mnt. Panics with the output of each
/// script that did not exit 0.
pub fn run_batch(dir: &Dir, disks: &[String], scripts: &[(&str, &[&str])]) {
    let root = env!("CARGO_MANIFEST_DIR");
    let rw = dir.rw();
    let mut cmd = lab_command(dir, disks);
    cmd.arg(format!("{root}/tests/lab/batch.sh")).arg(&rw);
    for (i, (script, args)) in scripts.iter().enumerate() {
        if i > 0 {
            cmd.arg("--");
        }
        std::fs::create_dir_all(rw.join(name_of(script))).expect("a script's results directory");
        cmd.arg(script).args(*args);
    }
    let names: Vec<&str> = scripts.iter().map(|(script, _)| *script).collect();
    boot(cmd, &names.join(", "));
    let mut failed = Vec::new();
    for script in &names {
        let file = |ext: &str| {
            let path = rw.join("batch").join(format!("{}.{ext}", name_of(script)));
            std::fs::read_to_string(path).unwrap_or_default()
        };
        let status = file("status");
        let (code, seconds) = status.trim().split_once(' ').unwrap_or(("never ran", "0"));
        println!("kernel lab: {script} took {seconds} s");
        if code != "0" {
            failed.push(format!("{script} exited {code}:\n{}", file("log")));
        }
    }
    assert!(failed.is_empty(), "kernel lab: {}", failed.join("\n"));
}

/// `script`'s name without `.sh`: its results directory in a batch.
pub fn name_of(script: &str) -> &str {
    script.strip_suffix(".sh").unwrap_or(script)
}

/// scripts/kernel-lab with `disks` and `dir`, up to its command: `env
/// BLKALIGN=... bash`, the guest's copy of the binary under test.
fn lab_command(dir: &Dir, disks: &[String]) -> Command {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut cmd = Command::new(format!("{root}/scripts/kernel-lab"));
    // Generous: under TCG, with another boot beside it on two cores, a
    // batch runs at half speed (the MBR crash states took over 1500 s so).
    // The directory holds the binary's copy: --ro, as the guest may hide
    // where it is (a target directory under /var/tmp).
    let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
    cmd.args(["--timeout", "2700", "--ro", &path(dir.path()), "--rw", &path(&dir.rw())]);
    for disk in disks {
        cmd.args(["--disk", disk]);
    }
    // A copy: a build while the guest runs must not swap the binary under it.
    let binary = dir.path().join("blkalign");
    std::fs::copy(guest_binary(), &binary).expect("copy the binary");
    cmd.args(["--", "env", &format!("BLKALIGN={}", binary.display()), "bash"]);
    cmd
}

/// Run the lab's `cmd`; its output, or a panic naming `what` with it
/// unless the guest's command exited 0.
fn boot(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().expect("run scripts/kernel-lab");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kernel lab {what} exited {}:\n{text}", out.status);
    text
}

/// The blkalign the guest runs: this source's release build (`cargo build
/// --release --locked`, what scripts/build-deb packages; CI has built it by
/// the time `cargo test` runs, so this is a no-op there). Under TCG every
/// instruction is emulated: a crash state's rerun and audit cost 30 % less
/// than with the debug build (docs/performance.md). BLKALIGN_LAB_PROFILE=dev
/// runs the test's own debug build instead.
pub fn guest_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let debug = PathBuf::from(env!("CARGO_BIN_EXE_blkalign"));
            if std::env::var("BLKALIGN_LAB_PROFILE").is_ok_and(|p| p == "dev") {
                return debug;
            }
            // CARGO_BIN_EXE_blkalign is TARGET_DIR/debug/blkalign.
            let target = debug.parent().and_then(Path::parent).expect("a target directory");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--quiet", "--release", "--locked", "--bin", "blkalign"])
                .arg("--target-dir")
                .arg(target)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("run cargo build --release");
            assert!(status.success(), "cargo build --release for the guest failed: {status}");
            target.join("release").join("blkalign")
        })
        .clone()
}
