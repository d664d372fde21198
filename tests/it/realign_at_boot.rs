//! `realign --at-boot` on this machine's kernel, each step where the boot
//! takes it: the installed system (a root file system mounted as a
//! `--sysroot`) schedules the move and the real `mkinitramfs` builds the
//! hook in (`lsinitramfs` lists it); the partitions are unmounted, as
//! before root is mounted, and `--at-boot-run` does what the initramfs
//! does; then the installed system finishes. Peers judge: sfdisk, blkid,
//! e2fsck, parted. The real boot, through SeaBIOS, GRUB and the initramfs,
//! is in tests/it/kernel_lab_boot.rs.

use crate::common;

use common::{needs, run, run_unchecked, Image, Loop, Mount};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

tests![
    a_move_at_boot_is_scheduled_run_before_root_and_finished,
    a_changed_table_or_a_missing_journal_refuses_the_boot_move_and_writes_nothing,
];

const TOOLS: &[&str] = &[
    "sfdisk",
    "partx",
    "mkfs.ext4",
    "blkid",
    "e2fsck",
    "mkinitramfs",
    "lsinitramfs",
    "parted",
    "systemd-analyze",
];
/// Where --at-boot-run mounts the journal's file system.
const BOOT_MOUNT: &str = "/run/blkalign-journal";

/// Unmounts what --at-boot-run left mounted, panics included; one test
/// at a time, as its mount point is fixed.
struct BootMount(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

static ONE_BOOT: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl BootMount {
    fn take() -> BootMount {
        BootMount(ONE_BOOT.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for BootMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(BOOT_MOUNT).output();
    }
}

/// An installed system on a disk image: root ext4 at LBA 63 (files and a
/// kernel in /boot, initramfs-tools' configuration), a separate /boot after it.
struct System {
    _image: Image,
    disk: Loop,
    root_dir: tempfile::TempDir,
    files: Vec<(PathBuf, String)>,
    kernel: String,
}

impl System {
    fn new(size_mib: u64) -> System {
        let script = "start=63, size=300000, type=83\nstart=350000, size=200000, type=83\n";
        let image = Image::sfdisk(size_mib << 20, &format!("label: dos\n{script}"));
        let disk = Loop::attach(&image.path, 512);
        disk.add_partitions(2);
        run("mkfs.ext4", &["-q", "-F", disk.partition(1).to_str().unwrap()]);
        run("mkfs.ext4", &["-q", "-F", "-L", "boot", disk.partition(2).to_str().unwrap()]);
        let root_dir = tempfile::tempdir().unwrap();
        let kernel = host_kernel();
        let mut system =
            System { _image: image, disk, root_dir, files: Vec::new(), kernel: kernel.clone() };
        let (root, _boot_fs) = system.mount();
        for dir in ["etc/systemd/system", "var/lib"] {
            fs::create_dir_all(root.dir.join(dir)).unwrap();
        }
        run("cp", &["-a", "/etc/initramfs-tools", root.dir.join("etc").to_str().unwrap()]);
        let conf = root.dir.join("etc/initramfs-tools/initramfs.conf");
        let text = fs::read_to_string(&conf).unwrap().replace("MODULES=most", "MODULES=list");
        fs::write(&conf, text).unwrap();
        let vmlinuz = format!("boot/vmlinuz-{kernel}");
        fs::copy(Path::new("/").join(&vmlinuz), root.dir.join(&vmlinuz)).unwrap();
        for (i, size) in [(1, 3 << 20), (2, 9 << 20)] {
            let bytes: Vec<u8> =
                (0..size).map(|b: u32| (b.wrapping_mul(2654435761) >> 13) as u8 ^ i).collect();
            let path = PathBuf::from(format!("data{i}.bin"));
            fs::write(root.dir.join(&path), &bytes).unwrap();
            system.files.push((path, hex(&bytes)));
        }
        drop(_boot_fs);
        drop(root);
        system
    }

    fn sysroot(&self) -> &Path {
        self.root_dir.path()
    }

    /// Root on the sysroot, /boot on it (unmounted in that order on drop).
    fn mount(&self) -> (Mount, Mount) {
        let root = Mount::at(self.disk.partition(1).to_str().unwrap(), self.sysroot(), &[]);
        fs::create_dir_all(self.sysroot().join("boot")).unwrap();
        let boot_fs_dir = self.sysroot().join("boot");
        let boot_fs = Mount::at(self.disk.partition(2).to_str().unwrap(), &boot_fs_dir, &[]);
        (root, boot_fs)
    }

    fn blkalign(&self, args: &[&str]) -> Output {
        let state = self.sysroot().join("var/lib/blkalign");
        common::blkalign().env("BLKALIGN_STATE_DIR", state).args(args).output().unwrap()
    }

    fn at_boot(&self, args: &[&str]) -> Output {
        let sysroot = self.sysroot().to_str().unwrap();
        let mut all = vec!["realign", "--at-boot", "--sysroot", sysroot];
        all.extend(args);
        self.blkalign(&all)
    }

    fn plan_path(&self) -> PathBuf {
        self.sysroot().join("var/lib/blkalign/at-boot.json")
    }

    fn partition_sha(&self, n: u32) -> String {
        hex(&fs::read(self.disk.partition(n)).unwrap())
    }

    fn starts(&self) -> Vec<u64> {
        common::sfdisk_json(self.disk.str()).1.iter().map(|p| p.1).collect()
    }
}

fn host_kernel() -> String {
    let mut kernels: Vec<String> = fs::read_dir("/boot")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("vmlinuz-").map(str::to_string))
        .filter(|v| Path::new("/lib/modules").join(v).is_dir())
        .collect();
    kernels.sort();
    kernels.pop().expect("a kernel with its modules in /boot")
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exit code")
}

fn initramfs_lists(system: &System, name: &str) -> bool {
    let initrd = system.sysroot().join(format!("boot/initrd.img-{}", system.kernel));
    let new = initrd.with_file_name(format!("initrd.img-{}.new", system.kernel));
    assert!(!new.exists(), "the rebuild left {}", new.display());
    let out = run("lsinitramfs", &[initrd.to_str().unwrap()]);
    String::from_utf8_lossy(&out.stdout).lines().any(|l| l == name)
}

fn a_move_at_boot_is_scheduled_run_before_root_and_finished() {
    if !needs(true, TOOLS) || !kernel_available() {
        return;
    }
    let _boot_mount = BootMount::take();
    let system = System::new(290);
    let disk = system.disk.str().to_string();
    let (root, boot_fs) = system.mount();

    // The dry run says where the journal goes and writes nothing.
    let out = system.at_boot(&[&disk]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        text(&out).contains("/boot/blkalign-at-boot") && text(&out).contains("ext4"),
        "{}",
        text(&out)
    );
    assert!(!system.plan_path().exists());

    let out = system.at_boot(&[&disk, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let plan: serde_json::Value =
        serde_json::from_slice(&fs::read(system.plan_path()).unwrap()).unwrap();
    // blkid, the peer, finds the journal's file system by the same UUID.
    let blkid =
        run("blkid", &["-s", "UUID", "-o", "value", system.disk.partition(2).to_str().unwrap()]);
    assert_eq!(plan["journal"]["uuid"], String::from_utf8_lossy(&blkid.stdout).trim(), "{plan}");
    assert_eq!(plan["moves"][0]["to"], 2048, "{plan}");
    assert!(initramfs_lists(&system, "etc/blkalign/at-boot.json"), "the plan is in the initramfs");
    assert!(initramfs_lists(&system, "scripts/init-premount/blkalign-at-boot"));
    // The unit that finishes after the boot, as systemd reads it.
    let unit = root.dir.join("etc/systemd/system/blkalign-at-boot.service");
    assert!(root
        .dir
        .join("etc/systemd/system/multi-user.target.wants/blkalign-at-boot.service")
        .is_symlink());
    if common::which("systemd-analyze").is_some() {
        let out =
            run_unchecked("systemd-analyze", &["verify", "--man=no", unit.to_str().unwrap()], None);
        assert!(out.status.success() && out.stderr.is_empty(), "{}", text(&out));
    }

    // The running system: audit names the scheduled move; a plain move and
    // a second schedule are refused.
    let audit = system.blkalign(&["audit", &disk]);
    assert_eq!(code(&audit), 1, "{}", text(&audit));
    assert!(text(&audit).contains("scheduled for the next boot"), "{}", text(&audit));
    let again = system.at_boot(&[&disk, "--yes"]);
    assert_eq!(code(&again), 2, "{}", text(&again));
    let plain = system.blkalign(&["realign", &disk, "--yes"]);
    assert_eq!(code(&plain), 2, "{}", text(&plain));
    assert!(text(&plain).contains("scheduled for the next boot"), "{}", text(&plain));
    drop(boot_fs);
    drop(root);

    // The boot: root not mounted yet.
    let plan_copy = tempfile::NamedTempFile::new().unwrap();
    let (root, boot_fs) = system.mount();
    fs::copy(system.plan_path(), plan_copy.path()).unwrap();
    drop(boot_fs);
    drop(root);
    let before = system.partition_sha(1);
    let boot = system.blkalign(&["realign", "--at-boot-run", plan_copy.path().to_str().unwrap()]);
    assert_eq!(code(&boot), 0, "{}", text(&boot));
    assert!(!Path::new(BOOT_MOUNT).join("blkalign-at-boot").exists(), "the journal unmounted");
    assert_eq!(system.starts(), vec![2048, 350000]);
    run("partx", &["-u", &disk]);
    assert_eq!(system.partition_sha(1), before, "every byte moved");
    run("e2fsck", &["-fn", system.disk.partition(1).to_str().unwrap()]);
    let parted = run_unchecked("parted", &["-s", &disk, "align-check", "optimal", "1"], None);
    assert!(parted.status.success(), "{}", text(&parted));
    // A boot after a power cut that came after the move: nothing to do.
    let boot = system.blkalign(&["realign", "--at-boot-run", plan_copy.path().to_str().unwrap()]);
    assert_eq!(code(&boot), 0, "{}", text(&boot));
    assert!(text(&boot).contains("nothing to do"), "{}", text(&boot));

    // The installed system finishes: the hook is out of the initramfs.
    let (root, boot_fs) = system.mount();
    for (path, sha) in &system.files {
        assert_eq!(&hex(&fs::read(root.dir.join(path)).unwrap()), sha, "{}", path.display());
    }
    // A power cut while --finish rebuilds the initramfs: mkinitramfs dies
    // half-way through writing its image. The image a boot reads is still
    // the whole old one (whose hook finds nothing to do), the plan stays,
    // and --finish run again completes.
    let shim = tempfile::tempdir().unwrap();
    let fake = shim.path().join("mkinitramfs");
    let script = "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n\
                  head -c 1048576 /dev/zero >\"$out\"\nkill -9 $$\n";
    fs::write(&fake, script).unwrap();
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", shim.path().display(), std::env::var("PATH").unwrap_or_default());
    let sysroot = system.sysroot().to_str().unwrap().to_string();
    let cut = common::blkalign()
        .env("BLKALIGN_STATE_DIR", system.sysroot().join("var/lib/blkalign"))
        .env("PATH", path)
        .args(["realign", "--at-boot", "--sysroot", &sysroot, "--finish"])
        .output()
        .unwrap();
    assert_eq!(code(&cut), 2, "{}", text(&cut));
    assert!(initramfs_lists(&system, "etc/blkalign/at-boot.json"), "the old image, whole");
    assert!(system.plan_path().exists(), "the plan stays until the rebuild is done");
    let finish = system.at_boot(&["--finish"]);
    assert_eq!(code(&finish), 0, "{}", text(&finish));
    assert!(!root.dir.join("etc/systemd/system/blkalign-at-boot.service").exists());
    assert!(!initramfs_lists(&system, "etc/blkalign/at-boot.json"), "the hook is gone");
    assert!(!system.plan_path().exists());
    let status = system.at_boot(&[]);
    assert_eq!(code(&status), 0, "{}", text(&status));
    assert!(text(&status).contains("from LBA 63 to 2048: done"), "{}", text(&status));
    drop(boot_fs);
    drop(root);
    let audit = system.blkalign(&["audit", &disk]);
    assert_eq!(code(&audit), 0, "{}", text(&audit));
}

fn a_changed_table_or_a_missing_journal_refuses_the_boot_move_and_writes_nothing() {
    if !needs(true, TOOLS) || !kernel_available() {
        return;
    }
    let _boot_mount = BootMount::take();
    let system = System::new(300);
    let disk = system.disk.str().to_string();
    let (root, boot_fs) = system.mount();
    // No file system to hold the journal: the root is the one moved.
    drop(boot_fs);
    let out = system.at_boot(&[&disk, "--yes"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("can hold the journal"), "{}", text(&out));
    let boot_fs =
        Mount::at(system.disk.partition(2).to_str().unwrap(), &system.sysroot().join("boot"), &[]);
    let out = system.at_boot(&[&disk, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // --cancel takes it back; schedule again.
    let out = system.at_boot(&["--cancel", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!system.plan_path().exists() && !initramfs_lists(&system, "etc/blkalign/at-boot.json"));
    let out = system.at_boot(&[&disk, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let plan_copy = tempfile::NamedTempFile::new().unwrap();
    fs::copy(system.plan_path(), plan_copy.path()).unwrap();
    drop(boot_fs);
    drop(root);

    // The table changes after scheduling: sfdisk adds a partition.
    common::run_stdin("sfdisk", &["--append", &disk], Some("start=560000, size=10000\n"));
    system.disk.add_partitions(3);
    let boot = system.blkalign(&["realign", "--at-boot-run", plan_copy.path().to_str().unwrap()]);
    assert_eq!(code(&boot), 1, "refused, the boot goes on: {}", text(&boot));
    assert!(text(&boot).contains("has 3 partitions; it had 2"), "{}", text(&boot));
    assert_eq!(system.starts(), vec![63, 350000, 560000]);
    let (root, boot_fs) = system.mount();
    let status = system.at_boot(&[]);
    assert!(
        text(&status).contains("refused, nothing written: the disk has 3"),
        "{}",
        text(&status)
    );
    let finish = system.at_boot(&["--finish"]);
    assert_eq!(code(&finish), 1, "{}", text(&finish));
    assert!(text(&finish).contains("refused and nothing was written"), "{}", text(&finish));
    assert!(!initramfs_lists(&system, "etc/blkalign/at-boot.json"), "the hook is gone");
    drop(boot_fs);
    drop(root);
}

/// The host's kernel image and modules, which mkinitramfs builds from.
fn kernel_available() -> bool {
    let found = fs::read_dir("/boot").into_iter().flatten().flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .is_some_and(|v| Path::new("/lib/modules").join(v).is_dir())
    });
    if !found {
        common::skip("needs a kernel in /boot with its modules (linux-image-amd64)");
    }
    found
}
