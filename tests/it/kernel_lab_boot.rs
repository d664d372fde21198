//! `realign --at-boot` on real boots: a BIOS disk image (MBR, GRUB 2 in the
//! gap before LBA 63, the host's Debian kernel, an initramfs the real
//! mkinitramfs built with blkalign's hook), booted in QEMU through SeaBIOS
//! and GRUB (tests/lab/bootdisk.sh, docs/kernel-lab.md). Its init checks
//! every file's SHA-256 and powers off. The move runs in the initramfs;
//! QEMU is killed mid-way (power cuts at points drawn from a seed, printed;
//! `BLKALIGN_BOOT_CUTS=all`, as scripts/boot-powercuts sets it, cuts at
//! every point); a swapped disk and a changed table are refused and boot on.
//! The same move from dracut's initramfs (systemd inside), through a cut;
//! and a separate /boot at 63 with an LVM PV holding the root, both moved
//! in one boot, the volume group active when the move begins.

use crate::common;

use common::{needs, run};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

tests![
    long(
        a_root_at_lba_63_is_moved_at_boot_through_power_cuts = 370,
        a_root_at_lba_63_is_moved_at_boot_by_dracut_through_a_power_cut = 130,
        a_separate_boot_at_lba_63_and_a_root_on_lvm_both_move_at_boot = 100,
    ),
];

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lab/bootdisk.sh");

fn ready() -> bool {
    let tools = ["qemu-system-x86_64", "grub-install", "mkinitramfs", "sfdisk", "partx", "zstd"];
    if !needs(true, &tools) {
        return false;
    }
    let grub = Path::new("/usr/lib/grub/i386-pc/boot.img").exists();
    if !grub {
        common::skip("needs GRUB's i386-pc images (apt-get install grub-pc-bin)");
    }
    grub
}

fn bootdisk(args: &[&str]) -> Output {
    Command::new(SCRIPT).args(args).output().expect("run bootdisk.sh")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A bootable disk image in its own directory.
struct Disk {
    dir: tempfile::TempDir,
    img: PathBuf,
    keys: HashMap<String, String>,
}

impl Disk {
    /// `bootdisk.sh build` of `layout`, with its `more` options.
    fn build(layout: &str, more: &[&str]) -> Disk {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let img = dir.path().join(format!("{layout}.img"));
        let mut args = vec!["build", img.to_str().unwrap(), "--layout", layout];
        args.extend(more);
        let out = bootdisk(&args);
        assert!(out.status.success(), "{}", text(&out));
        let keys = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Disk { dir, img, keys }
    }

    fn key(&self, k: &str) -> u32 {
        self.keys[k].parse().expect("a number")
    }

    /// A copy of the image as it is now (sparse).
    fn copy(&self, name: &str) -> PathBuf {
        let to = self.dir.path().join(name);
        run("cp", &["--sparse=always", self.img.to_str().unwrap(), to.to_str().unwrap()]);
        to
    }

    /// Mount the installed system (root, its /boot, the journal's file
    /// system at /srv), run blkalign there (DISK in `args` is the disk's
    /// node, SRV the journal's mount point), unmount.
    fn as_installed(&self, args: &[&str]) -> Output {
        self.with_installed(|root, disk| {
            let srv = root.join("srv").display().to_string();
            let mut all = vec!["realign".to_string()];
            all.extend(args.iter().map(|a| a.replace("DISK", disk).replace("SRV", &srv)));
            all.extend(["--at-boot".into(), "--sysroot".into(), root.display().to_string()]);
            Command::new(common::lab::guest_binary()).args(&all).output().expect("blkalign")
        })
    }

    fn with_installed<T>(&self, f: impl FnOnce(&Path, &str) -> T) -> T {
        let root = self.dir.path().join("root");
        let mounted = Mounted::new(&self.img, &root);
        let out = f(&root, &mounted.disk);
        drop(mounted);
        out
    }

    /// Whether the image's initramfs (lsinitrd) lists a path ending so.
    fn initramfs_lists(&self, path: &str) -> bool {
        let ver = self.keys["KERNEL_VER"].clone();
        self.with_installed(|root, _| {
            let image = root.join(format!("boot/initrd.img-{ver}"));
            let out = Command::new("lsinitrd").arg(&image).output().expect("lsinitrd");
            assert!(out.status.success(), "{}", text(&out));
            String::from_utf8_lossy(&out.stdout).lines().any(|l| l.ends_with(path))
        })
    }

    fn starts(&self) -> Vec<u64> {
        common::sfdisk_json(self.img.to_str().unwrap()).1.iter().map(|p| p.1).collect()
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The installed system schedules the move of `partitions`.
    fn schedule(&self, partitions: &[&str]) {
        let mut args = vec!["DISK"];
        args.extend(partitions);
        args.extend(["--yes", "--journal-on", "SRV"]);
        let out = self.as_installed(&args);
        assert!(out.status.success() && text(&out).contains("scheduled:"), "{}", text(&out));
    }

    /// The peers on the image after the moves: e2fsck on every ext4 (the
    /// LV's too: `bootdisk.sh fsck`), sfdisk --verify, and blkalign's audit
    /// clean.
    fn check_peers(&self) {
        let out = bootdisk(&["fsck", self.img.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
        run("sfdisk", &["--verify", self.img.to_str().unwrap()]);
        let state = tempfile::tempdir().unwrap();
        let audit = common::blkalign()
            .env("BLKALIGN_STATE_DIR", state.path())
            .args(["audit", self.img.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(audit.status.code(), Some(0), "{}", text(&audit));
    }
}

/// `bootdisk.sh mount`, undone on drop (panics included).
struct Mounted {
    dir: PathBuf,
    disk: String,
}

impl Mounted {
    fn new(img: &Path, dir: &Path) -> Mounted {
        let out = bootdisk(&["mount", img.to_str().unwrap(), dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
        let disk = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Mounted { dir: dir.to_path_buf(), disk }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = bootdisk(&["umount", self.dir.to_str().unwrap()]);
    }
}

/// One boot; `cut` kills QEMU (a power cut) a delay in seconds after the
/// console first matches a regex. The exit code (0 powered off by itself,
/// 3 cut) and the console.
fn boot(img: &Path, log: &Path, cut: Option<&Cut>) -> (i32, String) {
    let mut args = vec!["boot".to_string(), img.display().to_string(), log.display().to_string()];
    args.extend(["--timeout".into(), "400".into()]);
    if let Some(cut) = cut {
        args.extend(["--kill-on".into(), cut.0.clone(), "--kill-delay".into(), cut.1.to_string()]);
    }
    let out = Command::new(SCRIPT).args(&args).output().expect("run bootdisk.sh boot");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), fs::read_to_string(log).unwrap_or_default())
}

/// The boot's own checks passed: every SHA-256 as built; the root's start.
fn booted(code: i32, console: &str) -> u64 {
    assert_eq!(code, 0, "the guest did not power off by itself:\n{console}");
    assert!(console.contains("BOOTCHECK sums ok"), "{console}");
    // systemd's console codes may come first on the line.
    let line = console.lines().find_map(|l| l.find("BOOTCHECK root=").map(|at| &l[at..]));
    let start = line.and_then(|l| l.split("start=").nth(1)?.trim().parse().ok());
    start.unwrap_or_else(|| panic!("no BOOTCHECK start= line:\n{console}"))
}

/// A power cut: at the first console line matching the regex, this many
/// seconds later.
type Cut = (String, f64);

/// Where a power cut can land: before anything, in the read check, at and
/// just after each tenth of the copy, after the copy (table writes), after
/// the table.
fn cut_points() -> Vec<Cut> {
    let mut points = vec![("blkalign: the move at boot of".to_string(), 0.0)];
    for tenth in [2, 6] {
        points.push((format!("blkalign: read check {tenth}0% of"), 0.0));
    }
    for tenth in 1..=10 {
        for delay in [0.0, 0.4] {
            points.push((format!("blkalign: moved {tenth}0% of"), delay));
        }
    }
    points.push(("blkalign: /dev/[a-z]+: moved partition".to_string(), 0.0));
    points.push(("from LBA 63 to 2048 done".to_string(), 0.0));
    points
}

/// This run's cuts: every point with `BLKALIGN_BOOT_CUTS=all`
/// (scripts/boot-powercuts), else two drawn from `BLKALIGN_LAB_SEED` (the
/// clock if unset), printed so that a failure reruns exactly.
fn chosen_cuts() -> Vec<Cut> {
    let points = cut_points();
    if std::env::var("BLKALIGN_BOOT_CUTS").is_ok_and(|v| v == "all") {
        return points;
    }
    let seed =
        std::env::var("BLKALIGN_LAB_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    eprintln!("power cuts drawn with BLKALIGN_LAB_SEED={seed}");
    let mut state: u64 = seed;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        points[(state >> 33) as usize % points.len()].clone()
    };
    vec![next(), next()]
}

/// blkalign's console lines but its progress, for the test's output.
fn say(console: &str) {
    for line in console.lines().filter(|l| l.contains("blkalign:") && !l.contains("% of")) {
        eprintln!("  | {}", line.trim_end());
    }
}

/// Boot through `cuts` (each boot resuming what the last left), then once
/// more to the end: the root is at 2048 and the init finds every file.
fn boot_through(disk: &Disk, cuts: &[Cut]) {
    for (i, cut) in cuts.iter().enumerate() {
        eprintln!("power cut at the first console line matching {:?}, {} s later", cut.0, cut.1);
        let (code, console) = boot(&disk.img, &disk.log(&format!("cut{i}")), Some(cut));
        say(&console);
        // On a fresh disk every point's line comes; after a cut, a later
        // one may not (a resumed move skips the read check): a whole boot.
        let whole = i > 0 && code == 0;
        assert!(code == 3 || whole, "boot {i} ended {code}, not cut:\n{console}");
        if code == 0 {
            assert_eq!(booted(code, &console), 2048);
        }
    }
    let (code, console) = boot(&disk.img, &disk.log("after"), None);
    say(&console);
    assert_eq!(booted(code, &console), 2048, "{console}");
    assert_eq!(disk.starts()[0], 2048);
}

fn a_root_at_lba_63_is_moved_at_boot_through_power_cuts() {
    if !ready() {
        return;
    }
    let cuts = chosen_cuts();
    if cuts.len() > 2 {
        // The sweep: each point on a disk of its own.
        for (i, cut) in cuts.iter().enumerate() {
            eprintln!("point {} of {}", i + 1, cuts.len());
            let disk = Disk::build("plain", &[]);
            disk.schedule(&["1"]);
            boot_through(&disk, std::slice::from_ref(cut));
            disk.check_peers();
        }
        eprintln!(
            "sweep: {} power cuts, each followed by a boot: every one finished the move, booted \
             with root at LBA 2048 and every SHA-256 equal, e2fsck, sfdisk --verify and audit clean",
            cuts.len()
        );
        return;
    }
    let disk = Disk::build("plain", &[]);
    assert_eq!(disk.key("ROOT_START"), 63);
    disk.schedule(&["1"]);
    // A disk the plan must not touch: another size (a disk swapped for
    // another). One whose table changed after scheduling is refused the
    // same way, before anything is written: tests/it/realign_at_boot.rs
    // runs that refusal on the host.
    let swapped = disk.copy("swapped.img");
    run("truncate", &["-s", "+1M", swapped.to_str().unwrap()]);

    boot_through(&disk, &cuts);
    disk.check_peers();
    let status = disk.as_installed(&[]);
    assert!(text(&status).contains("from LBA 63 to 2048: done"), "{}", text(&status));

    // The installed system finishes; the boot after it is the separate
    // /boot's and LVM's (below), which move at boot too.
    let finish = disk.as_installed(&["--finish"]);
    assert_eq!(finish.status.code(), Some(0), "{}", text(&finish));

    let (code, console) = boot(&swapped, &swapped.with_extension("log"), None);
    assert_eq!(booted(code, &console), 63, "booted on the old layout");
    let why = "refused, nothing written: no attached disk is the one scheduled";
    assert!(console.contains(why), "{console}");
}

/// dracut (Fedora, RHEL, SUSE; dracut-core beside initramfs-tools on
/// Debian) builds the initramfs: systemd inside, the move from the pre-udev
/// hook, through one power cut drawn as above; --finish's rebuild boots.
fn a_root_at_lba_63_is_moved_at_boot_by_dracut_through_a_power_cut() {
    if !ready() || !needs(true, &["dracut", "lsinitrd"]) {
        return;
    }
    // A size of its own: loop devices have no serial, and --finish must not
    // find the plain test's disk, attached at the same time, to be this one.
    let disk = Disk::build("plain", &["--generator", "dracut", "--size", "336"]);
    let hook = "hooks/pre-udev/00-blkalign-at-boot.sh";
    assert!(!disk.initramfs_lists(hook));
    disk.schedule(&["1"]);
    assert!(disk.initramfs_lists(hook), "dracut built the hook in");
    boot_through(&disk, &chosen_cuts()[..1]);
    disk.check_peers();
    let status = disk.as_installed(&[]);
    assert!(text(&status).contains("from LBA 63 to 2048: done"), "{}", text(&status));
    let finish = disk.as_installed(&["--finish"]);
    assert_eq!(finish.status.code(), Some(0), "{}", text(&finish));
    assert!(!disk.initramfs_lists(hook), "--finish took the hook out");
    let (code, console) = boot(&disk.img, &disk.log("finished"), None);
    assert_eq!(booted(code, &console), 2048);
    assert!(!console.contains("blkalign:"), "the hook is gone:\n{console}");
}

/// Root on LVM, beside a separate /boot at LBA 63: the PV at an odd LBA,
/// root=/dev/mapper/blkvg-root. udev's LVM rules activate the volume group
/// in the initramfs before the hook runs; the move takes /boot and the PV
/// in one boot, releasing the group and activating it again, and the
/// initramfs mounts the LV from the PV's new place. Then --finish: the hook
/// goes, and GRUB boots the system again.
fn a_separate_boot_at_lba_63_and_a_root_on_lvm_both_move_at_boot() {
    if !ready() || !needs(true, &["pvcreate", "lvcreate"]) {
        return;
    }
    // A size of its own: loop devices have no serial, and --finish must not
    // find another test's disk, attached at the same time, to be this one.
    let disk = Disk::build("lvm", &["--size", "352"]);
    let before = disk.starts();
    assert_eq!(before[0], 63);
    assert_ne!(before[1] % 8, 0, "the PV starts misaligned");
    disk.schedule(&[]);
    let (code, console) = boot(&disk.img, &disk.log("boot"), None);
    say(&console);
    let root = booted(code, &console);
    assert!(console.contains("BOOTCHECK root=/dev/mapper/blkvg-root"), "{console}");
    assert!(console.contains("done; booting on"), "moved in the initramfs:\n{console}");
    assert!(console.contains("let go of blkvg-root"), "the group was active:\n{console}");
    let after = disk.starts();
    assert_eq!(root, after[1], "the LV mounted from the PV's new start");
    assert!(after[..2].iter().all(|s| s % 2048 == 0), "{after:?}");
    assert_eq!(after[2], before[2], "the journal's partition stays");
    disk.check_peers();
    let finish = disk.as_installed(&["--finish"]);
    assert_eq!(finish.status.code(), Some(0), "{}", text(&finish));
    let (code, console) = boot(&disk.img, &disk.log("again"), None);
    assert_eq!(booted(code, &console), after[1]);
    assert!(!console.contains("blkalign:"), "the hook is gone:\n{console}");
}
