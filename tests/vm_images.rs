//! VM disk images: qcow2, VMDK, VHD, VHDX, VDI and QED made by `qemu-img
//! convert` from a raw image sfdisk partitioned are audited through QEMU
//! (qemu-storage-daemon): every partition where sfdisk reads it in the raw
//! image, the virtual size qemu-img reports, the raw image's verdicts.
//! Backing chains are followed, an encrypted image and one a running VM
//! holds are refused naming why, no command that writes takes a VM image
//! for raw, and none writes a raw image a running VM holds. Nothing is left
//! mounted or running.

mod common;

use common::{audit_json, blkalign, check_schema, needs, run, sfdisk_partitions, Image};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

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
/// so another's mount is never counted.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn our_mounts() -> usize {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts.lines().filter(|l| l.contains("blkalign-image-")).count()
}

#[test]
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
        // The human report points at a raw copy for the repair.
        let human = blkalign().args(["audit", path]).output().expect("run audit");
        let human = String::from_utf8_lossy(&human.stdout);
        assert!(human.contains(&format!("qemu-img convert -f {format} -O raw")), "{human}");
    }
    assert_eq!(our_mounts(), 0, "an export was left mounted");
}

#[test]
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

#[test]
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

#[test]
fn writers_never_take_a_vm_image_for_raw() {
    if !needs(false, TOOLS) {
        return;
    }
    let _serial = SERIAL.lock();
    let raw = raw_image();
    let image = convert(&raw, "qcow2");
    let path = image.to_str().expect("utf-8");
    let before = run("sha256sum", &[path]).stdout;
    for args in [
        vec!["realign", path, "--yes"],
        vec!["realign", path],
        vec!["partition", path, "--yes"],
        vec!["advise", path],
        vec!["plan", path],
    ] {
        let out = blkalign().args(&args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("a qcow2 image, not a raw disk"), "{args:?}: {err}");
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
#[test]
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
