//! Safety for writing a partition table: refuse targets something else is
//! using, open them exclusively, and recognise a disk when a write is
//! undone.

use super::ioctl;
use super::stack::what_holds;
use super::sysfs::{node_path, partition_dirs, partition_number, read_number, read_text, SysRoot};
use super::{Target, TargetKind};
use rustix::fs::{major, minor, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::{self, File, Metadata};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

// Where src/cli/realign.rs still finds them; they live in device::kernel.

#[derive(Debug, thiserror::Error)]
pub enum ExclusiveError {
    #[error("{}: in use: {}", .0.display(), .1)]
    InUse(PathBuf, String),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

fn io_error(path: &Path, e: impl Into<std::io::Error>) -> ExclusiveError {
    ExclusiveError::Io { path: path.to_path_buf(), source: e.into() }
}

/// A block device node with its kernel name and "major:minor".
struct Node {
    pub name: String,
    pub dev: String,
    pub holders: PathBuf,
    /// Its number when it is a partition.
    pub partition: Option<u32>,
}

impl Node {
    /// The node described by a sysfs directory (SYS/block/sda/sda1).
    pub(crate) fn of_dir(dir: &Path) -> Option<Node> {
        Some(Node {
            name: dir.file_name()?.to_str()?.to_string(),
            dev: read_text(&dir.join("dev")).unwrap_or_default(),
            holders: dir.join("holders"),
            partition: partition_number(dir),
        })
    }
}

/// Refuse a disk that is mounted, held (LVM, MD, dm-crypt), opened
/// exclusively (swap, btrfs) or read by a loop device through itself or
/// any partition, and an image attached to a loop device by any path.
/// `asked` are the partitions the caller is about to change: where one of
/// them is in use, the refusal names it rather than another.
pub fn check_unused(root: &SysRoot, target: &Target, asked: &[u32]) -> Result<(), ExclusiveError> {
    let busy = |why: String| Err(ExclusiveError::InUse(target.path.clone(), why));
    let Some(name) = target.name.as_deref().filter(|_| target.kind == TargetKind::Disk) else {
        return match loop_reading(root, &target.path) {
            Some(l) => busy(format!(
                "attached to /dev/{}{}; partition that device or detach it",
                l.name,
                l.through(&target.path)
            )),
            None if locked(&target.path) => busy(format!(
                "another process holds a lock on it, as a running VM's QEMU does{}; shut the \
                 guest down first",
                holders(&target.path)
            )),
            None => Ok(()),
        };
    };
    if let Some(twin) = twin_loop(root, name) {
        return busy(format!(
            "its backing file {} is also attached to /dev/{}: writing through one loop device \
             changes what the other shows (detach it: losetup -d /dev/{})",
            twin.path.display(),
            twin.name,
            twin.name
        ));
    }
    let (first, rest): (Vec<Node>, Vec<Node>) = nodes(root, name)
        .into_iter()
        .partition(|n| n.partition.is_some_and(|p| asked.contains(&p)));
    match first_user(root, &first).or_else(|| first_user(root, &rest)) {
        Some(why) => busy(why),
        None => Ok(()),
    }
}

/// Refuse only where one of the partitions `asked` is in use: for a move
/// at boot, when the only other user of the disk is the journal's file
/// system on a partition the move leaves alone (which also makes the
/// disk refuse O_EXCL).
pub(crate) fn check_partitions_unused(
    root: &SysRoot,
    target: &Target,
    asked: &[u32],
) -> Result<(), ExclusiveError> {
    let name = target.name.as_deref().unwrap_or_default();
    let mut asked_nodes = nodes(root, name);
    asked_nodes.retain(|n| n.partition.is_some_and(|p| asked.contains(&p)));
    match first_user(root, &asked_nodes) {
        Some(why) => Err(ExclusiveError::InUse(target.path.clone(), why)),
        None => Ok(()),
    }
}

/// Whether a byte-range lock is held on the file: QEMU locks every image it
/// opens (OFD locks on bytes 100 on, shared ones included).
fn locked(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = File::open(path) else { return false };
    // SAFETY: flock is plain data; all-zero is a valid value to fill in.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_OFD_GETLK reads and writes the one struct flock passed;
    // the descriptor is open for the call's duration.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
    rc == 0 && lock.l_type != libc::F_UNLCK as libc::c_short
}

/// " (open in PROGRAM, pid N; ...)": the processes holding `path` open,
/// found by its device and inode in /proc/*/fd; empty when none is seen.
pub(crate) fn holders(path: &Path) -> String {
    let Ok(meta) = fs::metadata(path) else { return String::new() };
    let same =
        |fd: &Path| fs::metadata(fd).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino());
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        let fds = fs::read_dir(entry.path().join("fd")).into_iter().flatten().flatten();
        if fds.map(|fd| fd.path()).any(|fd| same(&fd)) {
            let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            found.push(format!("{}, pid {pid}", comm.trim()));
        }
    }
    if found.is_empty() {
        return String::new();
    }
    format!(" (open in {})", found.join("; "))
}

/// Another loop device reading the same bytes of a file as loop device
/// `name`.
fn twin_loop(root: &SysRoot, name: &str) -> Option<AttachedLoop> {
    let mut loops = attached_loops(root);
    let own = loops.remove(loops.iter().position(|l| l.name == name)?);
    let file = own.id.map(|(dev, ino, _)| (dev, ino))?;
    loops.into_iter().find(|l| l.id.is_some_and(|(d, i, _)| (d, i) == file) && l.overlaps(&own))
}

/// Who uses `nodes`, in words.
fn first_user(root: &SysRoot, nodes: &[Node]) -> Option<String> {
    user_among(root, nodes, &attached_loops(root))
}

/// Who uses `nodes`, `loops` being the loop devices that could read them.
/// Mounts and holders are looked for on every node before exclusive
/// claims: a mounted partition also makes its disk refuse O_EXCL, and the
/// mount is the useful thing to name. A loop device stacked on a node
/// leaves no holder nor claim, so it is found by device number.
fn user_among(root: &SysRoot, nodes: &[Node], loops: &[AttachedLoop]) -> Option<String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mount =
        |n: &Node| mounted(&mountinfo, &n.dev).map(|p| format!("{} is mounted on {p}", n.name));
    let held = |n: &Node| {
        let h = first_entry(&n.holders)?;
        let (node, what) = (node_path(root, &h), what_holds(root, &h));
        Some(format!("{} is held by {} ({what})", n.name, node.display()))
    };
    let stacked = |n: &Node| {
        let l = loops.iter().find(|l| l.stacked_on(&n.dev))?;
        // One level down only: the kernel forbids loop cycles, a fixture may not.
        let its_user = user_among(root, &self::nodes(root, &l.name), &[])
            .unwrap_or_else(|| format!("detach it (losetup -d /dev/{})", l.name));
        Some(format!(
            "{} is read by loop device /dev/{} (losetup offset {}): {its_user}",
            n.name, l.name, l.offset
        ))
    };
    let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
    let swap = |n: &Node| swap_on(&swaps, &n.dev).then(|| format!("{} is in use as swap", n.name));
    let claim = |n: &Node| {
        claimed(&root.dev.join(&n.name))
            .then(|| format!("{} is open exclusively (a file system or another tool)", n.name))
    };
    // A claimed partition makes its disk refuse O_EXCL too: ask the
    // partitions first, so the one in use is named.
    let (parts, disks): (Vec<&Node>, Vec<&Node>) =
        nodes.iter().partition(|n| n.partition.is_some());
    nodes
        .iter()
        .find_map(mount)
        .or_else(|| nodes.iter().find_map(held))
        .or_else(|| nodes.iter().find_map(stacked))
        .or_else(|| nodes.iter().find_map(swap))
        .or_else(|| parts.into_iter().find_map(claim))
        .or_else(|| disks.into_iter().find_map(claim))
}

/// Whether a swap area of /proc/swaps (its first column, a path) is the
/// block device `dev` ("8:2").
fn swap_on(swaps: &str, dev: &str) -> bool {
    swaps.lines().skip(1).filter_map(|l| l.split_whitespace().next()).any(|path| {
        fs::metadata(path.replace("\\040", " ")).is_ok_and(|m| {
            m.file_type().is_block_device()
                && format!("{}:{}", major(m.rdev()), minor(m.rdev())) == dev
        })
    })
}

/// The disk and its partitions, from SYS/block/NAME.
fn nodes(root: &SysRoot, name: &str) -> Vec<Node> {
    nodes_of_dir(&root.block(name))
}

/// The device of a sysfs directory and the partitions inside it.
fn nodes_of_dir(dir: &Path) -> Vec<Node> {
    let mut out: Vec<Node> = Node::of_dir(dir).into_iter().collect();
    out.extend(partition_dirs(dir).iter().filter_map(|d| Node::of_dir(d)));
    out
}

/// Who uses the block device of sysfs directory `dir` or any partition in
/// it (mounted, held, claimed), in words; None when nobody does.
pub(crate) fn user_of_dir(root: &SysRoot, dir: &Path) -> Option<String> {
    first_user(root, &nodes_of_dir(dir))
}

/// `path` with its parent canonicalized: the path the kernel shows for it.
/// `path` itself is not resolved, since a FUSE mount whose daemon died
/// cannot be looked up.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    let parent = path.parent().and_then(|p| fs::canonicalize(p).ok());
    match (parent, path.file_name()) {
        (Some(parent), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    }
}

/// Whether `dir` is a mount point: /proc/self/mountinfo's fifth field,
/// with the kernel's octal escapes (`\040` for a space) decoded, against
/// the canonical path.
pub(crate) fn is_mount_point(dir: &Path) -> bool {
    let dir = canonical(dir);
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo.lines().filter_map(|line| line.split(' ').nth(4)).any(|point| unescape(point) == dir)
}

/// Undoes the `\ooo` escapes the kernel writes into mount tables.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d[0] <= b'3');
        match octal.filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b))) {
            Some(d) => {
                out.push(d.iter().fold(0, |n, b| n * 8 + (b - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

/// One line of /proc/self/mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// major:minor of the device.
    pub dev: String,
    /// The directory of the file system mounted there ("/" for all of it).
    pub root: PathBuf,
    pub point: PathBuf,
    pub read_write: bool,
    pub fstype: String,
}

/// The mounts this process sees, in mount order.
pub fn mount_table() -> Vec<Mount> {
    parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            Some(Mount {
                dev: f.get(2)?.to_string(),
                root: unescape(f.get(3)?),
                point: unescape(f.get(4)?),
                read_write: f.get(5)?.split(',').any(|o| o == "rw"),
                fstype: right.split(' ').next()?.to_string(),
            })
        })
        .collect()
}

/// The mount points of device `dev` ("8:1") in a mountinfo text, whose
/// third field is major:minor, with the kernel's escapes undone.
fn mounts(mountinfo: &str, dev: &str) -> Vec<String> {
    let on_dev = |line: &&str| !dev.is_empty() && line.split(' ').nth(2) == Some(dev);
    let point = |line: &str| unescape(line.split(' ').nth(4).unwrap_or("?"));
    mountinfo.lines().filter(on_dev).map(|l| point(l).to_string_lossy().into_owned()).collect()
}

fn mounted(mountinfo: &str, dev: &str) -> Option<String> {
    mounts(mountinfo, dev).into_iter().next()
}

/// Where partition `number` of disk `name` is in use, as lsblk's
/// MOUNTPOINTS says it: each mount point, "[SWAP]" for active swap.
pub fn mountpoints(root: &SysRoot, name: &str, number: u32) -> Vec<String> {
    let dirs = partition_dirs(&root.block(name));
    let Some(node) =
        dirs.iter().find(|d| partition_number(d) == Some(number)).and_then(|d| Node::of_dir(d))
    else {
        return Vec::new();
    };
    let mut out =
        mounts(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(), &node.dev);
    if swap_on(&fs::read_to_string("/proc/swaps").unwrap_or_default(), &node.dev) {
        out.push("[SWAP]".into());
    }
    out
}

fn first_entry(dir: &Path) -> Option<String> {
    let mut entries = fs::read_dir(dir).ok()?.flatten();
    entries.next().map(|e| e.file_name().to_string_lossy().into_owned())
}

/// Whether O_EXCL on the node fails with EBUSY: the kernel's own word that
/// someone claimed it. A node we cannot open is judged by the other checks.
fn claimed(node: &Path) -> bool {
    let flags = OFlags::RDONLY | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NONBLOCK;
    matches!(rustix::fs::open(node, flags, Mode::empty()), Err(Errno::BUSY))
}

/// fsync the directory holding `path`, so a file just created or renamed
/// there survives a crash.
pub fn sync_parent(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// The loop device whose backing file is `image`, if any.
pub(crate) fn loop_backed_by(root: &SysRoot, image: &Path) -> Option<String> {
    loop_reading(root, image).map(|l| l.name)
}

/// A bound loop device and the file it reads from.
#[derive(Debug)]
struct AttachedLoop {
    name: String,
    /// The path it was attached through, as the kernel recorded it.
    path: PathBuf,
    /// (st_dev, st_ino, st_rdev) of the backing file.
    id: Option<(u64, u64, u64)>,
    /// Bytes skipped at the start of the backing file (`losetup -o`).
    offset: u64,
    /// Bytes it shows (`losetup --sizelimit`); 0 for up to the file's end.
    sizelimit: u64,
}

impl AttachedLoop {
    /// Whether it reads the file that `meta` describes, whatever the path.
    fn reads(&self, meta: &Metadata) -> bool {
        self.id.is_some_and(|(dev, ino, _)| (dev, ino) == (meta.dev(), meta.ino()))
    }

    /// Whether it reads block device `number` ("8:1", as sysfs writes it).
    fn stacked_on(&self, number: &str) -> bool {
        self.id.is_some_and(|(_, _, rdev)| {
            rdev != 0 && format!("{}:{}", major(rdev), minor(rdev)) == number
        })
    }

    /// Whether the two show some byte of the file in common: loop devices
    /// on separate ranges of one file are separate disks.
    fn overlaps(&self, other: &AttachedLoop) -> bool {
        let end = |l: &AttachedLoop| match l.sizelimit {
            0 => u64::MAX,
            n => l.offset.saturating_add(n),
        };
        self.offset < end(other) && other.offset < end(self)
    }

    /// " (through PATH)" when attached through another name than `image`:
    /// a hard link or a bind mount.
    fn through(&self, image: &Path) -> String {
        match fs::canonicalize(image) {
            Ok(own) if own == self.path => String::new(),
            _ => format!(" (through {})", self.path.display()),
        }
    }
}

/// The loop device reading `image`, found by device and inode number.
fn loop_reading(root: &SysRoot, image: &Path) -> Option<AttachedLoop> {
    let meta = fs::metadata(image).ok()?;
    attached_loops(root).into_iter().find(|l| l.reads(&meta))
}

/// Every bound loop device in SYS/block. The kernel says which file each
/// reads (LOOP_GET_STATUS64); where its node cannot be opened (no root, a
/// fixture) the path it was attached through stands in, as it resolves now.
fn attached_loops(root: &SysRoot) -> Vec<AttachedLoop> {
    let Ok(block) = fs::read_dir(root.sys.join("block")) else { return Vec::new() };
    let attached = |entry: fs::DirEntry| {
        let name = entry.file_name().into_string().ok()?;
        let dir = entry.path().join("loop");
        let path = PathBuf::from(read_text(&dir.join("backing_file"))?);
        let by_kernel = File::open(root.dev.join(&name)).ok().and_then(|f| ioctl::loop_backing(&f));
        let id =
            by_kernel.or_else(|| fs::metadata(&path).ok().map(|m| (m.dev(), m.ino(), m.rdev())));
        let offset = read_number(&dir.join("offset")).unwrap_or(0);
        let sizelimit = read_number(&dir.join("sizelimit")).unwrap_or(0);
        Some(AttachedLoop { name, path, id, offset, sizelimit })
    };
    block.flatten().filter_map(attached).collect()
}

/// Open for writing; block devices exclusively, so no one mounts or claims
/// them while the table is written.
pub(crate) fn open_for_writing(target: &Target) -> Result<File, ExclusiveError> {
    let mut flags = OFlags::RDWR | OFlags::CLOEXEC;
    if target.kind == TargetKind::Disk {
        flags |= OFlags::EXCL;
    }
    match rustix::fs::open(&target.path, flags, Mode::empty()) {
        Ok(fd) => Ok(File::from(fd)),
        Err(Errno::BUSY) => {
            Err(ExclusiveError::InUse(target.path.clone(), "open exclusively elsewhere".into()))
        }
        Err(e) => Err(io_error(&target.path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw\n\
                             30 22 0:5 / /dev rw - devtmpfs udev rw\n";

    #[test]
    fn mount_table_escapes() {
        assert_eq!(unescape(r"/run/a\040b\011c\134d"), Path::new("/run/a b\tc\\d"));
        assert_eq!(unescape(r"/plain\04"), Path::new(r"/plain\04"));
        assert_eq!(unescape(r"\999"), Path::new(r"\999"));
    }

    #[test]
    fn mountinfo_by_device_number() {
        assert_eq!(mounted(MOUNTINFO, "8:2").as_deref(), Some("/"));
        assert_eq!(mounted(MOUNTINFO, "8:1"), None);
        assert_eq!(mounted(MOUNTINFO, ""), None);
    }

    #[test]
    fn mountinfo_parsed_whole() {
        let text =
            format!("{MOUNTINFO}40 22 8:3 /sub /mnt/a\\040b ro,nosuid - vfat /dev/sda3 rw\nbad\n");
        let t = parse_mountinfo(&text);
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].dev.as_str(), t[0].fstype.as_str(), t[0].read_write),
            ("8:2", "ext4", true)
        );
        assert_eq!(t[2].point, Path::new("/mnt/a b"));
        assert_eq!(t[2].root, Path::new("/sub"));
        assert!(!t[2].read_write);
    }

    /// Fixture disk sdz with device number `dev` ("8:240") under DIR/sys.
    fn fixture_disk(dir: &Path, dev: &str) -> (SysRoot, PathBuf, Target) {
        let sys = dir.join("sys");
        let disk = sys.join("block/sdz");
        fs::create_dir_all(disk.join("holders")).unwrap();
        fs::write(disk.join("dev"), format!("{dev}\n")).unwrap();
        let target = Target {
            path: dir.join("dev/sdz"),
            name: Some("sdz".into()),
            kind: TargetKind::Disk,
            selected_partition: None,
        };
        (SysRoot::fixture(sys), disk, target)
    }

    /// Fixture loop device NAME reading `backing` from byte `offset`.
    fn fixture_loop(root: &SysRoot, name: &str, backing: &Path, offset: u64) {
        let dir = root.block(name).join("loop");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("backing_file"), format!("{}\n", backing.display())).unwrap();
        fs::write(dir.join("offset"), format!("{offset}\n")).unwrap();
    }

    #[test]
    fn loops_on_separate_ranges_of_a_file_are_not_twins() {
        let at = |offset, sizelimit| AttachedLoop {
            name: String::new(),
            path: PathBuf::new(),
            id: Some((1, 2, 0)),
            offset,
            sizelimit,
        };
        let mib = 1 << 20;
        assert!(!at(0, 64 * mib).overlaps(&at(64 * mib, 48 * mib)));
        assert!(!at(64 * mib, 0).overlaps(&at(0, 64 * mib)));
        assert!(at(0, 64 * mib + 512).overlaps(&at(64 * mib, 48 * mib)));
        assert!(at(0, 0).overlaps(&at(u64::MAX - 1, 0)));
        assert!(at(5, 1).overlaps(&at(0, 0)));
    }

    #[test]
    fn holders_and_partitions_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let (root, disk, target) = fixture_disk(dir.path(), "8:240");
        fs::create_dir_all(disk.join("sdz1/holders/dm-0")).unwrap();
        fs::write(disk.join("sdz1/partition"), "1\n").unwrap();
        fs::write(disk.join("sdz1/dev"), "8:241\n").unwrap();
        let err = check_unused(&root, &target, &[]).unwrap_err().to_string();
        assert!(
            err.contains("sdz1 is held by ") && err.ends_with("/dm-0 (a stacked device)"),
            "{err}"
        );
        fs::remove_dir(disk.join("sdz1/holders/dm-0")).unwrap();
        check_unused(&root, &target, &[]).unwrap();
    }

    /// `realign /dev/sdz 1` with sdz1 under a dm-linear and sdz4 an md
    /// member: the refusal names sdz1 and what holds it, by lsblk's name.
    #[test]
    fn the_asked_partition_and_its_real_holder_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (root, disk, target) = fixture_disk(dir.path(), "8:240");
        for (n, holder) in [(1, "dm-1"), (4, "md1")] {
            let part = disk.join(format!("sdz{n}"));
            fs::create_dir_all(part.join("holders").join(holder)).unwrap();
            fs::write(part.join("partition"), format!("{n}\n")).unwrap();
            fs::write(part.join("dev"), format!("8:{}\n", 240 + n)).unwrap();
        }
        fs::create_dir_all(root.block("md1/md")).unwrap();
        fs::write(root.block("md1/md/level"), "raid1\n").unwrap();
        fs::create_dir_all(root.block("dm-1/dm")).unwrap();
        fs::write(root.block("dm-1/dm/name"), "whole\n").unwrap();
        fs::create_dir_all(root.dev.join("mapper")).unwrap();
        fs::write(root.dev.join("mapper/whole"), "").unwrap();
        let refusal = |asked: &[u32]| check_unused(&root, &target, asked).unwrap_err().to_string();
        let mapper = root.dev.join("mapper/whole");
        // The table is unreadable here (no /dev/mapper/control): no target type.
        let want = format!("sdz1 is held by {} (device-mapper)", mapper.display());
        assert!(refusal(&[1]).ends_with(&want), "{}", refusal(&[1]));
        let want = format!("sdz4 is held by {} (MD RAID raid1)", root.dev.join("md1").display());
        assert!(refusal(&[4]).ends_with(&want), "{}", refusal(&[4]));
        for (uuid, what) in [
            ("LVM-abc", "LVM logical volume"),
            ("CRYPT-LUKS2-abc-name", "dm-crypt"),
            ("mpath-3600", "multipath"),
            ("part1-mpath-3600", "kpartx partition"),
        ] {
            fs::write(root.block("dm-1/dm/uuid"), format!("{uuid}\n")).unwrap();
            assert!(refusal(&[1]).ends_with(&format!("({what})")), "{uuid}: {}", refusal(&[1]));
        }
    }

    #[test]
    fn images_attached_to_loop_devices_are_refused_whatever_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let link = dir.path().join("link.img");
        fs::write(&image, b"").unwrap();
        fs::hard_link(&image, &link).unwrap();
        let root = SysRoot::fixture(dir.path().join("sys"));
        let target = Target {
            path: image.clone(),
            name: None,
            kind: TargetKind::Image,
            selected_partition: None,
        };
        check_unused(&root, &target, &[]).unwrap();
        fixture_loop(&root, "loop7", &image, 0);
        let err = check_unused(&root, &target, &[]).unwrap_err().to_string();
        assert!(err.contains("/dev/loop7;"), "{err}");
        fs::remove_dir_all(root.block("loop7")).unwrap();
        fixture_loop(&root, "loop3", &link, 0);
        let err = check_unused(&root, &target, &[]).unwrap_err().to_string();
        assert!(err.contains("/dev/loop3 (through") && err.contains("link.img"), "{err}");
    }

    #[test]
    fn loop_devices_reading_a_node_are_found_by_device_number() {
        let dir = tempfile::tempdir().unwrap();
        // /dev/null stands for the disk: any node with that device number.
        let null = fs::metadata("/dev/null").unwrap().rdev();
        let (root, _, target) =
            fixture_disk(dir.path(), &format!("{}:{}", major(null), minor(null)));
        check_unused(&root, &target, &[]).unwrap();
        fixture_loop(&root, "loop5", Path::new("/dev/null"), 512);
        let err = check_unused(&root, &target, &[]).unwrap_err().to_string();
        assert!(
            err.contains("sdz is read by loop device /dev/loop5 (losetup offset 512)"),
            "{err}"
        );
    }
}
