//! The audit command as users meet it: exit codes, JSON and Prometheus
//! shapes, bad input, fixtures of real drive families.

use crate::common;

use common::{audit_json, blkalign, json_of, needs, Image};
use serde_json::Value;
use std::path::Path;

tests![
    missing_file_is_an_error_not_a_finding,
    random_bytes_have_no_table,
    empty_file_is_reported_not_panicked,
    lba_63_is_misaligned_and_2048_aligned,
    json_contract_shape,
    prometheus_shape,
    human_output_is_plain_when_piped,
    overrides_change_the_judgement,
    no_argument_run_lists_this_machine,
    lying_wd_ears_is_caught_by_the_quirk_table,
    unreadable_disk_still_shows_kernel_topology_and_partitions,
    jumpered_drive_makes_63_aligned,
    usb_bridge_bogus_optimal_io_is_neutralised,
    nvme_optimal_io_is_used,
    four_kn_fixture,
    json_with_a_repeated_key_is_refused,
    an_unattached_loop_device_is_named_so,
    device_mapper_and_md_devices_go_by_lsblks_names,
];

fn missing_file_is_an_error_not_a_finding() {
    let out = blkalign().args(["audit", "/nonexistent/disk.img"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/disk.img"), "{err}");
}

fn random_bytes_have_no_table() {
    let image = Image::new(1 << 20);
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let bytes: Vec<u8> = (0..1 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    std::fs::write(&image.path, bytes).expect("write");
    let (code, t) = audit_json(&[image.str()]);
    assert_eq!(code, 0, "{t}");
    assert_eq!(t["table"], "none");
    assert_eq!(t["partitions"].as_array().map(Vec::len), Some(0));
}

fn empty_file_is_reported_not_panicked() {
    let image = Image::new(0);
    let out = blkalign().args(["audit", image.str()]).output().expect("run");
    assert!(matches!(out.status.code(), Some(0) | Some(2)), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

fn lba_63_is_misaligned_and_2048_aligned() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let old = Image::sfdisk(64 << 20, "label: dos\nstart=63, size=20000, type=83\n");
    let (code, t) = audit_json(&[old.str()]);
    assert_eq!(code, 1, "{t}");
    let p = &t["partitions"][0];
    assert_eq!(
        (p["number"].as_u64(), p["start"].as_u64(), p["start_bytes"].as_u64()),
        (Some(1), Some(63), Some(32256))
    );
    assert_eq!(p["verdict"], "misaligned");
    assert_eq!(p["aligned_physical"], false);
    assert_eq!(p["nearest_aligned_before"], 56);
    assert_eq!(p["nearest_aligned_after"], 64);

    let new = Image::sfdisk(64 << 20, "label: dos\nstart=2048, size=20000, type=83\n");
    let (code, t) = audit_json(&[new.str()]);
    assert_eq!(code, 0, "{t}");
    assert_eq!(t["partitions"][0]["verdict"], "aligned");
}

fn json_contract_shape() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let image = Image::sfdisk(
        64 << 20,
        "label: gpt\nfirst-lba: 34\nstart=40, size=4000\nstart=8192, size=8192\n",
    );
    let out = blkalign().args(["audit", "--json", image.str()]).output().expect("run");
    let doc = json_of(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "suboptimal is not a failure without --strict: {doc}");
    assert_eq!(doc["version"], 1);
    let t = &doc["targets"][0];
    for key in [
        "path",
        "size_bytes",
        "logical_sector_size",
        "physical_sector_size",
        "physical_sector_source",
        "alignment_offset",
        "optimal_io_size",
        "table",
        "problems",
        "partitions",
    ] {
        assert!(t.get(key).is_some(), "target lacks {key}: {t}");
    }
    assert_eq!(t["table"], "gpt");
    assert_eq!(t["size_bytes"], 64 << 20);
    assert_eq!(t["logical_sector_size"], 512);
    assert!(t["problems"].is_array());
    let parts = t["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 2);
    for p in parts {
        for key in [
            "number",
            "start",
            "size",
            "start_bytes",
            "aligned_physical",
            "aligned_optimal",
            "aligned_1mib",
            "verdict",
        ] {
            assert!(p.get(key).is_some(), "partition lacks {key}: {p}");
        }
        assert!(p["aligned_optimal"].is_null(), "an image reports no optimal I/O");
    }
    assert_eq!(parts[0]["verdict"], "suboptimal");
    assert_eq!(parts[1]["verdict"], "aligned");
    let strict = blkalign().args(["audit", "--strict", image.str()]).output().expect("run");
    assert_eq!(strict.status.code(), Some(1));
}

fn prometheus_shape() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    // An extended container at an odd start, holding an aligned logical.
    let script = "label: dos\nstart=63, size=1900\nstart=4095, size=20000, type=5\n\
                  start=6144, size=4096\n";
    let image = Image::sfdisk(64 << 20, script);
    let out =
        blkalign().args(["audit", "--format", "prometheus", image.str()]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for family in [
        "blkalign_partition_misaligned",
        "blkalign_partition_start_bytes",
        "blkalign_disk_physical_sector_bytes",
        "blkalign_audit_timestamp_seconds",
    ] {
        assert!(text.contains(&format!("# HELP {family} ")), "{text}");
        assert!(text.contains(&format!("# TYPE {family} gauge")), "{text}");
    }
    let dev = image.str();
    assert!(
        text.contains(&format!(
            "blkalign_partition_misaligned{{device=\"{dev}\",partition=\"1\"}} 1"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "blkalign_partition_misaligned{{device=\"{dev}\",partition=\"5\"}} 0"
        )),
        "{text}"
    );
    assert!(!text.contains("partition=\"2\""), "the extended container raises no alarm: {text}");
    assert!(
        text.contains(&format!(
            "blkalign_partition_start_bytes{{device=\"{dev}\",partition=\"1\"}} 32256"
        )),
        "{text}"
    );
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().expect("value");
        assert!(value.parse::<f64>().is_ok(), "bad sample line {line}");
    }
}

fn human_output_is_plain_when_piped() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let image = Image::sfdisk(64 << 20, "label: dos\nstart=63, size=2000\n");
    let out = blkalign().args(["audit", image.str()]).output().expect("run");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(!text.contains('\u{1b}'), "escape codes in piped output: {text:?}");
    assert!(text.contains("misaligned"), "{text}");
    assert!(text.contains("straddles 2 physical sectors"), "{text}");
    assert!(text.contains("summary: MISALIGNED"), "{text}");
}

fn overrides_change_the_judgement() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let image = Image::sfdisk(64 << 20, "label: dos\nstart=63, size=2000\n");
    let (code, t) =
        audit_json(&["--alignment-offset", "3584", "--physical-sector-size", "4096", image.str()]);
    assert_eq!(code, 0, "LBA 63 is aligned on a jumpered drive: {t}");
    assert_eq!(t["alignment_offset"], 3584);
    assert_eq!(t["physical_sector_source"], "override");
    let (code, _) = audit_json(&["--trust-kernel", "--physical-sector-size", "512", image.str()]);
    assert_eq!(code, 0, "a genuine 512-byte drive does not care");
    // An image has no kernel to trust: its 512 is a guess.
    let (code, t) = audit_json(&["--trust-kernel", image.str()]);
    assert_eq!((code, &t["effective_physical_sector_size"]), (1, &4096.into()), "{t}");
    assert!(t["notes"].to_string().contains("an image has no kernel values to trust"), "{t}");
    let bad = blkalign()
        .args(["audit", "--physical-sector-size", "1000", image.str()])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(2));
}

fn no_argument_run_lists_this_machine() {
    let out = blkalign().args(["audit", "--json"]).output().expect("run");
    let code = out.status.code().expect("exit code");
    assert!((0..=2).contains(&code), "{out:?}");
    let doc = json_of(&out.stdout);
    let targets = doc["targets"].as_array().expect("targets");
    let disks = std::fs::read_dir("/sys/block")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    !name.starts_with("ram")
                        && !name.starts_with("zram")
                        && !name.starts_with("loop")
                })
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("size")).is_ok_and(|s| s.trim() != "0")
                })
                .count()
        })
        .unwrap_or(0);
    assert!(targets.len() >= disks, "{} targets for {disks} disks: {doc}", targets.len());
    for t in targets {
        assert!(t["path"].as_str().is_some_and(|p| p.starts_with("/dev/")), "{t}");
        assert!(
            t["logical_sector_size"].as_u64().is_some(),
            "sysfs topology even when unreadable: {t}"
        );
    }
}

/// Audit a fixture disk, with `image` (if any) as the content of its node.
fn fixture_audit(fixture: &str, disk: &str, image: Option<&Path>) -> (i32, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(fixture);
    common::run(
        "cp",
        &["-a", &format!("{}/.", src.display()), dir.path().to_str().expect("utf-8")],
    );
    // Our own dev/: the disk node is `image`, or absent (unreadable).
    let _ = std::fs::remove_dir_all(dir.path().join("dev"));
    std::fs::create_dir_all(dir.path().join("dev")).expect("dev dir");
    if let Some(image) = image {
        std::fs::copy(image, dir.path().join("dev").join(disk)).expect("copy image");
    }
    let sys = dir.path().join("sys");
    let out = blkalign()
        .args(["--sysfs-root", sys.to_str().expect("utf-8"), "audit", "--json"])
        .output()
        .expect("run");
    let code = out.status.code().expect("exit code");
    let doc = json_of(&out.stdout);
    let target = doc["targets"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == disk).cloned())
        .unwrap_or_else(|| panic!("{disk} not listed: {doc}"));
    (code, target)
}

fn lying_wd_ears_is_caught_by_the_quirk_table() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let image = Image::sfdisk(64 << 20, "label: dos\nstart=63, size=2000\n");
    let (code, t) = fixture_audit("wd-ears-lying", "sda", Some(&image.path));
    assert_eq!(code, 1, "{t}");
    assert_eq!(t["physical_sector_size"], 4096);
    assert_eq!(t["physical_sector_source"], "quirk");
    assert_eq!(t["partitions"][0]["verdict"], "misaligned");
}

fn unreadable_disk_still_shows_kernel_topology_and_partitions() {
    let (code, t) = fixture_audit("sata-512e", "sda", None);
    assert_eq!(code, 2, "an unreadable disk is an error: {t}");
    assert_eq!(t["physical_sector_size"], 4096);
    assert_eq!(t["physical_sector_source"], "kernel");
    assert_eq!(t["table"], "unknown");
    assert!(t["error"].as_str().is_some(), "{t}");
    let parts = t["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 2, "{t}");
    assert_eq!(parts[0]["source"], "kernel");
    assert_eq!(parts[0]["start"], 2048);
}

fn jumpered_drive_makes_63_aligned() {
    let (_, t) = fixture_audit("jumpered", "sda", None);
    assert_eq!(t["alignment_offset"], 3584);
    assert_eq!(t["partitions"][0]["start"], 63);
    assert_eq!(t["partitions"][0]["aligned_physical"], true);
}

fn usb_bridge_bogus_optimal_io_is_neutralised() {
    let (_, t) = fixture_audit("usb-bridge", "sdb", None);
    assert!(t["optimal_io_size"].is_null(), "{t}");
    assert!(t["notes"].to_string().contains("33553920"), "{t}");
}

fn nvme_optimal_io_is_used() {
    let (_, t) = fixture_audit("nvme-optimal", "nvme0n1", None);
    assert_eq!(t["optimal_io_size"], 131072);
    assert_eq!(t["partitions"][0]["aligned_optimal"], true);
}

fn four_kn_fixture() {
    let (_, t) = fixture_audit("4kn", "sda", None);
    assert_eq!(t["logical_sector_size"], 4096);
    assert_eq!(t["physical_sector_size"], 4096);
}

/// The tests' JSON reader refuses what strict parsers refuse.
fn json_with_a_repeated_key_is_refused() {
    let twice = std::panic::catch_unwind(|| json_of(br#"{"a": {"version": 1, "version": 1}}"#));
    assert!(twice.is_err());
    assert_eq!(json_of(br#"{"a": [1, -2, 0.5, "x", null, true, {"b": 1}]}"#)["a"][6]["b"], 1);
}

/// An unbound loop device is not an empty disk: "not attached", exit 2, for
/// every command that takes a target; a bound one is audited.
fn an_unattached_loop_device_is_named_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sys = dir.path().join("sys");
    for (name, bound) in [("loop7", false), ("loop8", true)] {
        let block = sys.join("block").join(name);
        std::fs::create_dir_all(block.join("queue")).expect("sysfs dir");
        for (attr, value) in [("size", "0"), ("queue/logical_block_size", "512")] {
            std::fs::write(block.join(attr), value).expect("sysfs file");
        }
        if bound {
            std::fs::create_dir_all(block.join("loop")).expect("loop dir");
            std::fs::write(block.join("size"), "2048").expect("size");
        }
        std::fs::create_dir_all(dir.path().join("dev")).expect("dev dir");
        std::fs::write(dir.path().join("dev").join(name), vec![0u8; 1 << 20]).expect("node");
    }
    let sys = sys.to_str().expect("utf-8");
    let node = |name: &str| dir.path().join("dev").join(name).to_str().expect("utf-8").to_string();
    for command in [&["audit"][..], &["realign"], &["advise"]] {
        let out = blkalign()
            .args(["--sysfs-root", sys])
            .args(command)
            .arg(node("loop7"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stderr.contains("loop7: loop device not attached"), "{command:?}: {stderr}");
    }
    let out =
        blkalign().args(["--sysfs-root", sys, "audit"]).arg(node("loop8")).output().expect("run");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not attached"));
}

/// device-mapper and md devices by the names lsblk gives them: a
/// partitioned dm-linear is /dev/mapper/whole (not /dev/dm-1), kind "dm",
/// its partition whole-part1 (sfdisk's and kpartx's name, not dm-1p1), and
/// the kernel's missing partitions are kpartx's to map, not partx's; md0 is
/// kind "md".
fn device_mapper_and_md_devices_go_by_lsblks_names() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let put = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, format!("{text}\n")).expect("write");
    };
    for (name, dev) in [("dm-1", "254:1"), ("md0", "9:0")] {
        put(&format!("sys/block/{name}/size"), "131072");
        put(&format!("sys/block/{name}/dev"), dev);
        put(&format!("sys/block/{name}/queue/logical_block_size"), "512");
        put(&format!("sys/block/{name}/queue/physical_block_size"), "4096");
    }
    put("sys/block/dm-1/dm/name", "whole");
    put("sys/block/md0/md/level", "raid1");
    let image = Image::sfdisk(64 << 20, "label: dos\nstart=63, size=2000\n");
    let mapper = dir.path().join("dev/mapper/whole");
    std::fs::create_dir_all(mapper.parent().expect("parent")).expect("mkdir");
    std::fs::copy(&image.path, &mapper).expect("copy image");
    std::fs::copy(&image.path, dir.path().join("dev/md0")).expect("copy image");
    let sys = dir.path().join("sys");
    let sys = sys.to_str().expect("utf-8");
    let out = blkalign().args(["--sysfs-root", sys, "audit", "--json"]).output().expect("run");
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    common::check_schema("audit", &json);
    let doc = json_of(&out.stdout);
    let target = |name: &str| {
        let targets = doc["targets"].as_array().expect("targets");
        targets.iter().find(|t| t["name"] == name).cloned().expect("listed")
    };
    let (dm, md) = (target("dm-1"), target("md0"));
    assert_eq!((dm["path"].as_str(), &dm["kind"]), (mapper.to_str(), &"dm".into()), "{dm}");
    assert_eq!(md["kind"], "md", "{md}");
    let hint = dm["problems"].to_string();
    let want = format!("kpartx -a {} maps them as {}-part1", mapper.display(), mapper.display());
    assert!(hint.contains(&want) && !hint.contains("(partx -a"), "{hint}");
    let out = blkalign().args(["--sysfs-root", sys, "audit"]).arg(&mapper).output().expect("run");
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.contains("whole-part1") && !human.contains("dm-1p1"), "{human}");
}
