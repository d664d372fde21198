//! VM disk images: qcow2, VMDK, VHD, VHDX, VDI and QED made by `qemu-img
//! convert` from a raw image sfdisk partitioned are audited through QEMU
//! (qemu-storage-daemon): every partition where sfdisk reads it in the raw
//! image, the virtual size qemu-img reports, the raw image's verdicts.
//! Backing chains are followed, an encrypted image and one a running VM
//! holds are refused naming why, no command that writes takes a VM image
//! for raw, and none writes a raw image a running VM holds. Nothing is left
//! mounted or running.

use crate::common;

use common::{audit_json, blkalign, check_schema, needs, run, sfdisk_partitions, Image};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

tests![
    every_format_is_audited_through_qemu,
    backing_chains_are_followed,
    encrypted_and_held_images_are_refused_naming_why,
    writers_never_take_a_vm_image_for_raw,
    vm_images_are_realigned_in_place,
    a_vm_image_move_survives_kills,
    libvirt_guests_are_audited_by_name,
];

const TOOLS: &[&str] =
    &["qemu-img", "qemu-storage-daemon", "fusermount3", "sfdisk", "mkfs.ext4", "sha256sum"];

/// A primary partition at 63 holding an ext4, one at 2048 (aligned), and
/// a logical one at an odd start inside an extended partition.
const LAYOUT: &str = "label: dos\nstart=63, size=100000\nstart=102400, size=100000\n\
                      start=204800, size=100000, type=5\nstart=204863, size=50000\n";

fn raw_image() -> Image {
    let image = Image::sfdisk(256 << 20, LAYOUT);
    let offset = format!("offset={}", 63 * 512);
    run("mkfs.ext4", &["-q", "-F", "-E", &offset, image.str(), "40M"]);
    image
}

fn convert(raw: &Image, format: &str) -> PathBuf {
    let out = raw.path.with_extension(format);
    let path = out.to_str().expect("utf-8");
    run("qemu-img", &["convert", "-f", "raw", "-O", format, raw.str(), path]);
    out
}

fn virtual_size(image: &Path) -> u64 {
    let out = run("qemu-img", &["info", "--output=json", image.to_str().expect("utf-8")]);
    common::json_of(&out.stdout)["virtual-size"].as_u64().expect("virtual-size")
}

fn starts(t: &Value) -> Vec<(u64, String)> {
    let parts = t["partitions"].as_array().cloned().unwrap_or_default();
    parts
        .iter()
        .filter(|p| p["kind"] != "extended")
        .map(|p| (p["start"].as_u64().unwrap_or(0), p["verdict"].to_string()))
        .collect()
}

/// The tests check that no export of theirs stays mounted: one at a time,
/// so another's mount is never counted (guestfs_peers' too).
use common::IMAGE_EXPORTS as SERIAL;

fn our_mounts() -> usize {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts.lines().filter(|l| l.contains("blkalign-image-")).count()
}

fn every_format_is_audited_through_qemu() {
    if !needs(false, TOOLS) {
        return;
    }
    let _serial = SERIAL.lock();
    let raw = raw_image();
    let (raw_code, raw_audit) = audit_json(&[raw.str()]);
    assert_eq!(raw_code, 1, "{raw_audit}");
    let sfdisk: Vec<u64> =
        sfdisk_partitions(raw.str()).iter().map(|p| p.1).filter(|&s| s != 204800).collect();
    let expected = starts(&raw_audit);
    assert_eq!(expected.iter().map(|e| e.0).collect::<Vec<_>>(), sfdisk, "the raw audit");

    for (format, name) in [
        ("qcow2", "qcow2"),
        ("vmdk", "vmdk"),
        ("vpc", "vhd"),
        ("vhdx", "vhdx"),
        ("vdi", "vdi"),
        ("qed", "qed"),
    ] {
        let image = convert(&raw, format);
        let path = image.to_str().expect("utf-8");
        let out = blkalign().args(["audit", "--json", path]).output().expect("run audit");
        let text = String::from_utf8_lossy(&out.stdout);
        check_schema("audit", &text);
        let t = common::json_of(&out.stdout)["targets"][0].clone();
        assert_eq!(out.status.code(), Some(1), "{format}: {t}");
        assert_eq!(t["image_format"], name, "{format}");
        assert_eq!(t["path"], path, "reported under the image's own path");
        assert_eq!(t["size_bytes"].as_u64(), Some(virtual_size(&image)), "{format}: qemu-img info");
        assert_eq!(starts(&t), expected, "{format}: partitions and verdicts");
        assert!(t["notes"].to_string().contains("read through qemu-storage-daemon"), "{t}");
        // The human report points at realign, on the image itself.
        let human = blkalign().args(["audit", path]).output().expect("run audit");
        let human = String::from_utf8_lossy(&human.stdout);
        assert!(human.contains(&format!("`blkalign realign {path}`")), "{human}");
    }
    assert_eq!(our_mounts(), 0, "an export was left mounted");
}

fn backing_chains_are_followed() {
    if !needs(false, TOOLS) {
        return;
    }
    let _serial = SERIAL.lock();
    let raw = raw_image();
    let base = convert(&raw, "qcow2");
    let overlay = raw.path.with_file_name("overlay.qcow2");
    let (b, o) = (base.to_str().expect("utf-8"), overlay.to_str().expect("utf-8"));
    run("qemu-img", &["create", "-q", "-f", "qcow2", "-b", b, "-F", "qcow2", o]);
    let (code, t) = audit_json(&[o]);
    assert_eq!(code, 1, "{t}");
    assert_eq!(starts(&t), starts(&audit_json(&[raw.str()]).1), "the base's table, seen through");
}

fn encrypted_and_held_images_are_refused_naming_why() {
    if !needs(false, TOOLS) {
        return;
    }
    let _serial = SERIAL.lock();
    let raw = raw_image();
    // qemu-img's LUKS qcow2 times its PBKDF on thread CPU time and fails
    // under load ("Unable to get accurate CPU usage"), so the header's
    // crypt_method (bytes 32..36, 2 = LUKS) is set on a plain qcow2: the
    // field blkalign refuses by, before QEMU opens anything.
    let encrypted = raw.path.with_file_name("luks.qcow2");
    let e = encrypted.to_str().expect("utf-8");
    run("qemu-img", &["create", "-q", "-f", "qcow2", e, "64M"]);
    let mut header = std::fs::read(&encrypted).expect("read qcow2");
    header[32..36].copy_from_slice(&2u32.to_be_bytes());
    std::fs::write(&encrypted, header).expect("write qcow2");
    let out = blkalign().args(["audit", e]).output().expect("run audit");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("an encrypted qcow2 image (LUKS)"), "{err}");

    // A running VM holds its image's lock; a daemon writing it stands in.
    let image = convert(&raw, "qcow2");
    let vm = Vm::start(&image);
    let out = blkalign().args(["audit", image.to_str().expect("utf-8")]).output().expect("audit");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lock") && err.contains(&format!("pid {}", vm.pid)), "{err}");
    drop(vm);
    assert_eq!(our_mounts(), 0, "an export was left mounted");
}

fn writers_never_take_a_vm_image_for_raw() {
    if !needs(false, TOOLS) {
        return;
    }
    let _serial = SERIAL.lock();
    let raw = raw_image();
    let image = convert(&raw, "qcow2");
    let path = image.to_str().expect("utf-8");
    let before = run("sha256sum", &[path]).stdout;
    for args in [vec!["partition", path, "--yes"], vec!["advise", path], vec!["plan", path]] {
        let out = blkalign().args(&args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("a qcow2 image, not a raw disk"), "{args:?}: {err}");
        assert!(err.contains("`blkalign audit` and `blkalign realign` read it"), "{args:?}: {err}");
    }
    assert_eq!(run("sha256sum", &[path]).stdout, before, "the image changed");

    // A raw image a running VM uses: its QEMU's lock refuses every writer,
    // dry run and --yes alike, naming the process.
    let vm = Vm::start_as(&raw.path, "raw");
    let before = run("sha256sum", &[raw.str()]).stdout;
    for args in [vec!["realign", raw.str(), "--yes"], vec!["realign", raw.str()]] {
        let out = blkalign().args(&args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let holder = format!("pid {}", vm.pid);
        assert!(err.contains("holds a lock on it") && err.contains(&holder), "{args:?}: {err}");
    }
    assert_eq!(run("sha256sum", &[raw.str()]).stdout, before, "the raw image changed");
    drop(vm);
    let out = blkalign().args(["realign", raw.str()]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "once the VM is gone, the dry run plans: {out:?}");
}

/// A copy of `raw` realigned as a raw image: what every format's guest
/// disk must equal after its own realign.
fn realigned_raw(raw: &Image, state: &Path) -> PathBuf {
    let reference = raw.path.with_extension("reference");
    std::fs::copy(&raw.path, &reference).expect("copy");
    let out = realign(&reference, &["--yes"], state);
    assert_eq!(out.status.code(), Some(0), "raw realign: {out:?}");
    reference
}

fn realign(image: &Path, args: &[&str], state: &Path) -> std::process::Output {
    blkalign()
        .arg("realign")
        .arg(image)
        .args(args)
        .env("BLKALIGN_STATE_DIR", state)
        .output()
        .expect("run blkalign")
}

/// `qemu-img compare`: the guest disks are byte for byte the same.
fn assert_same_guest(reference: &Path, image: &Path, format: &str) {
    let out = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", format])
        .args([reference, image])
        .output()
        .expect("run qemu-img compare");
    assert!(out.status.success(), "{format}: {}", String::from_utf8_lossy(&out.stdout));
}

/// `qemu-img check`: no corruption (exit 2). Leaked clusters (exit 3)
/// are what QEMU itself leaves when killed between a cluster's allocation
/// and its mapping; they waste space and lose nothing.
fn assert_consistent(image: &Path, format: &str, leaks_allowed: bool) {
    let out = Command::new("qemu-img").args(["check", "-f", format]).arg(image).output();
    let out = out.expect("run qemu-img check");
    let code = out.status.code();
    let ok = code == Some(0) || (leaks_allowed && code == Some(3));
    assert!(ok, "{format}: qemu-img check {code:?}: {}", String::from_utf8_lossy(&out.stdout));
}

/// Every format's guest disk is realigned in place through QEMU, ending
/// byte for byte where a raw realign of the same layout ends (qemu-img
/// compare) with the image consistent (qemu-img check); the dry run says
/// how much the image may grow; a running VM's lock refuses the move.
fn vm_images_are_realigned_in_place() {
    if !needs(false, TOOLS) {
        return;
    }
    let _serial = SERIAL.lock();
    let state = tempfile::tempdir().expect("tempdir");
    let raw = raw_image();
    let reference = realigned_raw(&raw, state.path());
    for (format, checkable) in [
        ("qcow2", true),
        ("vmdk", true),
        ("vpc", false),
        ("vdi", true),
        ("vhdx", true),
        ("qed", true),
    ] {
        let image = convert(&raw, format);
        let plan = realign(&image, &[], state.path());
        let text = String::from_utf8_lossy(&plan.stdout);
        assert_eq!(plan.status.code(), Some(0), "{format} dry run: {plan:?}");
        assert!(text.contains("image: the move writes"), "{format}: no growth note: {text}");
        let done = realign(&image, &["--yes"], state.path());
        assert_eq!(done.status.code(), Some(0), "{format}: {done:?}");
        assert_same_guest(&reference, &image, format);
        if checkable {
            assert_consistent(&image, format, false);
        }
        let (code, audit) = audit_json(&[image.to_str().expect("utf-8")]);
        let (raw_code, raw_audit) = audit_json(&[reference.to_str().expect("utf-8")]);
        assert_eq!(code, raw_code, "{format}: {audit}");
        assert_eq!(starts(&audit["targets"][0]), starts(&raw_audit["targets"][0]), "{format}");
        std::fs::remove_file(&image).expect("remove");
    }

    let image = convert(&raw, "qcow2");
    let vm = Vm::start(&image);
    let before = run("sha256sum", &[image.to_str().expect("utf-8")]).stdout;
    let refused = realign(&image, &["--yes"], state.path());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("lock") && err.contains("shut the VM down first"), "{err}");
    assert!(err.contains(&format!("pid {}", vm.pid)), "the holder is named: {err}");
    assert_eq!(run("sha256sum", &[image.to_str().expect("utf-8")]).stdout, before);
    drop(vm);
    assert_eq!(our_mounts(), 0, "an export was left mounted");
}

/// A move of a qcow2's guest disk killed mid-move, two ways: its export
/// dies (qemu-storage-daemon killed with SIGKILL, as a crash of QEMU
/// would), or blkalign itself is killed with SIGKILL (its export follows
/// it, freeing the image's lock). Either way the move stops with its
/// journal intact, the same command finishes it, and the guest disk then
/// equals the raw realign; qemu-img check finds no corruption.
fn a_vm_image_move_survives_kills() {
    if !needs(false, &[TOOLS, &["pkill", "pgrep"]].concat()) {
        return;
    }
    let _serial = SERIAL.lock();
    let state = tempfile::tempdir().expect("tempdir");
    let raw = raw_image();
    let reference = realigned_raw(&raw, state.path());
    for kill_blkalign in [false, true] {
        let image = convert(&raw, "qcow2");
        let journal = PathBuf::from(format!("{}.blkalign-p1.journal", image.display()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_blkalign"))
            .arg("realign")
            .arg(&image)
            .arg("--yes")
            .env("BLKALIGN_STATE_DIR", state.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let started = std::time::Instant::now();
        while !journal.exists() && started.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let daemon = format!("qemu-storage-daemon.*{}", image.display());
        if kill_blkalign {
            child.kill().expect("kill");
        } else {
            run("pkill", &["-KILL", "-f", &daemon]);
        }
        let killed = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&killed.stderr);
        assert_ne!(killed.status.code(), Some(0), "killed after the move ended: {err}");
        if !kill_blkalign {
            assert!(err.contains("is intact"), "{err}");
        }
        // The daemon goes with blkalign: nothing holds the image.
        let gone = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !Command::new("pgrep").args(["-f", &daemon]).status().expect("pgrep").success()
        });
        assert!(gone, "qemu-storage-daemon outlived blkalign");
        let rerun = realign(&image, &["--yes"], state.path());
        assert_eq!(rerun.status.code(), Some(0), "{rerun:?}");
        assert_same_guest(&reference, &image, "qcow2");
        assert_consistent(&image, "qcow2", true);
        std::fs::remove_file(&image).expect("remove");
        let _ = std::fs::remove_file(&journal);
    }
    assert_eq!(our_mounts(), 0, "an export was left mounted");
}

/// qemu-storage-daemon holding `image` writable, as a running VM's QEMU
/// does; stopped on drop.
struct Vm {
    pid: u32,
    _dir: tempfile::TempDir,
}

impl Vm {
    fn start(image: &Path) -> Vm {
        Vm::start_as(image, "qcow2")
    }

    fn start_as(image: &Path, format: &str) -> Vm {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        let file = format!("driver=file,node-name=f,filename={}", image.display());
        // A writable export is a user of the disk, as a guest's device is:
        // QEMU locks the image for it.
        let socket = format!("addr.type=unix,addr.path={}", dir.path().join("nbd").display());
        let status = Command::new("qemu-storage-daemon")
            .args([
                "--blockdev",
                &file,
                "--blockdev",
                &format!("driver={format},node-name=d,file=f"),
                "--nbd-server",
                &socket,
                "--export",
                "type=nbd,id=e,node-name=d,writable=on",
            ])
            .arg("--daemonize")
            .arg("--pidfile")
            .arg(&pidfile)
            .status()
            .expect("run qemu-storage-daemon");
        assert!(status.success());
        let pid = std::fs::read_to_string(&pidfile).expect("pid").trim().parse().expect("pid");
        Vm { pid, _dir: dir }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
        for _ in 0..200 {
            if !Path::new(&format!("/proc/{}", self.pid)).exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// `--domain` and `--all-domains` through libvirt's test driver (no
/// daemon): a running guest's qcow2, held by a stand-in for its QEMU, is
/// read past the lock and said to be; its raw disk is audited as it is;
/// its CD-ROM is skipped; an unknown guest is exit 2 naming virsh's answer.
fn libvirt_guests_are_audited_by_name() {
    if !needs(false, &[TOOLS, &["virsh"]].concat()) {
        return;
    }
    let _serial = SERIAL.lock();
    let raw = raw_image();
    let image = convert(&raw, "qcow2");
    let node = raw.path.with_file_name("node.xml");
    let disk = |file: &Path, dev: &str| {
        format!(
            "<disk type='file' device='disk'><source file='{}'/><target dev='{dev}'/></disk>",
            file.display()
        )
    };
    let xml = format!(
        "<node><domain type='test'><name>old xp</name><memory>65536</memory><os><type>hvm</type></os>\
         <devices>{}<disk type='file' device='cdrom'><target dev='hdc'/></disk>{}</devices></domain></node>",
        disk(&image, "vda"),
        disk(&raw.path, "vdb")
    );
    std::fs::write(&node, xml).expect("write node.xml");
    let uri = format!("test://{}", node.display());
    let _vm = Vm::start(&image);
    for selection in [vec!["--domain", "old xp"], vec!["--all-domains"]] {
        let out = blkalign()
            .args(["audit", "--json", "--connect", &uri])
            .args(&selection)
            .output()
            .expect("run audit");
        let text = String::from_utf8_lossy(&out.stdout);
        check_schema("audit", &text);
        let doc = common::json_of(&out.stdout);
        let targets = doc["targets"].as_array().cloned().unwrap_or_default();
        let seen: Vec<(&str, &str, &str)> = targets
            .iter()
            .map(|t| {
                let s = |k: &str| t[k].as_str().unwrap_or("null");
                (s("domain"), s("domain_disk"), s("image_format"))
            })
            .collect();
        assert_eq!(seen, [("old xp", "vda", "qcow2"), ("old xp", "vdb", "null")], "{selection:?}");
        assert_eq!(out.status.code(), Some(1), "{selection:?}: {doc}");
        assert!(targets[0]["notes"].to_string().contains("the guest is running"), "{doc}");
        assert_eq!(starts(&targets[0]), starts(&targets[1]), "the same disk, two formats");
    }
    let out =
        blkalign().args(["audit", "--connect", &uri, "--domain", "nobody"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("virsh domstate nobody"), "{out:?}");
    assert_eq!(our_mounts(), 0, "an export was left mounted");
}
