//! Helpers shared by the integration tests.
//!
//! Tests that need root, loop devices or peer tools call [`needs`] first:
//! it returns false when something is missing, so the test returns early,
//! and notes why ([`skip`]): the harness reports the test as ignored with
//! that reason, not as passed. With `BLKALIGN_TEST_STRICT=1` (as in CI) it
//! panics instead, so nothing that should run can quietly skip.
#![allow(dead_code)]

#[macro_use]
pub mod harness;

pub use harness::skip;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn strict() -> bool {
    std::env::var("BLKALIGN_TEST_STRICT").is_ok_and(|v| v == "1")
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub use blkalign::emulate::which;

/// True when the test can run; otherwise notes why ([`skip`]), and fails
/// under strict.
pub fn needs(root: bool, tools: &[&str]) -> bool {
    let mut missing: Vec<String> = Vec::new();
    if root && !is_root() {
        missing.push("root".into());
    }
    if root && !Path::new("/dev/loop-control").exists() {
        missing.push("/dev/loop-control".into());
    }
    let absent: Vec<&str> = tools.iter().copied().filter(|t| which(t).is_none()).collect();
    if !absent.is_empty() {
        missing.push(format!("{} on PATH", absent.join(", ")));
    }
    if missing.is_empty() {
        return true;
    }
    skip(format!("needs {}", missing.join(", ")));
    false
}

/// Held while a test audits VM images (their exports mount as
/// blkalign-image-*): vm_images counts those mounts, so no other test's
/// may come and go meanwhile.
pub static IMAGE_EXPORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run a command, panicking with its output if it fails.
pub fn run(program: &str, args: &[&str]) -> Output {
    run_stdin(program, args, None)
}

/// Run a command with `stdin` as its input, panicking if it fails.
pub fn run_stdin(program: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let out = run_unchecked(program, args, stdin);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run a command with `stdin` as its input, whatever its exit status.
pub fn run_unchecked(program: &str, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let exe = which(program).unwrap_or_else(|| PathBuf::from(program));
    let mut child = Command::new(&exe)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let mut pipe = child.stdin.take().expect("stdin is piped");
    if let Some(text) = stdin {
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(pipe);
    child.wait_with_output().expect("wait")
}

/// A sparse image file of `size` bytes in its own temporary directory.
pub struct Image {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Image {
    pub fn new(size: u64) -> Image {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("disk.img");
        let file = std::fs::File::create(&path).expect("create image");
        file.set_len(size).expect("size image");
        Image { _dir: dir, path }
    }

    /// An image partitioned by `sfdisk` from `script`.
    pub fn sfdisk(size: u64, script: &str) -> Image {
        let image = Image::new(size);
        run_stdin("sfdisk", &["--no-reread", "--no-tell-kernel", image.str()], Some(script));
        image
    }

    pub fn str(&self) -> &str {
        self.path.to_str().expect("utf-8 temp path")
    }
}

/// A loop device attached to a file, detached on drop (panics included).
pub struct Loop {
    pub dev: PathBuf,
}

impl Loop {
    /// Attach with partition scanning and the given logical sector size.
    pub fn attach(file: &Path, sector_size: u32) -> Loop {
        let size = sector_size.to_string();
        let file = file.to_str().expect("utf-8 path");
        let out = run("losetup", &["-f", "--show", "-P", "-b", &size, file]);
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        Loop { dev: PathBuf::from(dev) }
    }

    pub fn str(&self) -> &str {
        self.dev.to_str().expect("utf-8 device path")
    }

    /// The node of partition `n` (/dev/loopNpM).
    pub fn partition(&self, n: u32) -> PathBuf {
        PathBuf::from(format!("{}p{n}", self.str()))
    }

    /// See [`add_partitions`].
    pub fn add_partitions(&self, last: u32) {
        add_partitions(self.str(), last);
    }
}

/// Make the kernel know the partitions of `dev` up to `last` (node
/// `{dev}p{last}`): wait for its own scan, and where the kernel has no
/// partition parsers (as on some CI kernels and microVMs) let partx read
/// the table and add them (BLKPG).
pub fn add_partitions(dev: &str, last: u32) {
    let node = PathBuf::from(format!("{dev}p{last}"));
    if appears(&node, 20) {
        return;
    }
    eprintln!("{} did not appear; adding the partitions with partx", node.display());
    let exe = which("partx").unwrap_or_else(|| PathBuf::from("partx"));
    // It may fail on partitions the kernel's own scan adds meanwhile: the
    // node is what counts.
    let partx = Command::new(exe).args(["-a", dev]).output().expect("run partx");
    assert!(
        appears(&node, 100),
        "{} never appeared; partx -a {dev}: {}",
        node.display(),
        String::from_utf8_lossy(&partx.stderr)
    );
}

/// devtmpfs creates nodes asynchronously: poll every 50 ms.
fn appears(node: &Path, tries: u32) -> bool {
    (0..tries).any(|_| {
        let found = node.exists();
        if !found {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        found
    })
}

impl Drop for Loop {
    /// Detached, and gone before the drop returns: `losetup -d` of a device
    /// another process holds open (a parallel test's blkalign asking every
    /// loop device what it reads) only marks it to go at the last close,
    /// and until then the image counts as in use. Gone is when the device
    /// no longer shows this image: a parallel test may take it at once.
    fn drop(&mut self) {
        let name = self.dev.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let bound = Path::new("/sys/block").join(name).join("loop/backing_file");
        let ours = std::fs::read_to_string(&bound).ok();
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        for _ in 0..100 {
            if ours.is_none() || std::fs::read_to_string(&bound).ok() != ours {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// `sfdisk --json DEV`: the label ("dos", "gpt") and every partition as
/// (number, start, size, type), the type as sfdisk prints it ("83" or a GUID).
pub fn sfdisk_json(dev: &str) -> (String, Vec<(u32, u64, u64, String)>) {
    let out = run("sfdisk", &["--json", dev]);
    let doc = json_of(&out.stdout);
    let table = &doc["partitiontable"];
    let label = table["label"].as_str().expect("label").to_string();
    let parts = table["partitions"].as_array().cloned().unwrap_or_default();
    let parts = parts.iter().map(|p| {
        let node = p["node"].as_str().expect("node");
        let text = |k: &str| p[k].as_str().unwrap_or_else(|| panic!("{k}: {p}")).to_string();
        let number = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k}: {p}"));
        (partition_number(dev, node), number("start"), number("size"), text("type"))
    });
    (label, parts.collect())
}

/// The number in a partition node: /dev/loop0p3 or disk.img3 is 3.
fn partition_number(dev: &str, node: &str) -> u32 {
    let suffix = node.strip_prefix(dev).map(|s| s.trim_start_matches('p'));
    let digits: String = node.chars().rev().take_while(char::is_ascii_digit).collect();
    let digits: String = digits.chars().rev().collect();
    let number = suffix.and_then(|s| s.parse().ok()).or_else(|| digits.parse().ok());
    number.unwrap_or_else(|| panic!("no partition number in {node:?}"))
}

/// (number, start, size) of every partition, as `sfdisk --json` reads them.
pub fn sfdisk_partitions(dev: &str) -> Vec<(u64, u64, u64)> {
    let (_, parts) = sfdisk_json(dev);
    parts.into_iter().map(|(number, start, size, _)| (u64::from(number), start, size)).collect()
}

/// parted's verdict: `parted -s DEV align-check opt N` exits 0 when aligned.
pub fn parted_aligned(dev: &str, number: u64) -> bool {
    let exe = which("parted").expect("parted");
    let status = Command::new(exe)
        .args(["-s", dev, "align-check", "opt", &number.to_string()])
        .status()
        .expect("run parted");
    status.success()
}

/// The SHA-256 of all of `path` (a file or a device, read through the page
/// cache as `sha256sum` reads it), in hex.
pub fn sha256_file(path: impl AsRef<Path>) -> String {
    use sha2::{Digest, Sha256};
    let path = path.as_ref();
    let mut file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    format!("{:x}", hasher.finalize())
}

/// The blkalign binary under test.
pub fn blkalign() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("blkalign").expect("binary built")
}

/// `out` as JSON, panicking with the text when it is not, or when an
/// object repeats a key (serde_json keeps the last; strict parsers refuse).
pub fn json_of(out: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(out);
    serde_json::from_slice::<Unique>(out)
        .unwrap_or_else(|e| panic!("not JSON with unique keys ({e}): {text}"));
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Any JSON value whose objects have no repeated key.
struct Unique;

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(Unique)
    }
}

impl<'de> serde::de::Visitor<'de> for Unique {
    type Value = Unique;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
            }
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }
}

/// `blkalign audit --json ARGS`: the exit code and the first target.
pub fn audit_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = blkalign().args(["audit", "--json"]).args(args).output().expect("run audit");
    let doc = json_of(&out.stdout);
    (out.status.code().expect("exit code"), doc["targets"][0].clone())
}

pub mod corpus;
/// A mount, unmounted on drop (before its temporary directory goes).
pub struct Mount {
    pub dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Mount {
    /// Mount `source` with `options` on a new temporary directory.
    pub fn new(source: &str, options: &[&str]) -> Mount {
        let temp = tempfile::tempdir().expect("tempdir");
        let mut mount = Mount::at(source, temp.path(), options);
        mount._temp = Some(temp);
        mount
    }

    /// Mount `source` with `options` on `dir`.
    pub fn at(source: &str, dir: &Path, options: &[&str]) -> Mount {
        let mut args: Vec<&str> = options.to_vec();
        args.extend([source, dir.to_str().expect("utf-8 path")]);
        run("mount", &args);
        Mount { dir: dir.to_path_buf(), _temp: None }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

pub mod emulate;
pub mod lab;

/// Check `json` against `docs/schema/NAME.schema.json` with Debian's
/// python3-jsonschema, an independent validator (draft 2020-12).
pub fn check_schema(name: &str, json: &str) {
    const PYTHON: &str = "/usr/bin/python3";
    // Asked once: a Python start and import cost a fifth of a second, and
    // a hundred checks ran it twice each.
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let present = *PRESENT.get_or_init(|| {
        Command::new(PYTHON)
            .args(["-c", "import jsonschema"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !present {
        return skip("needs python3-jsonschema (for its schema check)");
    }
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/schema/{name}.schema.json"));
    let script = "import json, sys, jsonschema\n\
        def unique(pairs):\n    \
            keys = [k for k, _ in pairs]\n    \
            assert len(keys) == len(set(keys)), f'duplicate key in {keys}'\n    \
            return dict(pairs)\n\
        schema = json.load(open(sys.argv[1]))\n\
        jsonschema.Draft202012Validator.check_schema(schema)\n\
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.load(sys.stdin, object_pairs_hook=unique)))\n\
        [print('/'.join(map(str, e.absolute_path)) + ': ' + e.message) for e in errors]\n\
        sys.exit(1 if errors else 0)\n";
    let out = run_unchecked(PYTHON, &["-c", script, &schema.to_string_lossy()], Some(json));
    assert!(
        out.status.success(),
        "output does not match {}:\n{}{}",
        schema.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
