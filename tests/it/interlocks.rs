//! The writers never touch what is in use or what holds data: an image
//! attached to a loop device by another path, a loop device stacked on the
//! target, partitions holding file systems. Each refusal is proved with a
//! SHA-256 of the device or image taken before and after;
//! `restore` is proved by getting the exact bytes back and `e2fsck` passing.

use crate::common;

use common::{blkalign, json_of, needs, run, sha256_file, Image, Loop, Mount};
use std::path::{Path, PathBuf};

tests![
    image_attached_through_a_hard_link_is_in_use,
    image_attached_through_a_bind_mount_is_in_use,
    a_loop_device_whose_image_is_attached_twice_is_in_use,
    loop_stacked_on_the_disk_with_a_mount_is_in_use,
    loop_stacked_on_a_partition_with_a_mount_is_in_use,
    partition_refuses_to_lose_an_ext4_and_restore_brings_it_back,
    restore_takes_sidecars_of_the_previous_format_with_a_warning,
    restore_on_a_loop_device_tells_the_kernel,
    partition_sees_a_file_system_made_through_the_partition_node,
    a_file_system_on_the_whole_disk_counts,
    advise_offers_mkfs_only_for_empty_partitions,
    audit_shows_mount_points_as_lsblk_does,
];

const MIB: u64 = 1 << 20;
/// An old fdisk's partition: LBA 63, 120000 sectors, holding an ext4.
const OLD_FDISK: &str = "label: dos\nstart=63, size=120000, type=83\n";

/// Run blkalign; its exit code and stderr.
fn blk(args: &[&str]) -> (i32, String) {
    let out = blkalign().args(args).output().expect("run blkalign");
    (out.status.code().expect("exit code"), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// An ext4 of `blocks` 4 KiB blocks at byte `offset` of an image or device,
/// made without lazy initialisation so nothing writes it later.
fn mkfs_ext4(path: &str, offset: u64, blocks: u64, label: &str) {
    let extended = format!("offset={offset},nodiscard,lazy_itable_init=0,lazy_journal_init=0");
    let blocks = blocks.to_string();
    run("mkfs.ext4", &["-q", "-F", "-L", label, "-b", "4096", "-E", &extended, path, &blocks]);
}

/// A loop device over `file` from byte `offset`, detached on drop.
fn stack_loop(file: &str, offset: u64) -> Loop {
    let out = run("losetup", &["-f", "--show", "-o", &offset.to_string(), file]);
    Loop { dev: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()) }
}

/// `partition` and `realign` on `target` are refused (exit 2) with a
/// message containing every one of `words`, and `hashed` is unchanged.
fn both_refused(target: &str, hashed: &Path, words: &[&str]) {
    let before = sha256_file(hashed);
    let state = tempfile::tempdir().expect("tempdir");
    let backup = state.path().join("backup.bin");
    let journal = state.path().join("p1.journal");
    let attempts = [
        vec!["partition", target, "--part", "rest", "--wipe", "--force", "--yes", "--backup"],
        vec!["realign", target, "--yes", "--journal"],
    ];
    for (mut args, extra) in attempts.into_iter().zip([&backup, &journal]) {
        args.push(extra.to_str().expect("utf-8"));
        let out = blkalign()
            .args(&args)
            .env("BLKALIGN_STATE_DIR", state.path())
            .output()
            .expect("run blkalign");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} was not refused: {err}");
        for word in words {
            assert!(err.contains(word), "{args:?}: {word:?} not in {err}");
        }
        assert_eq!(sha256_file(hashed), before, "{args:?} changed {}", hashed.display());
    }
    assert!(!backup.exists(), "a refused partition left a backup");
}

/// An image with the old fdisk partition at 63 and an ext4 in it.
fn old_fdisk_image() -> Image {
    let image = Image::sfdisk(64 * MIB, OLD_FDISK);
    mkfs_ext4(image.str(), 63 * 512, 14000, "old");
    image
}

fn image_attached_through_a_hard_link_is_in_use() {
    if !needs(true, &["losetup", "sfdisk", "mkfs.ext4"]) {
        return;
    }
    let image = old_fdisk_image();
    let link = image.path.with_file_name("link.img");
    std::fs::hard_link(&image.path, &link).expect("hard link");
    let attached = Loop::attach(&link, 512);
    let words = [attached.str(), "through", link.to_str().expect("utf-8")];
    both_refused(image.str(), &image.path, &words);
}

fn image_attached_through_a_bind_mount_is_in_use() {
    if !needs(true, &["losetup", "sfdisk", "mkfs.ext4", "mount", "umount"]) {
        return;
    }
    let image = old_fdisk_image();
    let dir = image.path.parent().expect("image dir").to_str().expect("utf-8");
    let bind = Mount::new(dir, &["--bind"]);
    let attached = Loop::attach(&bind.dir.join("disk.img"), 512);
    both_refused(image.str(), &image.path, &[attached.str(), "through"]);
}

fn a_loop_device_whose_image_is_attached_twice_is_in_use() {
    if !needs(true, &["losetup", "sfdisk", "mkfs.ext4"]) {
        return;
    }
    let image = old_fdisk_image();
    let first = Loop::attach(&image.path, 512);
    let second = Loop::attach(&image.path, 512);
    both_refused(first.str(), &image.path, &[second.str(), "also attached"]);
}

fn loop_stacked_on_the_disk_with_a_mount_is_in_use() {
    if !needs(true, &["losetup", "sfdisk", "mkfs.ext4", "mount", "umount"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, OLD_FDISK);
    let disk = Loop::attach(&image.path, 512);
    let stacked = stack_loop(disk.str(), 63 * 512);
    mkfs_ext4(stacked.str(), 0, 14000, "stacked");
    // Read-only, so the mount itself writes nothing to hash against.
    let mount = Mount::new(stacked.str(), &["-o", "ro"]);
    let point = mount.dir.to_str().expect("utf-8");
    both_refused(disk.str(), &image.path, &[stacked.str(), "offset 32256", point]);
}

fn loop_stacked_on_a_partition_with_a_mount_is_in_use() {
    if !needs(true, &["losetup", "sfdisk", "partx", "mkfs.ext4", "mount", "umount"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, OLD_FDISK);
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(1);
    let part = disk.partition(1);
    let stacked = stack_loop(part.to_str().expect("utf-8"), 1 << 20);
    mkfs_ext4(stacked.str(), 0, 8000, "inner");
    let mount = Mount::new(stacked.str(), &["-o", "ro"]);
    let point = mount.dir.to_str().expect("utf-8");
    let name = part.file_name().and_then(|n| n.to_str()).expect("partition name");
    both_refused(disk.str(), &image.path, &[name, stacked.str(), point]);
}

/// `partition --label gpt --part rest --wipe --yes` with `extra`.
fn repartition(target: &str, backup: &Path, extra: &[&str]) -> (i32, String) {
    let backup = backup.to_str().expect("utf-8");
    let mut args = vec!["partition", target, "--label", "gpt", "--part", "rest", "--wipe"];
    args.extend(["--yes", "--backup", backup]);
    args.extend(extra);
    blk(&args)
}

/// e2fsck -fn on the 120000 sectors at LBA 63, copied out of `disk`.
fn e2fsck_at_63(disk: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let part = dir.path().join("p1.img");
    let (input, output) = (format!("if={}", disk.display()), format!("of={}", part.display()));
    run("dd", &[&input, &output, "bs=512", "skip=63", "count=120000", "status=none"]);
    run("e2fsck", &["-fn", part.to_str().expect("utf-8")]);
}

fn partition_refuses_to_lose_an_ext4_and_restore_brings_it_back() {
    if !needs(false, &["sfdisk", "mkfs.ext4", "e2fsck", "dd"]) {
        return;
    }
    let image = old_fdisk_image();
    let img = image.str();
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = |n: &str| dir.path().join(format!("{n}.bin"));
    let before = sha256_file(&image.path);

    let (code, err) = blk(&["partition", img, "--label", "gpt", "--part", "rest"]);
    assert!(code == 0 && err.contains("contains an ext4 signature"), "dry run: {err}");
    let (code, err) = repartition(img, &backup("refused"), &[]);
    assert_eq!(code, 2, "--wipe alone wrote over the ext4: {err}");
    let named = "partition 1 (sectors 63+120000) contains an ext4 signature (label \"old\")";
    assert!(err.contains(named) && err.contains("--force"), "{err}");
    assert_eq!(sha256_file(&image.path), before);
    assert!(!backup("refused").exists());

    let (code, err) = repartition(img, &backup("a"), &["--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("blkalign restore {}", backup("a").display())), "{err}");
    let written = sha256_file(&image.path);
    assert_ne!(written, before);
    assert_eq!(common::sfdisk_partitions(img).first().map(|p| p.1), Some(2048));

    let a = backup("a");
    let a = a.to_str().expect("utf-8");
    let (code, err) = blk(&["restore", a]);
    assert!(code == 0 && err.contains("dry run"), "{err}");
    assert_eq!(sha256_file(&image.path), written, "the dry run wrote");
    let (code, err) = blk(&["restore", a, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sha256_file(&image.path), before, "restore did not bring the exact bytes back");
    assert_eq!(common::sfdisk_partitions(img), vec![(1, 63, 120000)]);
    e2fsck_at_63(&image.path);
    let (code, err) = blk(&["restore", a, "--yes"]);
    assert!(code == 0 && err.contains("nothing to do"), "{err}");

    // Another disk: another size.
    let other = Image::new(32 * MIB);
    let other_before = sha256_file(&other.path);
    let (code, err) = blk(&["restore", a, other.str(), "--yes"]);
    assert!(code == 2 && err.contains("not the disk"), "{err}");
    assert_eq!(sha256_file(&other.path), other_before);

    // The same disk, changed since: restore would undo someone else's table.
    let (code, err) = repartition(img, &backup("b"), &["--force"]);
    assert_eq!(code, 0, "{err}");
    run_sfdisk(img, "label: dos\nstart=4096, size=8192, type=83\n");
    let changed = sha256_file(&image.path);
    let b = backup("b");
    let (code, err) = blk(&["restore", b.to_str().expect("utf-8"), "--yes"]);
    assert!(code == 2 && err.contains("changed since"), "{err}");
    assert_eq!(sha256_file(&image.path), changed);
}

fn run_sfdisk(dev: &str, script: &str) {
    common::run_stdin("sfdisk", &["-q", "--no-reread", "--no-tell-kernel", dev], Some(script));
}

fn restore_takes_sidecars_of_the_previous_format_with_a_warning() {
    if !needs(false, &["sfdisk", "mkfs.ext4"]) {
        return;
    }
    let image = old_fdisk_image();
    let before = sha256_file(&image.path);
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("old.bin");
    let (code, err) = repartition(image.str(), &backup, &["--force"]);
    assert_eq!(code, 0, "{err}");
    // What `partition` wrote before restore existed.
    let json = dir.path().join("old.bin.json");
    let mut doc = json_of(&std::fs::read(&json).expect("sidecar"));
    let sidecar = doc.as_object_mut().expect("object");
    assert_eq!(sidecar.remove("format"), Some(2.into()));
    sidecar.remove("identity").expect("identity");
    for region in sidecar["regions"].as_array_mut().expect("regions") {
        let region = region.as_object_mut().expect("region");
        region.remove("saved_sha256").expect("saved hash");
        region.remove("written_sha256").expect("written hash");
    }
    std::fs::write(&json, serde_json::to_vec(&doc).expect("json")).expect("write sidecar");
    let (code, err) = blk(&["restore", backup.to_str().expect("utf-8"), "--yes"]);
    assert!(code == 0 && err.contains("older blkalign"), "{err}");
    assert_eq!(sha256_file(&image.path), before);
}

fn restore_on_a_loop_device_tells_the_kernel() {
    if !needs(true, &["losetup", "sfdisk", "partx", "mkfs.ext4", "e2fsck", "dd"]) {
        return;
    }
    let image = old_fdisk_image();
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(1);
    let before = sha256_file(&disk.dev);
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("loop.bin");
    let (code, err) = repartition(disk.str(), &backup, &[]);
    assert!(code == 2 && err.contains("ext4"), "{err}");
    assert_eq!(sha256_file(&disk.dev), before);
    let (code, err) = repartition(disk.str(), &backup, &["--force"]);
    assert_eq!(code, 0, "{err}");
    let name = disk.dev.file_name().and_then(|n| n.to_str()).expect("loop name");
    let start = || {
        let path = format!("/sys/block/{name}/{name}p1/start");
        std::fs::read_to_string(path).expect("partition 1 in sysfs").trim().to_string()
    };
    assert_eq!(start(), "2048");
    let (code, err) = blk(&["restore", backup.to_str().expect("utf-8"), "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sha256_file(&disk.dev), before);
    assert_eq!(start(), "63", "the kernel was not told");
    e2fsck_at_63(&disk.dev);
}

/// Issue 27: an ext4 made through the partition's node while the disk was
/// held open, its old (empty) sectors cached through the disk's node, is
/// still seen: `partition --yes` refuses to lose it and writes nothing.
fn partition_sees_a_file_system_made_through_the_partition_node() {
    if !needs(true, &["losetup", "sfdisk", "partx", "mkfs.ext4"]) {
        return;
    }
    use std::os::unix::fs::FileExt;
    let image = Image::sfdisk(64 * MIB, OLD_FDISK);
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(1);
    let held = std::fs::File::open(&disk.dev).expect("open the disk");
    let mut cached = vec![0u8; MIB as usize];
    held.read_exact_at(&mut cached, 63 * 512).expect("read the partition through the disk");
    mkfs_ext4(disk.partition(1).to_str().expect("utf-8"), 0, 14000, "new");
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err) = repartition(disk.str(), &dir.path().join("b.bin"), &[]);
    assert!(code == 2 && err.contains("ext4 signature (label \"new\")"), "{err}");
    assert_eq!(common::sfdisk_partitions(image.str()), vec![(1, 63, 120000)]);
    drop(held);
}

fn a_file_system_on_the_whole_disk_counts() {
    if !needs(false, &["mkfs.ext4"]) {
        return;
    }
    let image = Image::new(32 * MIB);
    mkfs_ext4(image.str(), 0, 8192, "whole");
    let before = sha256_file(&image.path);
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err) = repartition(image.str(), &dir.path().join("b.bin"), &[]);
    assert!(code == 2 && err.contains("the disk (no partitions) contains an ext4"), "{err}");
    assert_eq!(sha256_file(&image.path), before);
}

fn advise_offers_mkfs_only_for_empty_partitions() {
    if !needs(false, &["sfdisk", "mkfs.ext4"]) {
        return;
    }
    let script = "label: dos\nstart=2048, size=40960, type=83\nstart=43008, size=40960, type=83\n";
    let image = Image::sfdisk(64 * MIB, script);
    mkfs_ext4(image.str(), 2048 * 512, 5120, "data");
    let out = blkalign().args(["advise", image.str(), "--json"]).output().expect("advise");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json_of(&out.stdout);
    let parts = doc["partitions"].as_array().expect("partitions");
    let commands = |n: usize| -> Vec<(String, bool)> {
        let advice = parts[n]["advice"].as_array().expect("advice");
        let command = |a: &serde_json::Value| a["command"].as_str().unwrap_or("").to_string();
        advice.iter().map(|a| (command(a), a["destroys_data"] == true)).collect()
    };
    assert_eq!(parts[0]["contents"]["name"], "ext4");
    let held = commands(0);
    assert!(held.iter().all(|(c, destroys)| !c.starts_with("mkfs") && !destroys), "{held:?}");
    assert!(held.iter().any(|(c, _)| c.contains("tune2fs ")), "{held:?}");
    assert!(parts[1]["contents"].is_null());
    let empty = commands(1);
    assert!(empty.iter().any(|(c, d)| c.contains("mkfs.ext4 ") && *d), "{empty:?}");
    assert!(empty.iter().all(|(_, d)| *d), "{empty:?}");

    let out = blkalign().args(["advise", image.str()]).output().expect("advise");
    let text = String::from_utf8_lossy(&out.stdout);
    let (p1, p2) =
        (format!("partition 1 of {}", image.str()), format!("partition 2 of {}", image.str()));
    assert!(text.contains(&format!("# DESTROYS DATA on {p2}")), "{text}");
    assert!(!text.contains(&format!("DESTROYS DATA on {p1}")), "{text}");
    assert!(!text.contains("mkfs.ext4 -b 4096 ${dev}p1"), "{text}");
}

/// `audit` says where a partition is mounted as lsblk's MOUNTPOINTS does,
/// in the table (`-o +MOUNTPOINTS`) and the JSON, escapes undone.
fn audit_shows_mount_points_as_lsblk_does() {
    if !needs(true, &["losetup", "sfdisk", "partx", "mkfs.ext4", "mount", "umount", "lsblk"]) {
        return;
    }
    let image = old_fdisk_image();
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(1);
    let part = format!("{}p1", disk.str());
    let mount = Mount::new(&part, &["-o", "ro"]);
    let lsblk = run("lsblk", &["-rno", "MOUNTPOINTS", &part]);
    let lsblk = String::from_utf8_lossy(&lsblk.stdout).trim().replace("\\x20", " ");
    assert_eq!(Path::new(&lsblk), mount.dir, "lsblk disagrees with mount");
    let out = blkalign().args(["audit", disk.str(), "--json"]).output().expect("run blkalign");
    let doc = json_of(&out.stdout);
    let points = &doc["targets"][0]["partitions"][0]["mountpoints"];
    assert_eq!(points, &serde_json::json!([lsblk]), "{doc}");
    let out = blkalign()
        .args(["audit", disk.str(), "-o", "NAME,MOUNTPOINTS", "-r", "-n"])
        .output()
        .expect("run blkalign");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().any(|l| l.ends_with(&lsblk)), "{table}");
}
