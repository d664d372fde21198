//! Bringing the nbdkit → nbdfuse → loop stack up and tearing it down.
//!
//! nbdkit daemonises and nbdfuse runs in its own process group, so both
//! outlive the `blkalign emulate start` that made them; their pids and the
//! loop device go into the drive's record as soon as they are known.

use super::state::{self, EmulatedDrive};
use super::{EmulateError, LbaRange, Spec, DEFAULT_SIZE};
use crate::device::exclusive::{canonical, is_mount_point, user_of_dir};
use crate::device::sysfs::read_text;
use crate::device::SysRoot;
use rustix::process::{kill_process, Pid, Signal};
use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a loaded CI machine; nothing here takes a second when
/// healthy.
const TIMEOUT: Duration = Duration::from_secs(15);

/// Tools the stack runs, with the Debian package that ships each.
const TOOLS: &[(&str, &str)] = &[
    ("nbdkit", "nbdkit"),
    ("nbdfuse", "libnbd-bin"),
    ("fusermount3", "fuse3"),
    ("losetup", "mount"),
];

/// Starts a drive; on failure nothing of it is left behind.
pub fn start(spec: &Spec) -> Result<EmulatedDrive, EmulateError> {
    spec.geometry.validate()?;
    preflight()?;
    // nbdkit runs from / once daemonised, and the record must work anywhere.
    let file = spec.file.as_deref().map(std::path::absolute).transpose();
    let file = file.map_err(EmulateError::io("resolving --file"))?;
    let spec = &Spec { file, ..spec.clone() };
    let size = drive_size(spec)?;
    if let Some(range) = spec.fail_lba {
        failing_bytes(range, &spec.geometry, size)?;
    }
    let mut drive = state::create(spec, size)?;
    match bring_up(&mut drive) {
        Ok(()) => Ok(drive),
        Err(err) => {
            let _ = teardown(&drive, Cut::Orderly);
            Err(err)
        }
    }
}

/// Flushes and stops a drive, keeping its file (if any). Refuses while
/// its loop device or a partition on it is mounted, held or claimed:
/// tearing the stack down under a file system loses what it has not
/// written yet.
pub fn stop(id: &str) -> Result<(), EmulateError> {
    let drive = state::load(id)?;
    check_unused(&drive)?;
    teardown(&drive, Cut::Orderly)
}

/// Ends a drive as a power failure would: nbdkit dies first, so writes
/// still in its volatile cache are lost.
pub fn power_cut(id: &str) -> Result<(), EmulateError> {
    teardown(&state::load(id)?, Cut::Power)
}

/// What [`stop_all`] did.
#[derive(Debug, Default)]
pub struct StopAll {
    /// Ids of the drives stopped (or records cleaned up).
    pub stopped: Vec<String>,
    /// Drives (by id) and leftover directories (by name) that could not be
    /// stopped, with why: in use, or a step failed.
    pub failed: Vec<(String, EmulateError)>,
}

/// Stops every recorded drive, including half-started and unreadable
/// records, as [`stop`] would: drives in use are refused, the others
/// stopped all the same. Err only when the state directory is unreadable.
pub fn stop_all() -> Result<StopAll, EmulateError> {
    let mut done = StopAll::default();
    for id in state::ids()? {
        let result = match state::load(&id) {
            Ok(drive) => check_unused(&drive).and_then(|()| teardown(&drive, Cut::Orderly)),
            Err(EmulateError::Record { .. }) => {
                clean_dir(&state::state_dir().join(&id)).and_then(|()| clean_record(&id))
            }
            Err(err) => Err(err),
        };
        match result {
            Ok(()) => done.stopped.push(id),
            Err(err) => done.failed.push((id, err)),
        }
    }
    for dir in state::orphan_dirs() {
        if let Err(err) = clean_dir(&dir) {
            let name = dir.file_name().map_or_else(|| dir.clone().into(), OsString::from);
            done.failed.push((name.to_string_lossy().into_owned(), err));
        }
    }
    Ok(done)
}

/// Err(InUse) when the drive's loop device, or a partition on it, is
/// mounted, held (LVM, MD, dm-crypt) or open exclusively. A loop device
/// that no longer serves the drive is someone else's and not looked at;
/// the stack itself (nbdfuse, nbdkit) never opens the loop device.
fn check_unused(drive: &EmulatedDrive) -> Result<(), EmulateError> {
    let Some(device) = drive.device.as_ref().filter(|d| serves(d, drive)) else {
        return Ok(());
    };
    let Some(name) = device.file_name() else { return Ok(()) };
    let root = SysRoot::real();
    let dir = root.sys.join("block").join(name);
    match user_of_dir(&root, &dir) {
        Some(by) => Err(EmulateError::InUse { id: drive.id.clone(), device: device.clone(), by }),
        None => Ok(()),
    }
}

fn preflight() -> Result<(), EmulateError> {
    let mut missing: Vec<_> =
        TOOLS.iter().copied().filter(|(tool, _)| which(tool).is_none()).collect();
    if !Path::new("/dev/fuse").exists() {
        missing.push(("/dev/fuse", "fuse3, and the fuse kernel module"));
    }
    if !missing.is_empty() {
        return Err(EmulateError::MissingTools(missing));
    }
    if !rustix::process::geteuid().is_root() {
        return Err(EmulateError::NotRoot);
    }
    Ok(())
}

/// Where a tool is, looking in sbin too (non-root PATHs often lack it).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(tool))
        .find(|p| p.is_file());
    found
}

/// The host-visible size: given, else the existing file's, else 1 GiB;
/// a whole number of physical sectors either way.
fn drive_size(spec: &Spec) -> Result<u64, EmulateError> {
    let g = &spec.geometry;
    let physical = u64::from(g.physical);
    let existing = spec.file.as_deref().and_then(|f| fs::metadata(f).ok()).map(|m| m.len());
    let size = match (spec.size, existing) {
        (Some(size), Some(len)) if platter_size(size, g)? < len => {
            return Err(EmulateError::Spec(format!(
                "the file holds {len} bytes, more than --size {size}; omit --size to use it all"
            )))
        }
        (Some(size), _) => size,
        (None, Some(len)) => len.saturating_sub(g.shift()) / physical * physical,
        (None, None) => DEFAULT_SIZE,
    };
    if size == 0 || size % physical != 0 {
        return Err(EmulateError::Spec(format!(
            "size {size} is not a positive multiple of the physical sector size {physical}"
        )));
    }
    platter_size(size, g)?;
    Ok(size)
}

/// The emulated platter holds the shifted host data, in whole sectors;
/// nbdkit takes sizes as signed 64-bit numbers.
fn platter_size(size: u64, g: &super::EmulatedGeometry) -> Result<u64, EmulateError> {
    let physical = u64::from(g.physical);
    let platter = size
        .checked_add(g.shift())
        .map(|bytes| bytes.div_ceil(physical))
        .and_then(|sectors| sectors.checked_mul(physical))
        .filter(|&bytes| i64::try_from(bytes).is_ok());
    platter.ok_or_else(|| {
        EmulateError::Spec(format!(
            "size {size} is too large: with the alignment shift of {} bytes the drive needs more \
             than {} bytes",
            g.shift(),
            i64::MAX
        ))
    })
}

/// The platter bytes `start..end` holding the failing LBAs, which must lie
/// within the `size` bytes the host sees.
fn failing_bytes(
    range: LbaRange,
    g: &super::EmulatedGeometry,
    size: u64,
) -> Result<(u64, u64), EmulateError> {
    let logical = u64::from(g.logical);
    let sectors = size / logical;
    let bytes = |lba: u64| lba.checked_mul(logical).and_then(|b| b.checked_add(g.shift()));
    let start = bytes(range.first);
    let end = range.last.checked_add(1).filter(|&after| after <= sectors).and_then(bytes);
    match (start, end) {
        (Some(start), Some(end)) => Ok((start, end)),
        _ => Err(EmulateError::Spec(format!(
            "--fail-lba {}-{} is outside the drive: its {sectors} logical sectors are LBA 0-{}",
            range.first,
            range.last,
            sectors.saturating_sub(1)
        ))),
    }
}

fn bring_up(drive: &mut EmulatedDrive) -> Result<(), EmulateError> {
    let mount = drive.mount_dir();
    fs::create_dir_all(&mount)
        .map_err(EmulateError::io(format!("creating {}", mount.display())))?;
    prepare_platter(drive)?;
    drive.nbdkit_command = nbdkit_command(drive)?;
    drive.save()?;
    drive.nbdkit_pid = Some(run_nbdkit(drive)?);
    drive.save()?;
    drive.nbdfuse_pid = Some(run_nbdfuse(drive)?);
    drive.save()?;
    let device = attach_loop(drive)?;
    drive.reported_physical_sector_size =
        sysfs_text(&device, "queue/physical_block_size").and_then(|text| text.parse().ok());
    drive.device = Some(device);
    drive.save()
}

/// Creates or grows a file-backed platter to its full size (sparse).
fn prepare_platter(drive: &EmulatedDrive) -> Result<(), EmulateError> {
    let Some(path) = platter_file(drive) else {
        return Ok(());
    };
    let want = platter_size(drive.size, &drive.geometry)?;
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(EmulateError::io(format!("opening {}", path.display())))?;
    let len =
        file.metadata().map_err(EmulateError::io(format!("reading {}", path.display())))?.len();
    if len < want {
        file.set_len(want).map_err(EmulateError::io(format!("sizing {}", path.display())))?;
    }
    Ok(())
}

/// The file holding the platter, or None when it lives in nbdkit's memory.
fn platter_file(drive: &EmulatedDrive) -> Option<PathBuf> {
    match (&drive.file, drive.fail_lba) {
        (Some(file), _) => Some(file.clone()),
        (None, Some(_)) => Some(drive.scratch_file()),
        (None, None) => None,
    }
}

/// nbdkit's arguments after the socket and pidfile. Filters listed first
/// are nearest the host: LBA shift, then the volatile cache, then
/// read-modify-write of partial physical sectors, then the latency of
/// each platter access.
fn nbdkit_command(drive: &EmulatedDrive) -> Result<Vec<String>, EmulateError> {
    let g = &drive.geometry;
    let (mut filters, mut params) = (Vec::new(), Vec::new());
    let shift = g.shift();
    if shift > 0 {
        filters.push("offset");
        params.extend([format!("offset={shift}"), format!("range={}", drive.size)]);
    }
    if drive.volatile_cache {
        filters.push("cache");
        let block = g.physical.max(4096);
        params.extend(["cache=writeback".into(), format!("cache-min-block-size={block}")]);
    }
    if g.physical > g.logical {
        filters.push("blocksize");
        params.push(format!("minblock={}", g.physical));
    }
    if g.latency_ms > 0 {
        filters.push("delay");
        params.extend([format!("rdelay={}ms", g.latency_ms), format!("wdelay={}ms", g.latency_ms)]);
    }
    let mut args: Vec<String> = filters.iter().map(|f| format!("--filter={f}")).collect();
    args.extend(plugin(drive)?);
    args.extend(params);
    Ok(args)
}

/// The plugin and its arguments. A failing LBA range needs the eval
/// plugin: nbdkit's error filter can only fail requests at random, and
/// its ddrescue filter makes the whole drive read-only.
fn plugin(drive: &EmulatedDrive) -> Result<Vec<String>, EmulateError> {
    let g = &drive.geometry;
    Ok(match (platter_file(drive), drive.fail_lba) {
        (Some(file), Some(range)) => {
            let (start, end) = failing_bytes(range, g, drive.size)?;
            let step = u64::from(g.physical);
            let pending = drive.until_written.then(|| (drive.remapped_file(), step));
            eval_plugin(&file, start, end, pending)
        }
        (Some(file), None) => vec!["file".into(), format!("file={}", file.display())],
        (None, _) => vec!["memory".into(), format!("size={}", platter_size(drive.size, g)?)],
    })
}

/// A file plugin in shell that fails reads and writes touching platter
/// bytes `start..end` with EIO. With `pending` (the file listing remapped
/// sectors, and the physical sector size) each physical sector there fails
/// only until a write covers it whole, which remaps it, as a drive does a
/// pending sector (a partial write reads it first, and fails).
fn eval_plugin(file: &Path, start: u64, end: u64, pending: Option<(PathBuf, u64)>) -> Vec<String> {
    let file = shell_quote(&file.display().to_string());
    let touches = format!("[ $4 -lt {end} ] && [ $(($4 + $3)) -gt {start} ]");
    let (read_check, write_check) = match pending {
        None => {
            let fail = format!("if {touches}; then echo 'EIO bad sector' >&2; exit 1; fi; ");
            (fail.clone(), fail)
        }
        Some((remapped, step)) => {
            let remapped = shell_quote(&remapped.display().to_string());
            let (first, last) = (start / step * step, end.div_ceil(step) * step);
            // Each physical sector of the range the request touches.
            let each = |body: &str| {
                format!(
                    "s=$(( $4 > {first} ? $4 / {step} * {step} : {first} )); \
                     e=$(( $4 + $3 < {last} ? $4 + $3 : {last} )); \
                     while [ $s -lt $e ]; do {body}; s=$((s + {step})); done; "
                )
            };
            let read = each(&format!(
                "grep -qsx $s {remapped} || {{ echo 'EIO pending sector' >&2; exit 1; }}"
            ));
            let write = each(&format!(
                "if [ $4 -le $s ] && [ $(($4 + $3)) -ge $((s + {step})) ]; then echo $s >> {remapped}; \
                 else echo 'EIO pending sector (partial write)' >&2; exit 1; fi"
            ));
            (read, write)
        }
    };
    vec![
        "eval".into(),
        format!("get_size=stat -Lc %s {file}"),
        format!("pread={read_check}dd if={file} skip=$4 count=$3 iflag=skip_bytes,count_bytes bs=64K status=none"),
        format!(
            "pwrite={write_check}dd of={file} seek=$4 count=$3 oflag=seek_bytes iflag=count_bytes,fullblock \
             conv=notrunc bs=64K status=none"
        ),
        format!("flush=sync {file}"),
    ]
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn log_file(drive: &EmulatedDrive, name: &str) -> Result<fs::File, EmulateError> {
    let path = drive.dir.join(name);
    fs::File::create(&path).map_err(EmulateError::io(format!("creating {}", path.display())))
}

fn log_text(drive: &EmulatedDrive, name: &str) -> String {
    fs::read_to_string(drive.dir.join(name)).unwrap_or_default().trim().to_string()
}

/// Runs nbdkit, which forks into the background once its socket is bound
/// and writes its pidfile; returns the daemon's pid.
fn run_nbdkit(drive: &EmulatedDrive) -> Result<i32, EmulateError> {
    let pidfile = drive.dir.join("nbdkit.pid");
    let status = Command::new("nbdkit")
        .arg("-U")
        .arg(drive.socket())
        .arg("-P")
        .arg(&pidfile)
        .args(&drive.nbdkit_command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(drive, "nbdkit.log")?)
        .status()
        .map_err(EmulateError::io("running nbdkit"))?;
    if !status.success() {
        let detail = log_text(drive, "nbdkit.log");
        return Err(EmulateError::Command { command: "nbdkit".into(), detail });
    }
    wait_for("nbdkit's pidfile", || Ok(read_pid(&pidfile)))
}

/// Runs nbdfuse in its own process group (so a Ctrl-C aimed at our caller
/// spares it) and waits until its file has the drive's size.
fn run_nbdfuse(drive: &EmulatedDrive) -> Result<i32, EmulateError> {
    let pidfile = drive.dir.join("nbdfuse.pid");
    let mut child = Command::new("nbdfuse")
        .arg("-P")
        .arg(&pidfile)
        .arg(drive.fuse_file())
        .arg("--unix")
        .arg(drive.socket())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(drive, "nbdfuse.log")?)
        .spawn()
        .map_err(EmulateError::io("running nbdfuse"))?;
    let file = drive.fuse_file();
    wait_for("nbdfuse's file", || {
        if let Ok(Some(status)) = child.try_wait() {
            let detail = format!("{status}: {}", log_text(drive, "nbdfuse.log"));
            return Err(EmulateError::Command { command: "nbdfuse".into(), detail });
        }
        let ready = fs::metadata(&file).is_ok_and(|m| m.len() == drive.size);
        Ok(read_pid(&pidfile).filter(|_| ready))
    })
}

/// `losetup -f` can lose a race for the free device to a concurrent
/// caller; it then fails and we try again.
fn attach_loop(drive: &EmulatedDrive) -> Result<PathBuf, EmulateError> {
    let block = drive.geometry.logical.to_string();
    let file = drive.fuse_file();
    let mut tries = 0;
    loop {
        let out = Command::new("losetup")
            .args(["-f", "--show", "-P", "--direct-io=on", "-b", &block])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .map_err(EmulateError::io("running losetup"))?;
        let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && device.starts_with("/dev/loop") {
            return Ok(PathBuf::from(device));
        }
        tries += 1;
        if tries == 10 {
            let detail = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(EmulateError::Command { command: "losetup".into(), detail });
        }
        std::thread::sleep(Duration::from_millis(50 * tries));
    }
}

/// An attribute of /sys/block/loopN/, trimmed; None when missing or blank.
fn sysfs_text(device: &Path, name: &str) -> Option<String> {
    read_text(&Path::new("/sys/block").join(device.file_name()?).join(name))
}

fn read_pid(pidfile: &Path) -> Option<i32> {
    fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

/// Polls `ready` until it yields a value, fails, or time runs out.
fn wait_for<T>(
    what: &str,
    mut ready: impl FnMut() -> Result<Option<T>, EmulateError>,
) -> Result<T, EmulateError> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = ready()? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(EmulateError::Timeout(what.to_string()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Cut {
    /// Flush, detach, unmount, then let nbdkit finish.
    Orderly,
    /// Kill nbdkit before anything else can flush.
    Power,
}

/// Takes the stack down from whatever state it is in. Every step runs even
/// if one fails; the record is only removed when all succeeded, so a
/// later `stop` can retry.
fn teardown(drive: &EmulatedDrive, cut: Cut) -> Result<(), EmulateError> {
    let mut first_error = None;
    let mut step = |result: Result<(), EmulateError>| {
        if let Err(err) = result {
            first_error.get_or_insert(err);
        }
    };
    if cut == Cut::Power {
        step(end_process(drive.nbdkit_pid, "nbdkit", Signal::KILL));
    }
    if let Some(device) = &drive.device {
        if cut == Cut::Orderly {
            flush(device);
        }
        step(detach(device, &loop_backing(drive)));
    }
    step(unmount(&drive.mount_dir()));
    step(end_process(drive.nbdfuse_pid, "nbdfuse", Signal::KILL));
    step(end_process(drive.nbdkit_pid, "nbdkit", Signal::TERM));
    match first_error {
        Some(err) => Err(err),
        None => drive.forget(),
    }
}

/// The path the kernel shows as the loop device's backing file.
fn loop_backing(drive: &EmulatedDrive) -> PathBuf {
    canonical(&drive.mount_dir()).join("disk")
}

/// True when nbdkit runs and the loop device still serves the drive.
pub fn healthy(drive: &EmulatedDrive) -> bool {
    drive.nbdkit_pid.is_some_and(|pid| is_running(pid, "nbdkit"))
        && drive.device.as_ref().is_some_and(|device| serves(device, drive))
}

/// Whether loop `device` is (still) attached to the drive's FUSE file.
fn serves(device: &Path, drive: &EmulatedDrive) -> bool {
    loop_backing_file(device).is_some_and(|file| file == loop_backing(drive))
}

fn loop_backing_file(device: &Path) -> Option<PathBuf> {
    sysfs_text(device, "loop/backing_file").map(PathBuf::from)
}

/// fsync on the device sends a flush down to nbdkit, which writes its
/// volatile cache back. A broken stack fails this; stopping goes on.
fn flush(device: &Path) {
    if let Ok(file) = fs::OpenOptions::new().write(true).open(device) {
        let _ = file.sync_all();
    }
}

/// Detaches the loop device if it still serves our file (after a crash the
/// number may belong to someone else now), then waits until it is gone.
fn detach(device: &Path, file: &Path) -> Result<(), EmulateError> {
    let backing = || loop_backing_file(device);
    if backing().as_deref() != Some(file) {
        return Ok(());
    }
    run("losetup", &[Path::new("-d"), device])?;
    wait_for("the loop device to detach", || Ok((backing().as_deref() != Some(file)).then_some(())))
}

/// Unmounts nbdfuse's mount point; lazily if it is still busy, so nothing
/// stays mounted.
fn unmount(dir: &Path) -> Result<(), EmulateError> {
    if !is_mount_point(dir) {
        return Ok(());
    }
    if run("fusermount3", &[Path::new("-u"), dir]).is_err() {
        run("umount", &[Path::new("-l"), dir])?;
    }
    Ok(())
}

/// Waits for a process to exit after `signal` (and SIGKILL if it lingers).
/// Skips pids that now belong to another program.
fn end_process(pid: Option<i32>, name: &str, signal: Signal) -> Result<(), EmulateError> {
    let Some(raw) = pid else { return Ok(()) };
    let Some(pid) = Pid::from_raw(raw) else {
        return Ok(());
    };
    if !is_running(raw, name) {
        return Ok(());
    }
    let _ = kill_process(pid, signal);
    let gone = wait_for(name, || Ok((!is_running(raw, name)).then_some(())));
    if gone.is_err() {
        let _ = kill_process(pid, Signal::KILL);
        return wait_for(name, || Ok((!is_running(raw, name)).then_some(())));
    }
    Ok(())
}

/// Alive and still `name` (zombies count as gone: only the parent can
/// reap them and they hold nothing).
fn is_running(pid: i32, name: &str) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces, so split at the last ')'.
    let Some((head, tail)) = stat.rsplit_once(')') else {
        return false;
    };
    let comm = head.split_once('(').map_or("", |(_, comm)| comm);
    comm == name && !tail.trim_start().starts_with('Z')
}

fn run(program: &str, args: &[&Path]) -> Result<(), EmulateError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(EmulateError::io(format!("running {program}")))?;
    if out.status.success() {
        return Ok(());
    }
    let command = format!(
        "{program} {}",
        args.iter().map(|a| a.display().to_string()).collect::<Vec<_>>().join(" ")
    );
    let detail = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(EmulateError::Command { command, detail })
}

/// Cleans a working directory without a usable record: unmount, remove.
fn clean_dir(dir: &Path) -> Result<(), EmulateError> {
    unmount(&dir.join("mnt"))?;
    state::remove(dir, |p| fs::remove_dir_all(p))
}

fn clean_record(id: &str) -> Result<(), EmulateError> {
    state::remove(&state::state_dir().join(format!("{id}.json")), |p| fs::remove_file(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::preset;

    fn drive(preset_name: &str, volatile_cache: bool) -> EmulatedDrive {
        EmulatedDrive {
            id: "t".into(),
            preset: preset_name.into(),
            geometry: preset(preset_name).unwrap(),
            size: 64 << 20,
            file: None,
            volatile_cache,
            fail_lba: None,
            until_written: false,
            dir: "/run/x/t".into(),
            nbdkit_command: Vec::new(),
            nbdkit_pid: None,
            nbdfuse_pid: None,
            device: None,
            reported_physical_sector_size: None,
        }
    }

    #[test]
    fn jumper_shifts_above_the_read_modify_write() {
        let args = nbdkit_command(&drive("wd-ears-jumper", true)).unwrap().join(" ");
        assert_eq!(
            args,
            "--filter=offset --filter=cache --filter=blocksize --filter=delay memory size=67112960 \
             offset=512 range=67108864 cache=writeback cache-min-block-size=4096 minblock=4096 \
             rdelay=1ms wdelay=1ms"
        );
    }

    #[test]
    fn native_drives_only_have_latency() {
        let args = nbdkit_command(&drive("native-512", false)).unwrap().join(" ");
        assert_eq!(args, "--filter=delay memory size=67108864 rdelay=1ms wdelay=1ms");
    }

    #[test]
    fn bad_sectors_use_the_eval_plugin() {
        let mut d = drive("wd-ears", false);
        d.fail_lba = Some(crate::emulate::LbaRange { first: 1000, last: 1999 });
        let args = nbdkit_command(&d).unwrap();
        assert_eq!(args[2], "eval");
        assert!(args[4].contains("-lt 1024000 ] && [ $(($4 + $3)) -gt 512000 ]"), "{}", args[4]);
        assert!(args[4].contains("'/run/x/t/platter.img'"));
    }

    #[test]
    fn failing_lbas_must_lie_inside_the_drive() {
        let g = preset("wd-ears-jumper").unwrap();
        let range = |first, last| LbaRange { first, last };
        assert_eq!(failing_bytes(range(0, 0), &g, 4096).unwrap(), (512, 1024));
        assert_eq!(failing_bytes(range(7, 7), &g, 4096).unwrap(), (4096, 4608));
        for bad in [range(8, 8), range(7, 8), range(u64::MAX, u64::MAX), range(1 << 60, 1 << 60)] {
            let err = failing_bytes(bad, &g, 4096).unwrap_err().to_string();
            assert!(err.contains("outside the drive") && err.contains("LBA 0-7"), "{err}");
        }
        let mut d = drive("wd-ears", false);
        d.fail_lba = Some(range(u64::MAX / 512, u64::MAX / 512));
        assert!(nbdkit_command(&d).is_err());
    }

    #[test]
    fn huge_sizes_are_errors_not_overflows() {
        let g = preset("wd-ears-jumper").unwrap();
        assert_eq!(platter_size(4096, &g).unwrap(), 8192);
        let top = u64::MAX / 4096 * 4096;
        for size in [top, i64::MAX as u64 / 4096 * 4096] {
            let err = platter_size(size, &g).unwrap_err().to_string();
            assert!(err.contains("too large"), "{err}");
        }
        let spec = Spec {
            preset: "wd-ears-jumper".into(),
            geometry: g,
            size: Some(top),
            file: None,
            volatile_cache: false,
            fail_lba: None,
            until_written: false,
        };
        assert!(drive_size(&spec).unwrap_err().to_string().contains("too large"));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
