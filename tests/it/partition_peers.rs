//! The tables `blkalign partition` writes, judged by the peers: sfdisk
//! --verify and sgdisk -v find nothing, parted's align-check passes, gptman
//! re-reads our GPTs, `blkalign audit` agrees, and every partition is where
//! `plan --json` said.

use crate::common;

use common::{audit_json, blkalign, needs, parted_aligned, run, sfdisk_partitions, Image, Loop};
use proptest::prelude::*;
use serde_json::Value;

tests![
    gpt_on_a_512_byte_image,
    mbr_with_logical_partitions_on_a_512_byte_image,
    sfdisk_script_from_stdin,
    sfdisk_dump_with_a_primary_after_the_extended,
    old_fdisk_dump_with_logicals_from_lba_63,
    dry_run_and_refusals_write_nothing,
    logical_sector_size_override_is_for_images_only,
    mbr_cannot_address_beyond_2tib_at_512_bytes,
    backup_holds_the_old_sectors,
    gpt_on_a_4096_byte_loop_device,
    mbr_on_a_4096_byte_loop_device,
    random_part_lists,
    on_emulated_drives,
    jumpered_drive_with_its_offset,
];

const MIB: u64 = 1 << 20;

fn plan_json(target: &str, args: &[&str]) -> Value {
    let out = blkalign().args(["plan", target, "--json"]).args(args).output().expect("run plan");
    assert!(out.status.success(), "plan {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("plan json")
}

/// `partition --yes`, its backup kept out of the working directory.
fn partition(target: &str, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup.bin");
    let backup = backup.to_str().expect("utf-8");
    blkalign()
        .args(["partition", target, "--yes", "--backup", backup])
        .args(args)
        .output()
        .expect("run partition")
}

fn partition_ok(target: &str, args: &[&str]) {
    let out = partition(target, args);
    assert!(out.status.success(), "partition {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// sfdisk --verify: exit 0 and nothing beyond its summary lines.
fn sfdisk_verify(dev: &str) {
    let out = run("sfdisk", &["--verify", dev]);
    let text = String::from_utf8_lossy(&out.stdout);
    let quiet = ["No errors detected.", "Header version", "Using ", "A total of", "Remaining "];
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        assert!(quiet.iter().any(|q| line.starts_with(q)), "sfdisk --verify {dev}: {text}");
    }
}

fn sgdisk_verify(dev: &str) {
    let out = run("sgdisk", &["-v", dev]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("No problems found"), "sgdisk -v {dev}: {text}");
    assert!(!text.contains("Caution") && !text.contains("Warning"), "sgdisk -v {dev}: {text}");
}

/// (number, start, size) of every planned partition.
fn planned(plan: &Value) -> Vec<(u64, u64, u64, bool)> {
    let parts = plan["partitions"].as_array().expect("partitions");
    parts
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_u64().expect("number");
            (n("number"), n("start"), n("size"), p["role"] == "extended")
        })
        .collect()
}

/// gptman's reading of the GPT: (slot, first LBA, last LBA, name).
fn gptman_entries(dev: &str) -> Vec<(u64, u64, u64, String)> {
    let mut file = std::fs::File::open(dev).expect("open");
    let gpt = gptman::GPT::find_from(&mut file).expect("gptman reads our GPT");
    gpt.iter()
        .filter(|(_, e)| e.is_used())
        .map(|(i, e)| {
            (u64::from(i), e.starting_lba, e.ending_lba, e.partition_name.as_str().to_string())
        })
        .collect()
}

/// Every peer agrees with `plan` about the table now on `dev`.
fn check_peers(dev: &str, plan: &Value) {
    sfdisk_verify(dev);
    let gpt = plan["label"] == "gpt";
    if gpt {
        sgdisk_verify(dev);
    }
    let want = planned(plan);
    let theirs = sfdisk_partitions(dev);
    assert_eq!(theirs.len(), want.len(), "{theirs:?} vs {plan}");
    for ((n, start, size, extended), (tn, tstart, tsize)) in want.iter().zip(&theirs) {
        assert_eq!((n, start), (tn, tstart), "partition {n}");
        if !extended {
            assert_eq!(size, tsize, "size of {n}");
            assert!(parted_aligned(dev, *n), "parted align-check opt {n} on {dev}");
        }
    }
    if gpt {
        let entries = gptman_entries(dev);
        let names = plan["partitions"]
            .as_array()
            .expect("parts")
            .iter()
            .map(|p| p["name"].as_str().unwrap_or(""));
        let expect: Vec<_> = want
            .iter()
            .zip(names)
            .map(|(w, name)| (w.0, w.1, w.1 + w.2 - 1, name.to_string()))
            .collect();
        assert_eq!(entries, expect, "gptman");
    }
    let (code, target) = audit_json(&[dev]);
    assert_eq!(code, 0, "audit: {target}");
    assert_eq!(target["problems"].as_array().map_or(0, Vec::len), 0, "audit problems: {target}");
    for p in target["partitions"].as_array().expect("partitions") {
        assert_eq!(p["verdict"], "aligned", "audit: {p}");
    }
}

fn gpt_on_a_512_byte_image() {
    if !needs(false, &["sfdisk", "sgdisk", "parted"]) {
        return;
    }
    let img = Image::new(64 * MIB);
    let args = [
        "--part",
        "1MiB:efi:ESP",
        "--part",
        "20%:swap",
        "--part",
        "8MiB:lvm",
        "--part",
        "rest:linux:root",
    ];
    let plan = plan_json(img.str(), &args);
    partition_ok(img.str(), &args);
    check_peers(img.str(), &plan);
}

fn mbr_with_logical_partitions_on_a_512_byte_image() {
    if !needs(false, &["sfdisk", "parted"]) {
        return;
    }
    let img = Image::new(64 * MIB);
    let mut args = vec!["--label", "mbr"];
    for part in ["4MiB", "4MiB:swap", "4MiB", "4MiB:lvm", "4MiB", "rest:raid"] {
        args.extend(["--part", part]);
    }
    let plan = plan_json(img.str(), &args);
    assert_eq!(
        plan["partitions"].as_array().expect("parts").len(),
        7,
        "3 primaries, extended, 3 logicals"
    );
    partition_ok(img.str(), &args);
    check_peers(img.str(), &plan);
}

fn sfdisk_script_from_stdin() {
    if !needs(false, &["sfdisk", "sgdisk", "parted"]) {
        return;
    }
    let img = Image::new(64 * MIB);
    let script = "label: gpt\nunit: sectors\n\nstart=2048, size=2048, type=U, name=\"EFI system\"\nsize=16MiB, type=L\nsize=+, type=S\n";
    let out = blkalign()
        .args(["plan", img.str(), "--json", "--script", "-"])
        .write_stdin(script)
        .output()
        .expect("plan");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(plan["partitions"][0]["name"], "EFI system");
    assert_eq!(plan["partitions"][1]["size"], 32768);
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("b.bin");
    blkalign()
        .args([
            "partition",
            img.str(),
            "--yes",
            "--script",
            "-",
            "--backup",
            backup.to_str().expect("utf-8"),
        ])
        .write_stdin(script)
        .assert()
        .success();
    check_peers(img.str(), &plan);
}

/// An MBR dump with primary 3 after the extended partition, listed after
/// the logicals as a user may write it.
const PRIMARY_AFTER_EXTENDED: &str = "label: dos\nunit: sectors\nsector-size: 512\n\n\
    x1 : start=2048, size=200000, type=83\n\
    x2 : start=204800, size=100000, type=5\n\
    x5 : start=206848, size=20000, type=83\n\
    x6 : start=229376, size=30000, type=82\n\
    x3 : start=329728, size=50000, type=8e\n";

/// `plan --json --script -` of `script`.
fn plan_script(target: &str, script: &str) -> Value {
    let out = blkalign()
        .args(["plan", target, "--json", "--script", "-"])
        .write_stdin(script)
        .output()
        .expect("plan");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Found by a user: a dump with a primary after the extended partition was
/// refused ("partition 3 does not fit") or renumbered, a logical made
/// primary. sfdisk takes it keeping every number; so does the plan, from
/// the dump as written and from sfdisk's own dump of what it made.
fn sfdisk_dump_with_a_primary_after_the_extended() {
    if !needs(false, &["sfdisk", "parted"]) {
        return;
    }
    let theirs = Image::sfdisk(256 * MIB, PRIMARY_AFTER_EXTENDED);
    let want = sfdisk_partitions(theirs.str());
    assert_eq!(want.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2, 3, 5, 6], "sfdisk: {want:?}");
    let dumped = String::from_utf8_lossy(&run("sfdisk", &["-d", theirs.str()]).stdout).into_owned();
    let ours = Image::new(256 * MIB);
    for script in [PRIMARY_AFTER_EXTENDED, &dumped] {
        let plan = plan_script(ours.str(), script);
        let got: Vec<_> =
            planned(&plan).iter().map(|&(n, start, size, _)| (n, start, size)).collect();
        assert_eq!(got, want, "{script}");
        let roles: Vec<_> = plan["partitions"]
            .as_array()
            .expect("parts")
            .iter()
            .map(|p| p["role"].clone())
            .collect();
        assert_eq!(roles, ["primary", "extended", "primary", "logical", "logical"], "{script}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("b.bin");
    blkalign()
        .args(["partition", ours.str(), "--yes", "--script", "-"])
        .args(["--backup", backup.to_str().expect("utf-8")])
        .write_stdin(PRIMARY_AFTER_EXTENDED)
        .assert()
        .success();
    check_peers(ours.str(), &plan_script(ours.str(), PRIMARY_AFTER_EXTENDED));
}

/// Found by a user: an old fdisk dump (an extended partition from near LBA
/// 63 to the disk's end, logicals in it) could not be replayed on a disk of
/// the same size: the extended partition kept its size from a start rounded
/// up to 1 MiB and ran past the end; `--json` printed nothing. It now holds
/// just its logicals; when they cannot fit, the error (in the JSON too)
/// names the partition and the size that fits, and the dump so reduced is
/// written and read back by sfdisk with every other size kept.
fn old_fdisk_dump_with_logicals_from_lba_63() {
    if !needs(false, &["sfdisk", "parted"]) {
        return;
    }
    let old = |last: &str| {
        let script = format!(
            "label: dos\nstart=63, size=40000, type=83\nstart=40063, type=5\n\
             start=40126, size=60000, type=83\nstart=100189, {last}type=82\n"
        );
        let disk = Image::sfdisk(100 * MIB, &script);
        String::from_utf8_lossy(&run("sfdisk", &["-d", disk.str()]).stdout).into_owned()
    };
    // Room at the end for the logicals' shift.
    let dump = old("size=96000, ");
    assert!(dump.contains("type=5"), "{dump}");
    let ours = Image::new(100 * MIB);
    let plan = plan_script(ours.str(), &dump);
    let sizes: Vec<_> = planned(&plan).iter().map(|&(n, _, size, _)| (n, size)).collect();
    assert_eq!(sizes, [(1, 40000), (2, 159488), (5, 60000), (6, 96000)], "{plan}");
    blkalign()
        .args(["partition", ours.str(), "--yes", "--script", "-", "--backup"])
        .arg(ours.path.with_extension("bak"))
        .write_stdin(dump.as_str())
        .assert()
        .success();
    check_peers(ours.str(), &plan);

    // The last logical to the disk's end: it cannot keep its size.
    let dump = old("");
    let fresh = Image::new(100 * MIB);
    let out = blkalign()
        .args(["plan", fresh.str(), "--json", "--script", "-"])
        .write_stdin(dump.as_str())
        .output()
        .expect("plan");
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    common::check_schema("plan", &text);
    let error = serde_json::from_str::<Value>(&text).expect("json")["error"].clone();
    let error = error.as_str().expect("error").to_string();
    assert!(error.contains("partition 6 does not fit"), "{error}");
    let fits: u64 = error
        .split("at most ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size that fits: {error}"));
    let line = dump.lines().find(|l| l.contains("type=82")).expect("partition 6");
    let size = line.split("size=").nth(1).and_then(|t| t.split(',').next()).expect("size");
    let reduced = dump.replace(line, &line.replace(size, &format!("{fits:>12}")));
    let plan = plan_script(fresh.str(), &reduced);
    blkalign()
        .args(["partition", fresh.str(), "--yes", "--script", "-", "--backup"])
        .arg(fresh.path.with_extension("bak"))
        .write_stdin(reduced.as_str())
        .assert()
        .success();
    check_peers(fresh.str(), &plan);
    let sizes: Vec<_> = sfdisk_partitions(fresh.str()).iter().map(|p| (p.0, p.2)).collect();
    assert_eq!(sizes[0], (1, 40000));
    assert_eq!(sizes[2..], [(5, 60000), (6, fits)]);
}

fn dry_run_and_refusals_write_nothing() {
    let img = Image::new(64 * MIB);
    blkalign().args(["partition", img.str(), "--part", "rest"]).assert().success();
    assert!(std::fs::read(&img.path).expect("read").iter().all(|&b| b == 0), "dry run wrote");
    for args in [
        &["--part", "64MiB"][..],
        &["--part", "1MiB:nonsense"],
        &["--label", "mbr", "--part", "1MiB:x:name"],
    ] {
        blkalign().args(["partition", img.str(), "--yes"]).args(args).assert().code(2);
    }
    assert!(
        std::fs::read(&img.path).expect("read").iter().all(|&b| b == 0),
        "a refused request wrote"
    );
    partition_ok(img.str(), &["--part", "rest"]);
    let before = std::fs::read(&img.path).expect("read");
    let out = partition(img.str(), &["--label", "mbr", "--part", "rest"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--wipe"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&img.path).expect("read"),
        before,
        "an existing table was overwritten"
    );
}

/// A logical sector size other than the kernel's would make a table nobody
/// reads on a block device: refused there, while an image file may be
/// planned for the disk it will be copied to.
fn logical_sector_size_override_is_for_images_only() {
    if !needs(true, &["losetup"]) {
        return;
    }
    let img = Image::new(64 * MIB);
    let dev = Loop::attach(&img.path, 512);
    let args = ["--logical-sector-size", "4096", "--part", "rest"];
    let planned = blkalign().args(["plan", dev.str()]).args(args).output().expect("run");
    for out in [planned, partition(dev.str(), &args)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("512-byte logical sectors") && err.contains("4096"), "{err}");
    }
    let mut head = vec![0u8; MIB as usize];
    let device = std::fs::File::open(&dev.dev).expect("open");
    std::os::unix::fs::FileExt::read_exact_at(&device, &mut head, 0).expect("read");
    assert!(head.iter().all(|&b| b == 0), "a refused request wrote");
    let same = plan_json(dev.str(), &["--logical-sector-size", "512", "--part", "rest"]);
    assert_eq!(same["sector_size"], 512, "the kernel's own size is no override");
    drop(dev);
    let plan = plan_json(img.str(), &args);
    assert_eq!(plan["sector_size"], 4096, "an image may be laid out for a 4Kn disk");
}

fn mbr_cannot_address_beyond_2tib_at_512_bytes() {
    let img = Image::new(3 << 40);
    let out = blkalign()
        .args(["plan", img.str(), "--label", "mbr", "--part", "rest"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use --label gpt"));
}

fn backup_holds_the_old_sectors() {
    let img = Image::new(64 * MIB);
    std::fs::write(&img.path, vec![0xA5u8; (64 * MIB) as usize]).expect("fill");
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("b.bin");
    let b = backup.to_str().expect("utf-8");
    blkalign()
        .args(["partition", img.str(), "--yes", "--wipe", "--backup", b, "--part", "rest"])
        .assert()
        .success();
    let saved = std::fs::read(&backup).expect("backup");
    assert!(!saved.is_empty() && saved.iter().all(|&x| x == 0xA5));
    let sidecar: Value =
        serde_json::from_slice(&std::fs::read(format!("{b}.json")).expect("sidecar"))
            .expect("json");
    let total: u64 = sidecar["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| r["length"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(total, saved.len() as u64);
}

/// A 64 MiB file on a loop device with 4096-byte logical sectors: the
/// kernel must see the partitions we wrote.
fn on_4096_loop(label: &str, parts: &[&str]) {
    if !needs(true, &["losetup", "sfdisk", "sgdisk", "parted"]) {
        return;
    }
    let img = Image::new(64 * MIB);
    let dev = Loop::attach(&img.path, 4096);
    let mut args = vec!["--label", label];
    for p in parts {
        args.extend(["--part", *p]);
    }
    let plan = plan_json(dev.str(), &args);
    assert_eq!(plan["sector_size"], 4096);
    let refused = partition(img.str(), &args);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "the image is attached to {}: {why}", dev.str());
    assert!(
        why.contains(&format!("attached to {}", dev.str())),
        "refused for another reason: {why}"
    );
    partition_ok(dev.str(), &args);
    check_peers(dev.str(), &plan);
    assert!(dev.partition(1).exists(), "the kernel re-read the table");
}

fn gpt_on_a_4096_byte_loop_device() {
    on_4096_loop("gpt", &["1MiB:efi", "16MiB:swap", "rest:linux:data"]);
}

fn mbr_on_a_4096_byte_loop_device() {
    on_4096_loop("mbr", &["4MiB", "4MiB", "4MiB", "4MiB", "rest"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Random part lists, more than four on MBR included: every table passes.
    fn random_part_lists(
        sizes in proptest::collection::vec(1u64..6, 1..8),
        gpt in any::<bool>(),
        rest in any::<bool>(),
    ) {
        if !needs(false, &["sfdisk", "sgdisk", "parted"]) {
            return Ok(());
        }
        let img = Image::new(64 * MIB);
        let mut parts: Vec<String> = sizes.iter().map(|s| format!("{s}MiB")).collect();
        if rest {
            parts.push("rest".into());
        }
        let mut args: Vec<&str> = vec!["--label", if gpt { "gpt" } else { "mbr" }];
        for p in &parts {
            args.extend(["--part", p.as_str()]);
        }
        let plan = plan_json(img.str(), &args);
        partition_ok(img.str(), &args);
        check_peers(img.str(), &plan);
    }
}

/// Emulated drives: the lying 512e drive and a 4Kn one take our tables as
/// real drives do, and the peers agree.
fn on_emulated_drives() {
    if !needs(true, &["nbdkit", "nbdfuse", "losetup", "sfdisk", "sgdisk", "parted"]) {
        return;
    }
    for (preset, label) in [("wd-ears", "mbr"), ("4kn", "gpt")] {
        let drive = common::emulate::EmulatedDrive::start(&["--preset", preset, "--size", "64MiB"]);
        let args = [
            "--label",
            label,
            "--part",
            "8MiB:efi",
            "--part",
            "16MiB:swap",
            "--part",
            "rest:linux",
        ];
        let plan = plan_json(drive.str(), &args);
        partition_ok(drive.str(), &args);
        check_peers(drive.str(), &plan);
        assert!(drive.partition(3).exists(), "{preset}: the kernel knows the partitions");
    }
}

/// With the jumper's offset given, every start sits 7 sectors past a
/// 4 KiB boundary, and audit under the same offset agrees.
fn jumpered_drive_with_its_offset() {
    if !needs(true, &["nbdkit", "nbdfuse", "losetup", "sfdisk"]) {
        return;
    }
    let drive =
        common::emulate::EmulatedDrive::start(&["--preset", "wd-ears-jumper", "--size", "64MiB"]);
    let args = ["--label", "mbr", "--alignment-offset", "3584", "--part", "8MiB", "--part", "rest"];
    let plan = plan_json(drive.str(), &args);
    partition_ok(drive.str(), &args);
    for (_, start, _, _) in planned(&plan) {
        assert_eq!(start % 8, 7, "{plan}");
    }
    sfdisk_verify(drive.str());
    let out = blkalign()
        .args(["audit", "--alignment-offset", "3584", drive.str()])
        .output()
        .expect("audit");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
