//! The initramfs side of a move at boot: which generator a system uses,
//! the hook that puts blkalign and its plan into the image, and the
//! command that rebuilds it. initramfs-tools (Debian, Ubuntu) only:
//! dracut systems are refused by name.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file name of the hook and of the boot script, in the generator's
/// configuration directory.
const NAME: &str = "blkalign-at-boot";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Generator {
    InitramfsTools,
}

#[derive(Debug, thiserror::Error)]
pub enum InitramfsError {
    #[error(
        "{0} has no /etc/initramfs-tools: a move at boot needs initramfs-tools (dracut systems \
         are not supported yet)"
    )]
    NoGenerator(PathBuf),
    #[error("{0} has no kernel (boot/vmlinuz-*) to build an initramfs for")]
    NoKernel(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{command}` failed ({status})")]
    Rebuild { command: String, status: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InitramfsError + '_ {
    move |source| InitramfsError::Io { path: path.to_path_buf(), source }
}

/// The generator of the system rooted at `sysroot`.
pub fn detect(sysroot: &Path) -> Result<Generator, InitramfsError> {
    let conf = sysroot.join("etc/initramfs-tools");
    if conf.is_dir() {
        return Ok(Generator::InitramfsTools);
    }
    Err(InitramfsError::NoGenerator(sysroot.to_path_buf()))
}

/// The kernel that boots next: the newest in /boot, as GRUB's default
/// entry and Debian's /vmlinuz link pick it.
pub fn next_kernel(sysroot: &Path) -> Result<String, InitramfsError> {
    let boot = sysroot.join("boot");
    let mut versions: Vec<String> = fs::read_dir(&boot)
        .map_err(io(&boot))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("vmlinuz-").map(str::to_string))
        .collect();
    versions.sort_by_key(|v| version_key(v));
    versions.pop().ok_or_else(|| InitramfsError::NoKernel(sysroot.to_path_buf()))
}

/// "6.1.0-56-amd64" → [6, 1, 0, 56]: numeric runs compared as numbers.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect()
}

/// What the hook needs to know, fixed when the move is scheduled.
pub struct Hook<'a> {
    /// The blkalign binary copied into the image.
    pub binary: &'a Path,
    /// The plan copied into the image as /etc/blkalign/at-boot.json.
    pub plan: &'a Path,
    /// Kernel modules the boot script loads: the journal's file system.
    pub modules: &'a [&'a str],
}

/// The hook file and the boot script under `sysroot`'s configuration.
fn files(sysroot: &Path) -> [PathBuf; 2] {
    let conf = sysroot.join("etc/initramfs-tools");
    [conf.join("hooks").join(NAME), conf.join("scripts/init-premount").join(NAME)]
}

/// Install the hook (copies blkalign and the plan into the image) and the
/// boot script. init-premount runs after udev has found the disks and
/// before local-top assembles LVM, LUKS or md on them.
pub fn install(sysroot: &Path, hook: &Hook) -> Result<(), InitramfsError> {
    let [hook_file, script] = files(sysroot);
    let modules = hook.modules.join(" ");
    let copy = format!(
        "{HEADER}. /usr/share/initramfs-tools/hook-functions\n\
         copy_exec {} /sbin/blkalign\n\
         mkdir -p \"$DESTDIR/etc/blkalign\"\n\
         cp {} \"$DESTDIR/etc/blkalign/at-boot.json\"\n\
         manual_add_modules {modules}\n",
        quote(hook.binary),
        quote(hook.plan)
    );
    let run = format!(
        "{HEADER}. /scripts/functions\n\
         for m in {modules}; do modprobe -q \"$m\" || true; done\n\
         /sbin/blkalign realign --at-boot-run /etc/blkalign/at-boot.json\n\
         case $? in\n\
         0 | 1) ;;\n\
         *) panic \"blkalign: the partition move stopped; the commands above finish or undo it\" ;;\n\
         esac\n"
    );
    write_script(&hook_file, &copy)?;
    write_script(&script, &run)
}

const HEADER: &str = "#!/bin/sh\n\
# Installed by `blkalign realign --at-boot`: moves a partition at the next\n\
# boot; `blkalign realign --at-boot --finish` removes it once done.\n\
PREREQ=\"\"\n\
prereqs() { echo \"$PREREQ\"; }\n\
case \"$1\" in prereqs) prereqs; exit 0 ;; esac\n";

/// Remove the hook and the boot script; true if there were any.
pub fn remove(sysroot: &Path) -> Result<bool, InitramfsError> {
    let mut any = false;
    for file in files(sysroot) {
        match fs::remove_file(&file) {
            Ok(()) => any = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&file)(e)),
        }
    }
    Ok(any)
}

/// Whether the hook is installed.
pub fn installed(sysroot: &Path) -> bool {
    files(sysroot).iter().any(|f| f.exists())
}

/// Rebuild the initramfs of `kernel`: `update-initramfs -u -k` on the
/// running system; for another root, the same generator on that root's
/// configuration (`mkinitramfs -d`), written to its /boot. Either way the
/// old image is replaced only by a whole new one, as update-initramfs
/// does (a new file, synced, renamed over it): a power cut mid-build must
/// leave a bootable image.
pub fn rebuild(sysroot: &Path, kernel: &str) -> Result<String, InitramfsError> {
    if sysroot == Path::new("/") {
        let mut c = Command::new("update-initramfs");
        c.args(["-u", "-k", kernel]);
        return run(c);
    }
    let image = sysroot.join("boot").join(format!("initrd.img-{kernel}"));
    let new = sysroot.join("boot").join(format!("initrd.img-{kernel}.new"));
    let mut c = Command::new("mkinitramfs");
    c.arg("-d").arg(sysroot.join("etc/initramfs-tools"));
    c.arg("-o").arg(&new);
    c.arg(kernel);
    let command = run(c).inspect_err(|_| {
        let _ = fs::remove_file(&new);
    })?;
    fs::File::open(&new).and_then(|f| f.sync_all()).map_err(io(&new))?;
    fs::rename(&new, &image).map_err(io(&image))?;
    crate::device::exclusive::sync_parent(&image).map_err(io(&image))?;
    Ok(command)
}

/// Run a tool: the command as run, or its exit status and message.
pub(crate) fn run(mut cmd: Command) -> Result<String, InitramfsError> {
    let command = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .output()
        .map_err(|e| InitramfsError::Rebuild { command: command.clone(), status: e.to_string() })?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(InitramfsError::Rebuild { command, status: format!("{}: {why}", out.status) });
    }
    Ok(command)
}

fn write_script(path: &Path, text: &str) -> Result<(), InitramfsError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut f = fs::File::create(path).map_err(io(path))?;
    f.write_all(text.as_bytes()).map_err(io(path))?;
    f.set_permissions(fs::Permissions::from_mode(0o755)).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// `path` quoted for sh.
fn quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_kernel_boots_next() {
        let dir = tempfile::tempdir().unwrap();
        let boot = dir.path().join("boot");
        fs::create_dir(&boot).unwrap();
        for v in ["6.1.0-9-amd64", "6.1.0-56-amd64", "5.10.0-30-amd64"] {
            fs::write(boot.join(format!("vmlinuz-{v}")), "").unwrap();
        }
        assert_eq!(next_kernel(dir.path()).unwrap(), "6.1.0-56-amd64");
        fs::remove_dir_all(&boot).unwrap();
        fs::create_dir(&boot).unwrap();
        assert!(matches!(next_kernel(dir.path()), Err(InitramfsError::NoKernel(_))));
    }

    #[test]
    fn the_hook_goes_in_and_out_and_sh_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(detect(dir.path()), Err(InitramfsError::NoGenerator(_))));
        fs::create_dir_all(dir.path().join("etc/initramfs-tools")).unwrap();
        assert_eq!(detect(dir.path()).unwrap(), Generator::InitramfsTools);
        let hook = Hook {
            binary: Path::new("/usr/sbin/blk'align"),
            plan: Path::new("/var/lib/blkalign/at-boot.json"),
            modules: &["ext4"],
        };
        install(dir.path(), &hook).unwrap();
        assert!(installed(dir.path()));
        for file in files(dir.path()) {
            let ok = Command::new("sh").arg("-n").arg(&file).status().unwrap().success();
            assert!(ok, "{}", fs::read_to_string(&file).unwrap());
            let out = Command::new("sh").arg(&file).arg("prereqs").output().unwrap();
            assert!(out.status.success() && out.stdout == b"\n", "{out:?}");
        }
        let text = fs::read_to_string(&files(dir.path())[0]).unwrap();
        assert!(text.contains(r"copy_exec '/usr/sbin/blk'\''align' /sbin/blkalign"), "{text}");
        assert!(remove(dir.path()).unwrap());
        assert!(!installed(dir.path()) && !remove(dir.path()).unwrap());
    }
}
