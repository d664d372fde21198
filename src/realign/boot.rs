//! A move made at the next boot, from the initramfs, for partitions the
//! running system cannot let go of (its root at LBA 63): the plan the
//! running system records, what the initramfs checks before it writes,
//! and the result it leaves for the running system to report.
//!
//! The journal cannot live on the partition moved, nor on a file system
//! the initramfs cannot mount before root: it lives on another plain
//! partition's file system (/boot, the ESP, a data partition; of this disk
//! or another), found at boot by its UUID, in [`DIR`].

use super::initramfs::Generator;
use super::journal::{Journal, Phase};
use super::session::{Events, MoveOptions, MoveRefusal, Outcome, Session, SessionError};
use super::state::Store;
use crate::device::exclusive::Mount;
use crate::device::{self, sysfs, Identity, Overrides, SysRoot};
use crate::table::{self, Layout};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The journal directory, at the root of its file system.
pub const DIR: &str = "blkalign-at-boot";
const RESULT: &str = "result.json";
/// The free space a journal may need: three saved chunks and its record.
const JOURNAL_ROOM: u64 = 3 * super::CHUNK_BYTES + (4 << 20);
/// File systems the initramfs can mount for the journal, with their module.
pub(crate) const JOURNAL_FS: [(&str, &str); 6] = [
    ("ext4", "ext4"),
    ("ext3", "ext4"),
    ("ext2", "ext4"),
    ("vfat", "vfat"),
    ("xfs", "xfs"),
    ("btrfs", "btrfs"),
];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootPlan {
    /// The disk as named when scheduled: information only, the boot finds
    /// it by [`BootPlan::identity`].
    pub disk: PathBuf,
    pub identity: Identity,
    /// The serial the kernel reports without udev, where it differs from
    /// the identity's: dracut's hook finds the disk before udev runs.
    #[serde(default)]
    pub kernel_serial: Option<String>,
    /// Every partition as the table held it when the move was scheduled.
    pub table: Vec<Slot>,
    pub moves: Vec<Shift>,
    pub journal: Place,
    pub generator: Generator,
    /// The kernel whose initramfs carries the hook.
    pub kernel: String,
    /// GRUB boots from the journal's directory until the move is finished
    /// (/boot is on a partition moved: see [`super::grub`]).
    #[serde(default)]
    pub grub_redirect: bool,
    /// Seconds since the epoch.
    pub scheduled: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub partition: u32,
    pub start: u64,
    pub size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shift {
    pub partition: u32,
    pub from: u64,
    pub to: u64,
}

/// The journal's file system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub uuid: String,
    pub fstype: String,
    /// Where the running system mounts it (the journals are in DIR under it).
    pub mountpoint: PathBuf,
    /// Its device when scheduled (information only).
    pub device: PathBuf,
}

/// What the last boot did, kept in the journal directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootResult {
    pub state: BootState,
    pub reason: Option<String>,
    /// Boots that have run the plan (a power cut makes more than one).
    pub boots: u32,
    pub when: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BootState {
    /// A boot began the moves; a power cut left it so.
    Moving,
    Done,
    /// Nothing was written; the boot went on with the old layout.
    Refused,
    /// A move stopped on an error; the boot stopped in the initramfs shell.
    Stopped,
    /// Undone from the initramfs shell: later boots leave it.
    Undone,
}

/// Where one move of the plan stands, from its journal and the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveState {
    Scheduled,
    Unfinished,
    Done,
    Undone,
}

#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BootError + '_ {
    move |source| BootError::Io { path: path.to_path_buf(), source }
}

impl BootPlan {
    pub fn read(path: &Path) -> Result<BootPlan, BootError> {
        let text = fs::read(path).map_err(io(path))?;
        serde_json::from_slice(&text)
            .map_err(|source| BootError::Json { path: path.into(), source })
    }

    /// The journal of `partition`'s move in the journal directory `dir`.
    pub fn journal(dir: &Path, partition: u32) -> PathBuf {
        dir.join(format!("p{partition}.journal"))
    }

    /// Where each move stands, judged by its journal in `dir`.
    pub fn states(&self, dir: &Path) -> Vec<(Shift, MoveState)> {
        let state = |s: &Shift| match Journal::open(&BootPlan::journal(dir, s.partition)) {
            Err(_) => MoveState::Scheduled,
            Ok(j) if j.state.phase == Phase::Done => MoveState::Done,
            Ok(j) if j.state.phase == Phase::Undone => MoveState::Undone,
            Ok(_) => MoveState::Unfinished,
        };
        self.moves.iter().map(|s| (*s, state(s))).collect()
    }

    /// Why `layout` is not the table this plan was made for, where a
    /// partition moved by the plan may be at either of its starts.
    pub(crate) fn table_changed(&self, layout: &Layout) -> Option<String> {
        if layout.partitions.len() != self.table.len() {
            return Some(format!(
                "the disk has {} partitions; it had {} when the move was scheduled",
                layout.partitions.len(),
                self.table.len()
            ));
        }
        self.table.iter().find_map(|slot| {
            let Some(p) = layout.partitions.iter().find(|p| p.number == slot.partition) else {
                return Some(format!("partition {} is gone", slot.partition));
            };
            let moved = self.moves.iter().any(|s| s.partition == p.number && s.to == p.start);
            (p.size != slot.size || (p.start != slot.start && !moved)).then(|| {
                format!(
                    "partition {} is at LBA {} with {} sectors; it was at {} with {} when the \
                     move was scheduled",
                    p.number, p.start, p.size, slot.start, slot.size
                )
            })
        })
    }
}

impl BootResult {
    pub fn read(dir: &Path) -> Option<BootResult> {
        serde_json::from_slice(&fs::read(dir.join(RESULT)).ok()?).ok()
    }

    /// Write it durably: a temporary file, fsync, rename, fsync the directory.
    pub fn write(&self, dir: &Path) -> Result<(), BootError> {
        let path = dir.join(RESULT);
        let tmp = dir.join(format!("{RESULT}.tmp"));
        let text = serde_json::to_vec_pretty(self)
            .map_err(|source| BootError::Json { path: path.clone(), source })?;
        let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&text).and_then(|()| f.sync_all()).map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))?;
        device::exclusive::sync_parent(&path).map_err(io(&path))
    }

    pub fn remove(dir: &Path) -> Result<(), BootError> {
        let path = dir.join(RESULT);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
            _ => Ok(()),
        }
    }
}

/// How a boot's run of the plan ended, short of an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran {
    Done,
    /// An unfinished move was put back.
    Undone,
    /// Nothing was written.
    Refused(String),
}

/// What a boot does with the plan: the move, or (from the initramfs
/// shell, after a stop) its undo or rescue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Move,
    Undo,
    Rescue,
}

/// Run `plan` with its journals in `dir` (its file system mounted there):
/// find the disk, resume a move a power cut stopped, check the table is
/// the one scheduled, then move what is left. An error from a move leaves
/// its journal for `--undo`, `--rescue` or a rerun.
pub fn run(
    root: &SysRoot,
    plan: &BootPlan,
    dir: &Path,
    action: Action,
    events: &mut dyn Events,
) -> Result<Ran, SessionError> {
    let disk = match find_disks(root, plan).as_slice() {
        [one] => one.clone(),
        [] => {
            return Ok(Ran::Refused(format!(
                "no attached disk is the one scheduled ({} bytes{}): it was swapped or is gone",
                plan.identity.size_bytes,
                plan.identity.serial.as_ref().map(|s| format!(", serial {s}")).unwrap_or_default()
            )))
        }
        many => {
            let names: Vec<String> = many.iter().map(|p| p.display().to_string()).collect();
            return Ok(Ran::Refused(format!(
                "{} disks match the one scheduled ({}): refusing to guess",
                many.len(),
                names.join(", ")
            )));
        }
    };
    let session = Session::open_at_boot(root.clone(), &disk)?.store(Store::new(dir.join("state")));
    let name = session.target().name.clone().unwrap_or_default();
    let moving: Vec<u32> = plan.moves.iter().map(|s| s.partition).collect();
    let released = match release_mappings(root, &name, &moving) {
        Ok(r) => r,
        Err(why) => return Ok(Ran::Refused(why)),
    };
    if !released.is_empty() {
        events.note(&format!(
            "let go of {} (udev's LVM rules had activated them); activated again after the move",
            released.join(", ")
        ));
    }
    let ran = resume_and_move(&session, plan, dir, action, events);
    if !released.is_empty() {
        // As udev's rules would have: the mappings come back over the new place.
        run_quietly("lvm", &["vgchange", "-aay", "--sysinit"]);
        run_quietly("udevadm", &["settle"]);
    }
    ran
}

/// Resume (or undo) an unfinished move, then make the rest of the plan's.
fn resume_and_move(
    session: &Session,
    plan: &BootPlan,
    dir: &Path,
    action: Action,
    events: &mut dyn Events,
) -> Result<Ran, SessionError> {
    let unfinished = session.unfinished(None)?;
    if action == Action::Undo {
        let Some(journal) = unfinished else {
            return Ok(Ran::Refused("there is no unfinished move to undo".into()));
        };
        ended(session.undo(journal, events)?)?;
        return Ok(Ran::Undone);
    }
    if let Some(journal) = unfinished {
        ended(session.finish(journal, action == Action::Rescue, events)?)?;
    }
    let layout = session.layout()?;
    if let Some(why) = plan.table_changed(&layout) {
        return Ok(Ran::Refused(why));
    }
    if let Some(n) = session.hibernation_image()? {
        return Ok(Ran::Refused(format!(
            "partition {n} holds a hibernation image: the kernel resuming it knows the old layout"
        )));
    }
    for shift in &plan.moves {
        let here = layout.partitions.iter().find(|p| p.number == shift.partition);
        if here.is_some_and(|p| p.start == shift.to) {
            continue;
        }
        let opts = MoveOptions {
            to: Some(shift.to),
            journal: Some(BootPlan::journal(dir, shift.partition)),
            rescue: action == Action::Rescue,
            ..MoveOptions::default()
        };
        ended(session.move_all(&opts, &[shift.partition], events)?)?;
    }
    Ok(Ran::Done)
}

/// udev's LVM rules activate a volume group as soon as its PVs appear, in
/// the initramfs too, before init-premount: the mappings on a partition to
/// move, unused yet (nothing is mounted before root), are removed with
/// `dmsetup remove` (which refuses one that is open). The mappings removed.
fn release_mappings(root: &SysRoot, disk: &str, partitions: &[u32]) -> Result<Vec<String>, String> {
    let mut released = Vec::new();
    for part in sysfs::partition_dirs(&root.block(disk)) {
        if !sysfs::partition_number(&part).is_some_and(|n| partitions.contains(&n)) {
            continue;
        }
        let holders = fs::read_dir(part.join("holders")).into_iter().flatten().flatten();
        for holder in holders.map(|h| root.sys.join("class/block").join(h.file_name())) {
            let Some(name) = sysfs::read_text(&holder.join("dm/name")) else {
                return Err(format!(
                    "partition is held by {} (not device-mapper)",
                    holder.display()
                ));
            };
            let out = std::process::Command::new("dmsetup").args(["remove", &name]).output();
            match out {
                Ok(o) if o.status.success() => released.push(name),
                Ok(o) => {
                    return Err(format!(
                        "the mapping {name} on the partition could not be removed: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ))
                }
                Err(e) => return Err(format!("the partition is held by {name}; dmsetup: {e}")),
            }
        }
    }
    Ok(released)
}

/// A move a stop request ended early, as an error: at boot nothing asks.
fn ended(outcome: Outcome) -> Result<(), SessionError> {
    match outcome {
        Outcome::Stopped(why) => Err(MoveRefusal::Stopped(why).into()),
        Outcome::Finished => Ok(()),
    }
}

fn run_quietly(program: &str, args: &[&str]) {
    let _ = std::process::Command::new(program).args(args).output();
}

/// The whole disks that are `plan`'s: same size, and the same serial and
/// WWN where the plan knows them (a disk that does not say is not the one
/// that did). Where several are (disks without a serial: loop devices,
/// virtual disks), those whose table is the one scheduled or already moved.
pub fn find_disks(root: &SysRoot, plan: &BootPlan) -> Vec<PathBuf> {
    let names = fs::read_dir(root.sys.join("block")).into_iter().flatten().flatten();
    let mut found = Vec::new();
    for name in names.map(|e| e.file_name().to_string_lossy().into_owned()) {
        let path = sysfs::node_path(root, &name);
        let Ok(opened) = crate::open::open_target(root, &path, &Overrides::default(), false) else {
            continue;
        };
        let here = device::identity(root, &opened.target, &opened.topology);
        if plan.is_the_disk(&here) {
            let ss = opened.topology.logical_sector_size.value;
            let planned = table::read(&opened.file, ss, here.size_bytes)
                .is_ok_and(|layout| plan.table_changed(&layout).is_none());
            found.push((path, planned));
        }
    }
    prefer_planned(found)
}

/// The disks found, each with whether its table is the plan's: only those
/// whose table is, where several were found and any is.
fn prefer_planned(mut found: Vec<(PathBuf, bool)>) -> Vec<PathBuf> {
    if found.len() > 1 && found.iter().any(|(_, planned)| *planned) {
        found.retain(|(_, planned)| *planned);
    }
    found.into_iter().map(|(path, _)| path).collect()
}

/// The block device holding the file system whose UUID is `uuid`.
pub fn find_fs(root: &SysRoot, uuid: &str) -> Option<PathBuf> {
    let names = fs::read_dir(root.sys.join("class/block")).ok()?.flatten();
    names.map(|e| e.file_name().to_string_lossy().into_owned()).find_map(|name| {
        let (path, found) = fs_uuid_of(root, &name)?;
        found.eq_ignore_ascii_case(uuid).then_some(path)
    })
}

/// The node of block device `name` and the UUID of its file system, read
/// past the page cache (O_DIRECT): what is on the disk now.
fn fs_uuid_of(root: &SysRoot, name: &str) -> Option<(PathBuf, String)> {
    let dir = root.sys.join("class/block").join(name);
    let size = sysfs::read_number(&dir.join("size"))?.checked_mul(512)?;
    let path = root.dev.join(name);
    let file = fs::File::open(&path).ok()?;
    let direct = crate::bench::open_direct(&path, crate::bench::Mode::Read, false).ok()?;
    // 4096 is a multiple of every logical block size up to it.
    let reader = crate::io::DirectReader::direct(file, direct, 4096).ok()?;
    let (_, uuid) = crate::stack::fs_uuid(&reader, 0, size).ok()??;
    Some((path, uuid))
}

/// Where the journal of a move at boot can live, or why nowhere: a file
/// system the initramfs can mount (ext*, vfat, XFS, btrfs), mounted
/// read-write under `sysroot`, on a plain partition or disk (not LVM, LUKS
/// or md: the initramfs has not assembled them yet) other than those
/// moved. `explicit` (a mount point) or the first of /boot, /boot/efi,
/// /efi and then the rest in mount order.
pub fn choose_place(
    root: &SysRoot,
    sysroot: &Path,
    disk: &str,
    moved: &[u32],
    explicit: Option<&Path>,
) -> Result<Place, String> {
    let mounts = device::exclusive::mount_table();
    let judge = |m: &Mount| -> Result<Place, String> {
        let inside = m.point.strip_prefix(sysroot).map_err(|_| "not under the root".to_string())?;
        if !JOURNAL_FS.iter().any(|(fs, _)| *fs == m.fstype) {
            return Err(format!("{} cannot be mounted by the initramfs", m.fstype));
        }
        if !m.read_write || m.root != Path::new("/") {
            return Err("mounted read-only or as a bind mount".into());
        }
        room_for_journal(&m.point)?;
        let dir = fs::canonicalize(root.sys.join("dev/block").join(&m.dev))
            .map_err(|_| "not on a block device".to_string())?;
        let stacked = fs::read_dir(dir.join("slaves")).is_ok_and(|mut e| e.next().is_some());
        if stacked {
            return Err(
                "on a stacked device (LVM, LUKS, md) the initramfs has not set up yet".into()
            );
        }
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let parent = dir.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy());
        let on_disk = parent.is_some_and(|p| p == disk);
        if name == disk
            || (on_disk && sysfs::partition_number(&dir).is_some_and(|n| moved.contains(&n)))
        {
            return Err("on a partition being moved".into());
        }
        let Some((device, uuid)) = fs_uuid_of(root, &name) else {
            return Err(format!("{} has no file system UUID to find it by", name));
        };
        let mountpoint = Path::new("/").join(inside);
        Ok(Place { uuid, fstype: m.fstype.clone(), mountpoint, device })
    };
    if let Some(want) = explicit {
        let want = fs::canonicalize(want).map_err(|e| format!("{}: {e}", want.display()))?;
        let m = mounts.iter().rev().find(|m| m.point == want);
        let m = m.ok_or_else(|| format!("{} is not a mount point", want.display()))?;
        return judge(m)
            .map_err(|why| format!("the journal cannot live on {}: {why}", want.display()));
    }
    let preferred = ["boot", "boot/efi", "efi"].map(|d| sysroot.join(d));
    let rank = |m: &&Mount| preferred.iter().position(|p| *p == m.point).unwrap_or(preferred.len());
    let mut candidates: Vec<&Mount> = mounts.iter().filter(|m| m.point != sysroot).collect();
    candidates.sort_by_key(rank);
    candidates.into_iter().find_map(|m| judge(m).ok()).ok_or_else(|| {
        format!(
            "no file system under {} can hold the journal: it needs one the initramfs can mount \
             (ext4, vfat, XFS, btrfs) on a plain partition not being moved, such as a separate \
             /boot or the ESP; mount one and name it with --journal-on",
            sysroot.display()
        )
    })
}

/// Whether the file system of `dir` has the room a journal may need.
pub fn room_for_journal(dir: &Path) -> Result<(), String> {
    let free = rustix::fs::statvfs(dir).map(|v| v.f_bavail.saturating_mul(v.f_frsize));
    match free {
        Ok(f) if f < JOURNAL_ROOM => Err(format!(
            "{} has {} free, less than the {} a journal may need (three saved chunks)",
            dir.display(),
            crate::units::human_size(f),
            crate::units::human_size(JOURNAL_ROOM)
        )),
        _ => Ok(()),
    }
}

/// Whether SYSROOT/boot lives on one of the partitions `moved` of `disk`.
pub fn boot_moves(root: &SysRoot, sysroot: &Path, disk: &str, moved: &[u32]) -> bool {
    let boot = sysroot.join("boot");
    let mounts = device::exclusive::mount_table();
    let holder = mounts
        .iter()
        .filter(|m| boot.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len());
    let Some(m) = holder else { return false };
    let Ok(dir) = fs::canonicalize(root.sys.join("dev/block").join(&m.dev)) else { return false };
    let on_disk = dir.parent().and_then(|p| p.file_name()).is_some_and(|n| n == disk);
    on_disk && sysfs::partition_number(&dir).is_some_and(|n| moved.contains(&n))
}

/// The kernel module that mounts `fstype`.
pub fn fs_module(fstype: &str) -> &'static str {
    JOURNAL_FS.iter().find(|(fs, _)| *fs == fstype).map_or("ext4", |(_, m)| m)
}

impl BootPlan {
    /// `here` is the disk scheduled: its size, and its serial and WWN where
    /// the plan knows them (a disk that does not say is not the one that
    /// did); the serial as udev gave it or as the kernel does without udev.
    fn is_the_disk(&self, here: &Identity) -> bool {
        let id = &self.identity;
        let known = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        let kernel_says = self.kernel_serial.is_some() && self.kernel_serial == here.serial;
        here.size_bytes == id.size_bytes
            && (known(&id.serial, &here.serial) || kernel_says)
            && known(&id.wwid, &here.wwid)
    }
}

/// The serial the kernel reports for `disk` without udev, where it is
/// not `identity`'s (for [`BootPlan::kernel_serial`]).
pub fn kernel_serial(root: &SysRoot, disk: &str, identity: &Identity) -> Option<String> {
    device::kernel_serial(&root.block(disk)).filter(|s| identity.serial.as_ref() != Some(s))
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{self, fixtures::mbr_entry};

    #[test]
    fn the_disk_is_known_by_udev_s_serial_or_the_kernel_s() {
        let mut p = plan();
        p.identity.serial = Some("WD-WCAV1234".into());
        let here = |serial: Option<&str>| Identity {
            size_bytes: 1 << 30,
            serial: serial.map(str::to_string),
            wwid: None,
        };
        assert!(p.is_the_disk(&here(Some("WD-WCAV1234"))));
        assert!(!p.is_the_disk(&here(Some("0123456789AB"))), "a bridge's own serial");
        assert!(!p.is_the_disk(&here(None)), "a disk that does not say");
        p.kernel_serial = Some("0123456789AB".into());
        assert!(p.is_the_disk(&here(Some("0123456789AB"))), "before udev, the kernel's");
        assert!(!p.is_the_disk(&Identity { size_bytes: 1 << 31, ..here(Some("WD-WCAV1234")) }));
    }

    fn plan() -> BootPlan {
        BootPlan {
            disk: "/dev/sda".into(),
            identity: Identity { size_bytes: 1 << 30, serial: None, wwid: None },
            kernel_serial: None,
            table: vec![
                Slot { partition: 1, start: 63, size: 1000 },
                Slot { partition: 2, start: 4096, size: 2048 },
            ],
            moves: vec![Shift { partition: 1, from: 63, to: 2048 }],
            journal: Place {
                uuid: "u".into(),
                fstype: "ext4".into(),
                mountpoint: "/srv".into(),
                device: "/dev/sda2".into(),
            },
            generator: Generator::InitramfsTools,
            kernel: "6.1.0".into(),
            grub_redirect: false,
            scheduled: 0,
        }
    }

    /// An MBR disk of 8192 sectors holding primaries at the given slots.
    fn layout(parts: &[(u32, u32, u32)]) -> Layout {
        let mut img = vec![0u8; 8192 * 512];
        for &(number, start, size) in parts {
            mbr_entry(&mut img, 0, number as usize - 1, 0x83, start, size);
        }
        img[510..512].copy_from_slice(&[0x55, 0xAA]);
        table::read(&img, 512, img.len() as u64).unwrap()
    }

    /// Two disks alike but for their tables (no serial to tell them
    /// apart): the one with the plan's table is the plan's; two with it,
    /// or none, stay ambiguous for the caller to refuse.
    #[test]
    fn of_disks_alike_the_one_with_the_planned_table_is_chosen() {
        let p = |s: &str| PathBuf::from(s);
        let found = vec![(p("/dev/loop0"), false), (p("/dev/loop1"), true)];
        assert_eq!(prefer_planned(found), [p("/dev/loop1")]);
        let both = vec![(p("/dev/loop0"), true), (p("/dev/loop1"), true)];
        assert_eq!(prefer_planned(both).len(), 2);
        let neither = vec![(p("/dev/loop0"), false), (p("/dev/loop1"), false)];
        assert_eq!(prefer_planned(neither).len(), 2);
        assert_eq!(prefer_planned(vec![(p("/dev/sda"), false)]), [p("/dev/sda")]);
    }

    #[test]
    fn the_table_must_be_the_one_scheduled_or_already_moved() {
        let plan = plan();
        assert_eq!(plan.table_changed(&layout(&[(1, 63, 1000), (2, 4096, 2048)])), None);
        assert_eq!(plan.table_changed(&layout(&[(1, 2048, 1000), (2, 4096, 2048)])), None);
        for changed in [
            layout(&[(1, 64, 1000), (2, 4096, 2048)]),
            layout(&[(1, 63, 1001), (2, 4096, 2048)]),
            layout(&[(1, 63, 1000), (2, 2048, 2048)]),
            layout(&[(1, 63, 1000)]),
            layout(&[(1, 63, 1000), (3, 4096, 2048)]),
        ] {
            assert!(plan.table_changed(&changed).is_some(), "{:?}", changed.partitions);
        }
    }

    #[test]
    fn a_result_is_written_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(BootResult::read(dir.path()), None);
        let r =
            BootResult { state: BootState::Refused, reason: Some("x".into()), boots: 2, when: 5 };
        r.write(dir.path()).unwrap();
        assert_eq!(BootResult::read(dir.path()), Some(r));
        BootResult::remove(dir.path()).unwrap();
        BootResult::remove(dir.path()).unwrap();
        assert_eq!(BootResult::read(dir.path()), None);
    }

    #[test]
    fn a_move_without_a_journal_is_scheduled() {
        let dir = tempfile::tempdir().unwrap();
        let states = plan().states(dir.path());
        assert_eq!(
            states,
            vec![(Shift { partition: 1, from: 63, to: 2048 }, MoveState::Scheduled)]
        );
    }
}
