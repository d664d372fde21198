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
    cmd.arg(format!("{root}/tests/lab/{script}"));
    cmd.args(args);
    let started = std::time::Instant::now();
    let out = cmd.output().expect("run scripts/kernel-lab");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("kernel lab: {script} took {:.0} s", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "kernel lab {script} exited {}:\n{text}", out.status);
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
