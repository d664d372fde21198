//! Test helpers: images made by the real tools, and those tools (blkid,
//! fsck) as oracles. Missing tools skip a test with a printed reason, or
//! fail it under `BLKALIGN_TEST_STRICT=1`.

use std::path::Path;
use std::process::Command;

fn strict() -> bool {
    std::env::var("BLKALIGN_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// Skip (or fail under strict) with `reason`; returns false for `if !...`.
pub(crate) fn skip(reason: &str) -> bool {
    assert!(!strict(), "BLKALIGN_TEST_STRICT=1 and this test needs {reason}");
    eprintln!("skipped: this test needs {reason}");
    false
}

/// True when every tool is installed.
pub(crate) fn have(tools: &[&str]) -> bool {
    let missing: Vec<&str> =
        tools.iter().copied().filter(|t| crate::emulate::which(t).is_none()).collect();
    missing.is_empty() || skip(&format!("tool(s) {}", missing.join(", ")))
}

/// Run a tool, panicking with its output when it fails; returns stdout.
pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let (ok, out) = try_run(program, args);
    assert!(ok, "{program} {args:?} failed:\n{out}");
    out
}

/// Run a tool: whether it succeeded, and its stdout then stderr.
pub(crate) fn try_run(program: &str, args: &[&str]) -> (bool, String) {
    let exe = crate::emulate::which(program).unwrap_or_else(|| program.into());
    let out = Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A zero-filled image file of `len` bytes in `dir`.
pub(crate) fn image(dir: &Path, name: &str, len: u64) -> String {
    let path = dir.join(name);
    std::fs::File::create(&path).and_then(|f| f.set_len(len)).expect("create image");
    path.to_str().expect("UTF-8 temp path").to_string()
}

/// What `blkid -p` calls the contents of `path` ("" for nothing).
pub(crate) fn blkid_type(path: &str) -> String {
    let exe = crate::emulate::which("blkid").unwrap_or_else(|| "blkid".into());
    let out = Command::new(exe)
        .args(["-p", "-o", "value", "-s", "TYPE", path])
        .output()
        .expect("cannot run blkid");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
