//! Bad input fails fast, with exit 2 and one line naming the path once:
//! FIFOs and other files that are neither a block device nor an image,
//! missing paths, oversized or foreign sfdisk scripts, unreadable images.
//! sfdisk's own dumps are checked against sfdisk. Every blkalign run has a
//! timeout, so a command that hangs fails instead.

use crate::common;

use common::{blkalign, json_of, needs, run, sfdisk_json, Image, Loop, Mount};
use serde_json::Value;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

tests![
    a_fifo_is_refused_by_every_command_without_opening_it,
    character_devices_sockets_and_directories_are_named,
    a_missing_path_is_named_once_by_every_command,
    emulate_names_a_missing_platter_file_once,
    scripts_are_read_up_to_a_mebibyte,
    a_gpt_dump_plans_what_sfdisk_made,
    a_dos_dump_plans_its_partitions_and_keeps_their_numbers,
    a_dump_of_a_4kn_disk_plans_only_in_4096_byte_sectors,
    script_headers_sfdisk_refuses_are_refused,
    directories_and_dangling_links_plan_nothing,
    an_image_nobody_may_read_is_an_error_not_a_512_byte_plan,
    an_image_whose_reads_fail_is_an_error_not_a_512_byte_plan,
    restore_says_what_is_not_a_backup,
];

/// Far longer than any of these runs takes; a hang is killed and fails.
const TIMEOUT: Duration = Duration::from_secs(30);

const SCRIPT_LIMIT: usize = blkalign::plan::SCRIPT_LIMIT;

fn output(args: &[&str]) -> Output {
    blkalign().args(args).timeout(TIMEOUT).output().expect("run blkalign")
}

/// Exit 2 (a killed run has no code, so a hang fails here); its stderr.
fn refused(args: &[&str]) -> String {
    let out = output(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?} (no code: killed after {TIMEOUT:?}): {err}");
    err
}

/// Exit 0; stdout as JSON and stderr.
fn planned(args: &[&str]) -> (Value, String) {
    let out = output(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    (json_of(&out.stdout), err)
}

fn str_of(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Every command that takes a disk, image or partition, with what it
/// needs besides.
const COMMANDS: [&[&str]; 7] = [
    &["audit"],
    &["plan", "--part", "1MiB"],
    &["partition", "--part", "1MiB"],
    &["realign"],
    &["bench"],
    &["probe"],
    &["advise"],
];

fn with_target<'a>(command: &[&'a str], target: &'a str) -> Vec<&'a str> {
    let mut args = vec![command[0], target];
    args.extend(&command[1..]);
    args
}

/// A backup that `partition` saved of a new image in `dir`, for `restore`.
fn backup(dir: &Path) -> PathBuf {
    let image = dir.join("saved.img");
    fs::File::create(&image).and_then(|f| f.set_len(64 << 20)).expect("image");
    let out = blkalign()
        .current_dir(dir)
        .args(["partition", str_of(&image), "--part", "1MiB", "--yes"])
        .timeout(TIMEOUT)
        .output()
        .expect("run partition");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut saved = fs::read_dir(dir).expect("read dir").flatten().map(|e| e.path());
    saved.find(|p| p.extension().is_some_and(|e| e == "bin")).expect("a backup")
}

fn a_fifo_is_refused_by_every_command_without_opening_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    let mode = rustix::fs::Mode::from_raw_mode(0o600);
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, mode, 0)
        .expect("mkfifo");
    let fifo = str_of(&fifo);
    let backup = backup(dir.path());
    let restore = ["restore", str_of(&backup), fifo, "--yes"];
    for args in COMMANDS.iter().map(|c| with_target(c, fifo)).chain([restore.to_vec()]) {
        let err = refused(&args);
        assert_eq!(err, format!("blkalign: {fifo}: a FIFO, not a block device or image file\n"));
    }
}

fn character_devices_sockets_and_directories_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let cases = [
        ("/dev/null", "a character device"),
        (str_of(&socket), "a socket"),
        (str_of(dir.path()), "a directory"),
    ];
    for (path, kind) in cases {
        for command in [&["bench"][..], &["probe"], &["plan", "--part", "1MiB"]] {
            let err = refused(&with_target(command, path));
            assert_eq!(
                err,
                format!("blkalign: {path}: {kind}, not a block device or image file\n")
            );
        }
    }
}

fn a_missing_path_is_named_once_by_every_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gone = dir.path().join("sdz");
    let gone = str_of(&gone);
    let backup = backup(dir.path());
    let restore = ["restore", str_of(&backup), gone];
    for args in COMMANDS.iter().map(|c| with_target(c, gone)).chain([restore.to_vec()]) {
        let err = refused(&args);
        assert_eq!(err, format!("blkalign: {gone}: no such file or directory\n"), "{args:?}");
    }
    let out = output(&["audit", "--json", gone]);
    assert_eq!(out.status.code(), Some(2));
    let error = &json_of(&out.stdout)["targets"][0]["error"];
    assert_eq!(*error, format!("{gone}: no such file or directory"));
}

fn emulate_names_a_missing_platter_file_once() {
    // Found missing only once the emulation's tools are there.
    if !needs(true, &["nbdkit", "nbdfuse", "fusermount3", "losetup"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("absent/disk.img");
    let file = str_of(&file);
    let err = refused(&["emulate", "start", "--preset", "4kn", "--size", "1MiB", "--file", file]);
    assert_eq!((err.lines().count(), err.matches(file).count()), (1, 1), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// A script file of exactly `len` bytes: comment lines, then `tail`.
fn script_of_len(dir: &Path, len: usize, tail: &str) -> PathBuf {
    let path = dir.join(format!("script-{len}"));
    let mut text = String::with_capacity(len);
    while text.len() + tail.len() < len {
        let room = len - tail.len() - text.len();
        let line = "#".repeat(room.min(80) - 1);
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str(tail);
    assert_eq!(text.len(), len);
    fs::write(&path, text).expect("write script");
    path
}

fn scripts_are_read_up_to_a_mebibyte() {
    let image = Image::new(64 << 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let tail = "size=1MiB\n";
    let at_limit = script_of_len(dir.path(), SCRIPT_LIMIT, tail);
    let (plan, _) = planned(&["plan", image.str(), "--json", "--script", str_of(&at_limit)]);
    assert_eq!(plan["partitions"][0]["size"], 2048);

    let over = script_of_len(dir.path(), SCRIPT_LIMIT + 1, tail);
    let err = refused(&["plan", image.str(), "--script", str_of(&over)]);
    assert!(err.contains("larger than 1024 KiB"), "{err}");
    // stdin a file, not a pipe fed by a thread the timeout cannot stop.
    let out = assert_cmd::Command::new("sh")
        .args(["-c", "exec \"$0\" plan \"$1\" --script - < \"$2\""])
        .arg(assert_cmd::cargo::cargo_bin("blkalign"))
        .args([image.str(), str_of(&over)])
        .timeout(TIMEOUT)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stdin: the script is larger"));
    // An endless script is read only up to the limit.
    let err = refused(&["plan", image.str(), "--script", "/dev/zero"]);
    assert!(err.contains("/dev/zero: the script is larger than 1024 KiB"), "{err}");
}

/// `sfdisk -d` of `image`, written to a file beside it.
fn dump(image: &Image) -> (PathBuf, String) {
    let text = String::from_utf8(run("sfdisk", &["-d", image.str()]).stdout).expect("utf-8");
    let path = image.path.with_extension("dump");
    fs::write(&path, &text).expect("write dump");
    (path, text)
}

/// (start, size, type) of each planned partition but extended ones.
fn plan_partitions(plan: &Value) -> Vec<(u64, u64, String)> {
    let parts = plan["partitions"].as_array().expect("partitions");
    parts
        .iter()
        .filter(|p| p["role"] != "extended")
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k}: {p}"));
            (n("start"), n("size"), p["type_id"].as_str().expect("type").to_string())
        })
        .collect()
}

/// What sfdisk reads on `dev`, as `plan_partitions` shows it: MBR types
/// as 0xNN.
fn peer_partitions(dev: &str) -> Vec<(u64, u64, String)> {
    let (label, parts) = sfdisk_json(dev);
    parts
        .into_iter()
        .filter(|(_, _, _, kind)| !["5", "f", "85"].contains(&kind.as_str()))
        .map(|(_, start, size, kind)| {
            let kind = if label == "dos" { format!("0x{kind:0>2}") } else { kind };
            (start, size, kind)
        })
        .collect()
}

fn header(dump: &str, key: &str) -> u64 {
    let line = dump.lines().find_map(|l| l.strip_prefix(&format!("{key}: ")));
    line.and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("{key} in {dump}"))
}

fn a_gpt_dump_plans_what_sfdisk_made() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let script = "label: gpt\nsize=20000\nsize=40000, type=S, name=\"swap x\", \
                  attrs=\"RequiredPartition LegacyBIOSBootable\"\nsize=10000, type=L\n";
    let image = Image::sfdisk(256 << 20, script);
    let (path, text) = dump(&image);
    assert!(text.contains("first-lba:") && text.contains(" : start="), "{text}");
    let (plan, err) = planned(&["plan", image.str(), "--json", "--script", str_of(&path)]);
    assert_eq!(plan_partitions(&plan), peer_partitions(image.str()));
    assert_eq!(plan["partitions"][1]["name"], "swap x");
    assert_eq!(plan["first_usable_lba"], header(&text, "first-lba"));
    assert_eq!(plan["last_usable_lba"], header(&text, "last-lba"));
    assert!(err.contains("does not keep label-id") && err.contains("uuid=, attrs="), "{err}");

    // Written by blkalign, read back by sfdisk: the same table.
    let copy = Image::new(256 << 20);
    let out = blkalign()
        .current_dir(copy.path.parent().expect("dir"))
        .args(["partition", copy.str(), "--script", str_of(&path), "--yes"])
        .timeout(TIMEOUT)
        .output()
        .expect("run partition");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(peer_partitions(copy.str()), peer_partitions(image.str()));
    let (_, again) = dump(&copy);
    for key in ["first-lba", "last-lba"] {
        assert_eq!(header(&again, key), header(&text, key), "{key}");
    }

    // On a smaller disk its last-lba is out of range, as sfdisk says.
    let small = Image::new(128 << 20);
    let err = refused(&["plan", small.str(), "--script", str_of(&path)]);
    assert!(err.contains("past this disk's last usable LBA"), "{err}");
}

fn a_dos_dump_plans_its_partitions_and_keeps_their_numbers() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let script = "label: dos\nsize=200000, type=83, bootable\nstart=204800, size=100000, type=5\n\
                  start=206848, size=20000\nstart=229376, size=30000, type=82\n";
    let image = Image::sfdisk(256 << 20, script);
    let (path, text) = dump(&image);
    assert!(text.contains("5 : start=") && text.contains("bootable"), "{text}");
    let (plan, err) = planned(&["plan", image.str(), "--json", "--script", str_of(&path)]);
    assert_eq!(plan["label"], "mbr");
    assert_eq!(plan_partitions(&plan), peer_partitions(image.str()));
    let numbers: Vec<u64> = plan["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p["number"].as_u64().expect("number"))
        .collect();
    assert_eq!(numbers, [1, 2, 5, 6], "as sfdisk numbers them: {plan}");
    assert!(!err.contains("numbers partitions"), "{err}");
    assert!(err.contains("label-id 0x") && err.contains("bootable"), "{err}");

    // The old fdisk start of 63 is a lower bound the plan rounds up.
    let old =
        Image::sfdisk(256 << 20, "label: dos\nstart=63, size=200000\nstart=204800, size=1000\n");
    let (path, text) = dump(&old);
    assert!(text.contains("start=          63,"), "{text}");
    let (plan, _) = planned(&["plan", old.str(), "--json", "--script", str_of(&path)]);
    let starts: Vec<(u64, u64)> =
        plan_partitions(&plan).into_iter().map(|(start, size, _)| (start, size)).collect();
    assert_eq!(starts, [(2048, 200000), (204800, 1000)]);
}

fn a_dump_of_a_4kn_disk_plans_only_in_4096_byte_sectors() {
    if !needs(true, &["sfdisk", "losetup"]) {
        return;
    }
    let image = Image::new(64 << 20);
    let text = {
        let lo = Loop::attach(&image.path, 4096);
        common::run_stdin("sfdisk", &["-q", lo.str()], Some("label: gpt\nsize=1000\nsize=2000\n"));
        String::from_utf8(run("sfdisk", &["-d", lo.str()]).stdout).expect("utf-8")
    };
    assert!(text.contains("sector-size: 4096"), "{text}");
    let path = image.path.with_extension("dump");
    fs::write(&path, &text).expect("write dump");
    let (plan, _) = planned(&["plan", image.str(), "--json", "--script", str_of(&path)]);
    assert_eq!(plan["sector_size"], 4096);
    let starts: Vec<u64> = plan_partitions(&plan).iter().map(|p| p.0).collect();
    let theirs: Vec<u64> = text.lines().filter_map(start_of).collect();
    assert_eq!(starts, theirs);
    let err =
        refused(&["plan", image.str(), "--logical-sector-size", "512", "--script", str_of(&path)]);
    assert!(err.contains("the script counts 4096-byte sectors"), "{err}");
}

fn start_of(line: &str) -> Option<u64> {
    let rest = line.split_once("start=")?.1;
    rest.split(',').next()?.trim().parse().ok()
}

fn script_headers_sfdisk_refuses_are_refused() {
    let image = Image::new(64 << 20);
    let dir = tempfile::tempdir().expect("tempdir");
    for (script, why) in [
        ("unit: cylinders\nsize=1MiB\n", "only `unit: sectors`"),
        ("sector-size: 4096\nsize=1MiB\n", "--logical-sector-size 4096 plans the image"),
        ("label: gpt\nfirst-lba: 2\nsize=1MiB\n", "inside the partition table"),
        ("label: gpt\nlast-lba: 99999999\nsize=1MiB\n", "past this disk's last usable LBA"),
        ("table-length: 256\nsize=1MiB\n", "128 entries"),
        ("size=1MiB, sise=2\n", "unknown field \"sise\""),
    ] {
        let path = dir.path().join("script");
        fs::write(&path, script).expect("write script");
        let err = refused(&["plan", image.str(), "--script", str_of(&path)]);
        assert!(err.contains(why), "{script:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

fn directories_and_dangling_links_plan_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("gone.img"), &link).expect("symlink");
    let link = str_of(&link);
    let err = refused(&["plan", link, "--part", "1MiB"]);
    assert_eq!(err, format!("blkalign: {link}: no such file or directory\n"));
    let d = str_of(dir.path());
    let err = refused(&["plan", d, "--part", "1MiB"]);
    assert_eq!(err, format!("blkalign: {d}: a directory, not a block device or image file\n"));
}

fn an_image_nobody_may_read_is_an_error_not_a_512_byte_plan() {
    if !needs(true, &["setpriv"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let image = dir.path().join("disk.img");
    fs::File::create(&image).and_then(|f| f.set_len(64 << 20)).expect("image");
    fs::set_permissions(&image, fs::Permissions::from_mode(0o600)).expect("chmod image");
    let bin = assert_cmd::cargo::cargo_bin("blkalign");
    let as_nobody = |args: &[&str]| {
        assert_cmd::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(args)
            .timeout(TIMEOUT)
            .output()
            .expect("run setpriv")
    };
    if !as_nobody(&["--version"]).status.success() {
        return common::skip(format!("needs {} runnable by uid 65534", bin.display()));
    }
    let out = as_nobody(&["plan", str_of(&image), "--part", "1MiB"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}: permission denied", image.display())), "{err}");
}

fn an_image_whose_reads_fail_is_an_error_not_a_512_byte_plan() {
    if !needs(true, &["losetup", "mkfs.ext4", "mount", "umount"]) {
        return;
    }
    // An image file on ext4 on a loop device whose backing file is then
    // cut short: the file opens, and reading its data fails with EIO.
    let backing = Image::new(64 << 20);
    run("mkfs.ext4", &["-q", "-F", "-O", "^has_journal", backing.str()]);
    let lo = Loop::attach(&backing.path, 512);
    let mnt = tempfile::tempdir().expect("mount point");
    let mounted = || Mount::at(lo.str(), mnt.path(), &[]);
    let image = mnt.path().join("disk.img");
    {
        let _m = mounted();
        fill(&mnt.path().join("pad"), 44 << 20);
        fill(&image, 4 << 20);
    }
    // Mounted afresh, nothing of the image is cached.
    let _m = mounted();
    fs::OpenOptions::new()
        .write(true)
        .open(&backing.path)
        .and_then(|f| f.set_len(8 << 20))
        .expect("cut");
    run("losetup", &["-c", lo.str()]);
    let mut probe = [0u8; 4096];
    let read = fs::File::open(&image).and_then(|mut f| f.read_exact(&mut probe));
    assert!(read.is_err(), "setup: the image's data should be past the device's end");
    let image = str_of(&image);
    let err = refused(&["plan", image, "--part", "1MiB"]);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("blkalign: {image}: cannot read: ")), "{err}");
}

/// `len` bytes of zeros really written (not a hole).
fn fill(path: &Path, len: u64) {
    let mut file = fs::File::create(path).expect("create");
    std::io::copy(&mut std::io::repeat(0).take(len), &mut file).expect("fill");
    file.flush().expect("flush");
}

/// Found by a user: `restore` of a file that is not a backup said
/// "reading X.json: No such file"; a missing one is named as every command
/// names a missing path.
fn restore_says_what_is_not_a_backup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("disk.img");
    std::fs::write(&plain, b"not a backup").expect("write");
    let plain = str_of(&plain);
    let err = refused(&["restore", plain]);
    assert_eq!(
        err,
        format!("blkalign: {plain} is not a blkalign backup: no sidecar {plain}.json beside it\n")
    );
    let gone = dir.path().join("gone.bin");
    let gone = str_of(&gone);
    assert_eq!(
        refused(&["restore", gone]),
        format!("blkalign: {gone}: no such file or directory\n")
    );
}
