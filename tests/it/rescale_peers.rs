//! `blkalign rescale` judged by the peers: tables sfdisk and sgdisk made on
//! a 4096-byte-sector loop device, rescaled on the image to 512, must read
//! in sfdisk, sgdisk and parted at 512 with every partition on the same
//! bytes (and an ext4 inside still clean); rescaled back, they must read on
//! a 4096-byte loop device as before. Refusals leave the image untouched;
//! `restore` undoes a rescale.

use crate::common;

use common::{
    blkalign, check_schema, json_of, needs, run, run_stdin, sfdisk_partitions, sha256_file, Image,
    Loop,
};
use std::process::Output;

tests![
    dos_with_logicals_4096_to_512_and_back,
    gpt_by_sfdisk_and_sgdisk_4096_to_512_and_back,
    a_start_not_on_a_4096_sector_is_refused,
    a_gpt_array_over_a_partition_is_refused,
    fat_with_512_byte_sectors_is_named_and_refused_at_4096,
    restore_undoes_a_rescale,
    a_4096_gpt_on_a_512_loop_device_is_rescaled_in_place,
    a_table_for_the_other_sector_size_is_named_and_not_written_blindly,
];

const MIB: u64 = 1 << 20;

/// `rescale` with its backup (when --yes) kept in `dir`.
fn rescale(image: &str, from: u64, to: u64, extra: &[&str], dir: &std::path::Path) -> Output {
    let backup = dir.join(format!("backup-{from}-{to}.bin"));
    blkalign()
        .args(["rescale", image, "--from", &from.to_string(), "--to", &to.to_string()])
        .args(["--backup", backup.to_str().expect("utf-8")])
        .args(extra)
        .output()
        .expect("run rescale")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (number, first byte, bytes) of every partition as sfdisk reads `dev`
/// at `ss`-byte sectors.
fn sfdisk_bytes(dev: &str, ss: u64) -> Vec<(u64, u64, u64)> {
    let (_, parts) = common::sfdisk_json(dev);
    parts.into_iter().map(|(n, start, size, _)| (u64::from(n), start * ss, size * ss)).collect()
}

/// (number, first byte, bytes) as `parted -m unit B print` reads an image.
fn parted_bytes(image: &str) -> Vec<(u64, u64, u64)> {
    let out = run("parted", &["-m", "-s", image, "unit", "B", "print"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let bytes = |s: &str| s.trim_end_matches('B').parse::<u64>().expect("bytes");
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let n = f.first()?.parse::<u64>().ok()?;
            Some((n, bytes(f[1]), bytes(f[3])))
        })
        .collect()
}

/// sgdisk -v: no problems.
fn sgdisk_verify(dev: &str) {
    let out = run("sgdisk", &["-v", dev]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("No problems found"), "sgdisk -v {dev}: {text}");
}

/// An ext4 of `bytes` at byte `offset` of the image.
fn mkfs_ext4_at(image: &str, offset: u64, bytes: u64) {
    let opt = format!("offset={offset}");
    let blocks = (bytes / 4096).to_string();
    run("mkfs.ext4", &["-q", "-F", "-b", "4096", "-E", &opt, image, &blocks]);
}

/// e2fsck -fn on the `bytes` at `offset`, copied out of the image.
fn e2fsck_at(image: &str, offset: u64, bytes: u64, dir: &std::path::Path) {
    let copy = dir.join("fs.img");
    let data = std::fs::read(image).expect("read image");
    let (at, len) = (offset as usize, bytes as usize);
    std::fs::write(&copy, &data[at..at + len]).expect("write copy");
    run("e2fsck", &["-fn", copy.to_str().expect("utf-8")]);
}

const DOS: &str = "label: dos\nstart=256, size=2048\nstart=4096, size=8000, type=5\n\
                   start=4352, size=1024\nstart=5632, size=1024\n";

fn dos_with_logicals_4096_to_512_and_back() {
    if !needs(true, &["losetup", "sfdisk", "parted", "mkfs.ext4", "e2fsck"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let image = Image::new(64 * MIB);
    let before = {
        let dev = Loop::attach(&image.path, 4096);
        run_stdin("sfdisk", &["-q", "--no-reread", "--no-tell-kernel", dev.str()], Some(DOS));
        sfdisk_bytes(dev.str(), 4096)
    };
    assert_eq!(before.len(), 4);
    let (fs_at, fs_len) = (before[2].1, before[2].2);
    mkfs_ext4_at(image.str(), fs_at, fs_len);

    let sha = sha256_file(image.str());
    ok(&rescale(image.str(), 4096, 512, &[], dir.path()));
    assert_eq!(sha256_file(image.str()), sha, "a dry run wrote");

    ok(&rescale(image.str(), 4096, 512, &["--yes"], dir.path()));
    assert_eq!(sfdisk_bytes(image.str(), 512), before, "sfdisk at 512");
    assert_eq!(parted_bytes(image.str()), before, "parted at 512");
    run("sfdisk", &["--verify", image.str()]);
    e2fsck_at(image.str(), fs_at, fs_len, dir.path());

    ok(&rescale(image.str(), 512, 4096, &["--yes"], dir.path()));
    let dev = Loop::attach(&image.path, 4096);
    assert_eq!(sfdisk_bytes(dev.str(), 4096), before, "sfdisk back at 4096");
    drop(dev);
    e2fsck_at(image.str(), fs_at, fs_len, dir.path());
}

fn gpt_by_sfdisk_and_sgdisk_4096_to_512_and_back() {
    if !needs(true, &["losetup", "sfdisk", "sgdisk", "parted", "mkfs.ext4", "e2fsck"]) {
        return;
    }
    let gpt = "label: gpt\nstart=256, size=1024\nstart=1280, size=2048, name=data\n";
    for maker in ["sfdisk", "sgdisk"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = Image::new(64 * MIB);
        let before = {
            let dev = Loop::attach(&image.path, 4096);
            if maker == "sfdisk" {
                run_stdin(
                    "sfdisk",
                    &["-q", "--no-reread", "--no-tell-kernel", dev.str()],
                    Some(gpt),
                );
            } else {
                run("sgdisk", &["-n1:256:+4M", "-n2:0:+8M", "-c2:data", dev.str()]);
            }
            sgdisk_verify(dev.str());
            sfdisk_bytes(dev.str(), 4096)
        };
        assert_eq!(before.len(), 2, "{maker}");
        mkfs_ext4_at(image.str(), before[1].1, before[1].2);

        let out = rescale(image.str(), 4096, 512, &["--yes"], dir.path());
        ok(&out);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.contains("GPT first usable LBA: ") && text.contains(" -> 34\n"), "{text}");
        sgdisk_verify(image.str());
        assert_eq!(sfdisk_bytes(image.str(), 512), before, "{maker}: sfdisk at 512");
        assert_eq!(parted_bytes(image.str()), before, "{maker}: parted at 512");
        e2fsck_at(image.str(), before[1].1, before[1].2, dir.path());

        ok(&rescale(image.str(), 512, 4096, &["--yes"], dir.path()));
        let dev = Loop::attach(&image.path, 4096);
        sgdisk_verify(dev.str());
        assert_eq!(sfdisk_bytes(dev.str(), 4096), before, "{maker}: sfdisk back at 4096");
    }
}

fn a_start_not_on_a_4096_sector_is_refused() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let image =
        Image::sfdisk(16 * MIB, "label: dos\nstart=2048, size=2048\nstart=4097, size=4096\n");
    let sha = sha256_file(image.str());
    for extra in [&[][..], &["--yes"]] {
        let out = rescale(image.str(), 512, 4096, extra, dir.path());
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("partition 2 starts at byte 2097664, not a multiple of 4096"),
            "{err}"
        );
        assert_eq!(sha256_file(image.str()), sha);
    }
}

fn a_gpt_array_over_a_partition_is_refused() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let image = Image::sfdisk(16 * MIB, "label: gpt\nfirst-lba: 40\nstart=40, size=4056\n");
    let sha = sha256_file(image.str());
    let out = rescale(image.str(), 512, 4096, &["--yes"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("partition 1 starts at byte 20480, inside the GPT"), "{err}");
    assert_eq!(sha256_file(image.str()), sha);
}

fn fat_with_512_byte_sectors_is_named_and_refused_at_4096() {
    if !needs(false, &["sfdisk", "mkfs.vfat", "dd"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let image = Image::sfdisk(32 * MIB, "label: dos\nstart=2048, size=32768, type=c\n");
    let fat = dir.path().join("fat.img");
    let fat = fat.to_str().expect("utf-8");
    run("mkfs.vfat", &["-S", "512", "-C", fat, "16384"]);
    let of = format!("of={}", image.str());
    run("dd", &[&format!("if={fat}"), &of, "bs=1M", "seek=1", "conv=notrunc", "status=none"]);
    let sha = sha256_file(image.str());
    let dry = rescale(image.str(), 512, 4096, &[], dir.path());
    assert_eq!(dry.status.code(), Some(1), "the dry run reports the problem");
    let err = String::from_utf8_lossy(&dry.stderr);
    assert!(err.contains("partition 1: vfat records 512-byte sectors"), "{err}");
    assert!(err.contains("mkfs.vfat -S 4096"), "{err}");
    let yes = rescale(image.str(), 512, 4096, &["--yes"], dir.path());
    assert_eq!(yes.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&yes.stderr).contains("refusing to rescale"));
    assert_eq!(sha256_file(image.str()), sha);
    // Going the other way, a FAT's 512-byte sectors are fine for Linux.
    let json = blkalign()
        .args(["rescale", image.str(), "--from", "512", "--to", "4096", "--json"])
        .output()
        .expect("run");
    check_schema("rescale", &String::from_utf8_lossy(&json.stdout));
    let doc = json_of(&json.stdout);
    assert_eq!(doc["contents"][0]["name"], "vfat");
    assert_eq!(doc["contents"][0]["blocks"], true);
}

fn restore_undoes_a_rescale() {
    if !needs(false, &["sfdisk"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let image = Image::sfdisk(
        16 * MIB,
        "label: dos\nstart=2048, size=4096\nstart=8192, size=16384, type=5\nstart=10240, size=4096\n",
    );
    let sha = sha256_file(image.str());
    ok(&rescale(image.str(), 512, 4096, &["--yes"], dir.path()));
    assert_ne!(sha256_file(image.str()), sha);
    // Read as 512 (sfdisk's size for a file), the entries now hold 4096-byte LBAs.
    assert_eq!(sfdisk_partitions(image.str()), [(1, 256, 512), (2, 1024, 2048)]);
    let backup = dir.path().join("backup-512-4096.bin");
    let out = blkalign()
        .args(["restore", backup.to_str().expect("utf-8"), image.str(), "--yes"])
        .output()
        .expect("run restore");
    ok(&out);
    assert_eq!(sha256_file(image.str()), sha);
}

fn a_4096_gpt_on_a_512_loop_device_is_rescaled_in_place() {
    if !needs(true, &["losetup", "sgdisk"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let image = Image::new(64 * MIB);
    {
        let dev = Loop::attach(&image.path, 4096);
        run("sgdisk", &["-n1:256:+4M", "-n2:0:+8M", dev.str()]);
    }
    let sha = sha256_file(image.str());
    let dev = Loop::attach(&image.path, 512);
    let backup = dir.path().join("backup.bin");
    let backup = backup.to_str().expect("utf-8");
    // No --to: the device's own 512.
    let out = blkalign()
        .args(["rescale", dev.str(), "--from", "4096", "--yes", "--backup", backup])
        .output()
        .expect("run rescale");
    ok(&out);
    sgdisk_verify(dev.str());
    assert_eq!(sfdisk_bytes(dev.str(), 512), [(1, MIB, 4 * MIB), (2, 5 * MIB, 8 * MIB)]);
    let out = blkalign().args(["restore", backup, "--yes"]).output().expect("run restore");
    ok(&out);
    drop(dev);
    assert_eq!(sha256_file(image.str()), sha);
}

/// Found on a real kernel: a 512-byte table on a device presenting 4096
/// (`losetup -b 4096`, or a disk put behind a bridge) read as if written
/// for it, with verdicts and no word of `rescale`; and `rescale --from 4096
/// --to 512` on a 4096-byte device wrote a table the device could no longer
/// read, without a warning. Now audit names the mismatch and the rescale
/// that fixes it, and such a rescale needs --for-another-attachment.
fn a_table_for_the_other_sector_size_is_named_and_not_written_blindly() {
    if !needs(true, &["losetup", "sfdisk", "sgdisk"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, "label: dos\nstart=2048, size=40960\nstart=43008\n");
    let dev = Loop::attach(&image.path, 4096);
    let (code, doc) = common::audit_json(&[dev.str()]);
    assert_eq!(code, 1, "{doc}");
    let problems = doc["problems"].to_string();
    assert!(problems.contains("table_sector_size"), "{problems}");
    let human = blkalign().args(["audit", dev.str()]).output().expect("audit");
    let hint = format!("`blkalign rescale {} --from 512`", dev.str());
    assert!(String::from_utf8_lossy(&human.stdout).contains(&hint), "{human:?}");
    drop(dev);

    let gpt = Image::new(64 * MIB);
    let dev = Loop::attach(&gpt.path, 4096);
    run("sgdisk", &["-n1:256:+4M", dev.str()]);
    let (code, doc) = common::audit_json(&[dev.str()]);
    assert!(!doc.to_string().contains("table_sector_size"), "{code} {doc}");
    let sha = sha256_file(gpt.str());
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup.bin");
    let backup = backup.to_str().expect("utf-8");
    let rescale = |extra: &[&str]| {
        let args = ["rescale", dev.str(), "--from", "4096", "--to", "512", "--backup", backup];
        blkalign().args(args).args(extra).output().expect("rescale")
    };
    let dry = rescale(&[]);
    let said = String::from_utf8_lossy(&dry.stderr);
    assert!(
        said.contains("vanish on this device") && said.contains("--for-another-attachment"),
        "{said}"
    );
    let refused = rescale(&["--yes"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(sha256_file(gpt.str()), sha, "a refusal wrote nothing");
    ok(&rescale(&["--yes", "--for-another-attachment"]));
    let (_, doc) = common::audit_json(&[dev.str()]);
    assert!(doc.to_string().contains("table_sector_size"), "{doc}");
    drop(dev);
    let at512 = Loop::attach(&gpt.path, 512);
    assert_eq!(sfdisk_bytes(at512.str(), 512), [(1, MIB, 4 * MIB)]);
}
