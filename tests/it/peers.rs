//! Our verdicts against the peers': sfdisk and sgdisk build the tables,
//! sfdisk --json says where partitions are, parted align-check judges.

use crate::common;

use common::{audit_json, needs, parted_aligned, run, run_stdin, sfdisk_partitions, Image, Loop};
use proptest::prelude::*;
use serde_json::Value;

tests![
    mbr_with_logical_partitions_at_odd_starts,
    gpt_by_sgdisk_at_34_and_40,
    gpt_with_broken_primary_is_read_from_the_backup,
    gpt_on_a_4096_byte_loop_device,
    mbr_image_audited_via_loop_device_matches_image,
    random_layouts_agree_with_parted,
];

/// Every partition: same place as sfdisk says, 1 MiB verdict as parted's,
/// physical verdict as the arithmetic on `sector`-byte sectors.
fn check_against_peers(dev: &str, sector: u64) -> Value {
    let (code, target) = audit_json(&[dev]);
    let ours = target["partitions"].as_array().expect("partitions").clone();
    let theirs = sfdisk_partitions(dev);
    assert_eq!(ours.len(), theirs.len(), "partition count: {target}");
    let mut any_misaligned = false;
    for (number, start, size) in theirs {
        let p = ours
            .iter()
            .find(|p| p["number"] == number)
            .unwrap_or_else(|| panic!("partition {number} missing: {target}"));
        assert_eq!(p["start"], start, "start of {number}");
        let extended = p["kind"] == "extended";
        if !extended {
            assert_eq!(p["size"], size, "size of {number}");
            any_misaligned |= p["verdict"] == "misaligned";
        }
        assert_eq!(
            p["aligned_1mib"],
            parted_aligned(dev, number),
            "parted align-check opt {number}: {p}"
        );
        assert_eq!(
            p["aligned_physical"],
            start * sector % 4096 == 0,
            "physical verdict of {number}"
        );
    }
    assert_eq!(code, if any_misaligned { 1 } else { 0 }, "{target}");
    target
}

fn mbr_with_logical_partitions_at_odd_starts() {
    if !needs(false, &["sfdisk", "parted"]) {
        return;
    }
    let script = "label: dos\n\
        start=63, size=2000, type=83\n\
        start=4096, size=60000, type=5\n\
        start=4159, size=3000, type=83\n\
        start=8192, size=4000, type=83\n\
        start=20000, size=5000, type=82\n";
    let image = Image::sfdisk(64 << 20, script);
    let target = check_against_peers(image.str(), 512);
    let numbers: Vec<u64> = target["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["number"].as_u64())
        .collect();
    assert_eq!(numbers, [1, 2, 5, 6, 7]);
    assert_eq!(target["partitions"][2]["kind"], "logical");
}

fn gpt_by_sgdisk_at_34_and_40() {
    if !needs(false, &["sgdisk", "sfdisk", "parted"]) {
        return;
    }
    let image = Image::new(64 << 20);
    run(
        "sgdisk",
        &[
            "-a",
            "1",
            "-n",
            "1:34:39",
            "-n",
            "2:40:2047",
            "-n",
            "3:2048:+8M",
            "-n",
            "4:20483:+1M",
            image.str(),
        ],
    );
    let target = check_against_peers(image.str(), 512);
    assert_eq!(target["table"], "gpt");
    assert_eq!(target["partitions"][0]["verdict"], "misaligned");
    assert_eq!(target["partitions"][1]["verdict"], "suboptimal");
    assert_eq!(target["partitions"][2]["verdict"], "aligned");
}

fn gpt_with_broken_primary_is_read_from_the_backup() {
    if !needs(false, &["sgdisk", "sfdisk"]) {
        return;
    }
    let image = Image::new(64 << 20);
    run("sgdisk", &["-n", "1:2048:+4M", "-n", "2:0:+4M", image.str()]);
    let before = sfdisk_partitions(image.str());
    // Zero the primary header's signature: sector 1.
    let data = std::fs::read(&image.path).expect("read");
    let mut data = data;
    data[512..520].fill(0);
    std::fs::write(&image.path, data).expect("write");
    let (code, target) = audit_json(&[image.str()]);
    // Linux (without `gpt` on its command line) sees no partitions: exit 1.
    assert_eq!(code, 1, "{target}");
    let parts: Vec<(u64, u64, u64)> = target["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["number"].as_u64().unwrap(),
                p["start"].as_u64().unwrap(),
                p["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(parts, before);
    let problems = target["problems"].to_string();
    assert!(problems.contains("gpt_primary_invalid"), "{problems}");
}

fn gpt_on_a_4096_byte_loop_device() {
    if !needs(true, &["losetup", "partx", "sgdisk", "sfdisk", "parted"]) {
        return;
    }
    let image = Image::new(64 << 20);
    let dev = Loop::attach(&image.path, 4096);
    run("sgdisk", &["-a", "1", "-n", "1:6:255", "-n", "2:256:+4M", "-n", "3:4099:+1M", dev.str()]);
    dev.add_partitions(3);
    let target = check_against_peers(dev.str(), 4096);
    assert_eq!(target["logical_sector_size"], 4096);
    assert!(
        matches!(target["logical_sector_source"].as_str(), Some("kernel" | "ioctl")),
        "{target}"
    );
    assert_eq!(target["table"], "gpt");
    assert_eq!(target["partitions"][1]["verdict"], "aligned");
    // A partition node audits its disk and highlights itself.
    let node = dev.partition(2);
    let (_, via_part) = audit_json(&[node.to_str().unwrap()]);
    assert_eq!(via_part["path"], dev.str());
    let selected: Vec<bool> =
        via_part["partitions"].as_array().unwrap().iter().map(|p| p["selected"] == true).collect();
    assert_eq!(selected, [false, true, false]);
}

fn mbr_image_audited_via_loop_device_matches_image() {
    if !needs(true, &["losetup", "partx", "sfdisk"]) {
        return;
    }
    let image = Image::sfdisk(64 << 20, "label: dos\nstart=63, size=1900\nstart=2048, size=4096\n");
    let (_, from_file) = audit_json(&[image.str()]);
    let dev = Loop::attach(&image.path, 512);
    dev.add_partitions(2);
    let (code, from_dev) = audit_json(&[dev.str()]);
    assert_eq!(code, 1);
    assert_eq!(from_dev["partitions"], from_file["partitions"]);
    assert_eq!(from_dev["kind"], "disk");
    let problems = from_dev["problems"].to_string();
    assert!(!problems.contains("kernel_differs"), "{problems}");
}

/// A random layout as an sfdisk script, and whether it is GPT.
fn layout() -> impl Strategy<Value = (bool, Vec<(u64, u64)>)> {
    (any::<bool>(), proptest::collection::vec((0u64..3000, 1u64..3000), 1..5)).prop_map(
        |(gpt, gaps)| {
            let mut at = if gpt { 34 } else { 1 };
            let primaries = if gpt { gaps.len() } else { gaps.len().min(4) };
            let parts = gaps
                .into_iter()
                .take(primaries)
                .map(|(gap, size)| {
                    let start = at + gap;
                    at = start + size;
                    (start, size)
                })
                .collect();
            (gpt, parts)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    fn random_layouts_agree_with_parted((gpt, parts) in layout()) {
        if !needs(false, &["sfdisk", "parted"]) {
            return Ok(());
        }
        let mut script = if gpt { "label: gpt\nfirst-lba: 34\n" } else { "label: dos\n" }.to_string();
        for (start, size) in &parts {
            script.push_str(&format!("start={start}, size={size}\n"));
        }
        let image = Image::new(16 << 20);
        run_stdin("sfdisk", &["--no-reread", "--no-tell-kernel", image.str()], Some(&script));
        check_against_peers(image.str(), 512);
    }
}
