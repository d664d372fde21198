//! GRUB (BIOS) during a move at boot. Mid-move the partition being moved
//! holds no whole file system at either place, so a GRUB that reads /boot
//! from it could not load the kernel after a power cut. While a move is
//! scheduled, GRUB is installed (`grub-install --boot-directory`) onto the
//! journal's file system instead, with a copy of the kernel and of the
//! initramfs that carries the move; once the move is finished, GRUB is
//! installed back to /boot.

use super::initramfs::{run, InitramfsError};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InitramfsError + '_ {
    move |source| InitramfsError::Io { path: path.to_path_buf(), source }
}

/// Whether GRUB's boot.img is in the MBR `sector`.
pub fn in_mbr(sector: &[u8]) -> bool {
    sector.get(..440).is_some_and(|code| code.windows(4).any(|w| w == b"GRUB"))
}

/// The kernel command line GRUB boots the system with: the first `linux`
/// line of SYSROOT/boot/grub/grub.cfg (its default entry as Debian writes
/// it), else this kernel's (/proc/cmdline) for the running system.
pub fn cmdline(sysroot: &Path) -> Option<String> {
    let cfg = fs::read_to_string(sysroot.join("boot/grub/grub.cfg")).unwrap_or_default();
    let from_cfg = cfg.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some("linux")).then(|| words.skip(1).collect::<Vec<_>>().join(" "))
    });
    from_cfg.or_else(|| {
        let own = fs::read_to_string("/proc/cmdline").ok()?;
        let kept: Vec<&str> = own
            .split_whitespace()
            .filter(|w| !w.starts_with("BOOT_IMAGE=") && !w.starts_with("initrd="))
            .collect();
        (sysroot == Path::new("/")).then(|| kept.join(" "))
    })
}

/// GRUB, booting `kernel` with `cmdline` from `dir` (DIR/ at the root of
/// the file system with `uuid`, of type `fstype`), installed on `disk`.
pub struct Redirect<'a> {
    pub sysroot: &'a Path,
    pub disk: &'a Path,
    pub dir: &'a Path,
    pub uuid: &'a str,
    pub fstype: &'a str,
    pub gpt: bool,
    pub kernel: &'a str,
    pub cmdline: &'a str,
}

/// The kernel and initramfs copies, and GRUB's files, in the journal's
/// directory.
fn files(dir: &Path, kernel: &str) -> [PathBuf; 3] {
    [
        dir.join(format!("vmlinuz-{kernel}")),
        dir.join(format!("initrd.img-{kernel}")),
        dir.join("grub"),
    ]
}

/// Install GRUB onto the journal's file system: the kernel and initramfs
/// copied and synced, the configuration written, then `grub-install`
/// (which writes the MBR last). Returns the command run.
pub fn redirect(r: &Redirect) -> Result<String, InitramfsError> {
    let [vmlinuz, initrd, grub] = files(r.dir, r.kernel);
    let boot = r.sysroot.join("boot");
    for (from, to) in [
        (boot.join(format!("vmlinuz-{}", r.kernel)), &vmlinuz),
        (boot.join(format!("initrd.img-{}", r.kernel)), &initrd),
    ] {
        fs::copy(&from, to).map_err(io(&from))?;
        fs::File::open(to).and_then(|f| f.sync_all()).map_err(io(to))?;
    }
    let name = r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let fs_module = match r.fstype {
        "vfat" => "fat",
        "xfs" => "xfs",
        "btrfs" => "btrfs",
        _ => "ext2",
    };
    let label = if r.gpt { "part_gpt" } else { "part_msdos" };
    let mut cmd = Command::new("grub-install");
    cmd.args(["--target=i386-pc", "--no-floppy"]).arg("--boot-directory").arg(r.dir);
    cmd.arg(format!("--modules={label} {fs_module} biosdisk search_fs_uuid")).arg(r.disk);
    let cfg = format!(
        "# Written by `blkalign realign --at-boot`: boots the kernel that moves\n\
         # the partitions, from here, until `blkalign realign --at-boot --finish`\n\
         # installs GRUB back to /boot.\n\
         set timeout=0\n\
         search --no-floppy --fs-uuid --set=root {uuid}\n\
         linux /{name}/vmlinuz-{kernel} {cmdline}\n\
         initrd /{name}/initrd.img-{kernel}\n\
         boot\n",
        uuid = r.uuid,
        kernel = r.kernel,
        cmdline = r.cmdline
    );
    fs::create_dir_all(&grub).map_err(io(&grub))?;
    let cfg_path = grub.join("grub.cfg");
    fs::write(&cfg_path, cfg)
        .and_then(|()| fs::File::open(&cfg_path)?.sync_all())
        .map_err(io(&cfg_path))?;
    run(cmd)
}

/// Install GRUB back to SYSROOT/boot on `disk`, then remove the copies
/// from the journal's directory `dir`.
pub fn restore(
    sysroot: &Path,
    disk: &Path,
    dir: &Path,
    kernel: &str,
) -> Result<String, InitramfsError> {
    let mut cmd = Command::new("grub-install");
    cmd.args(["--target=i386-pc", "--no-floppy"]).arg("--boot-directory").arg(sysroot.join("boot"));
    cmd.arg(disk);
    let command = run(cmd)?;
    let [vmlinuz, initrd, grub] = files(dir, kernel);
    for file in [vmlinuz, initrd] {
        match fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&file)(e)),
            _ => {}
        }
    }
    if grub.exists() {
        fs::remove_dir_all(&grub).map_err(io(&grub))?;
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_grubs_first_linux_line() {
        let dir = tempfile::tempdir().unwrap();
        let grub = dir.path().join("boot/grub");
        fs::create_dir_all(&grub).unwrap();
        let cfg = "menuentry 'Debian' {\n\tload_video\n\tlinux\t/boot/vmlinuz-6.1.0 root=UUID=ab ro  quiet\n\tinitrd /boot/initrd.img\n}\nmenuentry 'old' {\n\tlinux /boot/vmlinuz-5 root=/dev/sda1\n}\n";
        fs::write(grub.join("grub.cfg"), cfg).unwrap();
        assert_eq!(cmdline(dir.path()).as_deref(), Some("root=UUID=ab ro quiet"));
        fs::remove_file(grub.join("grub.cfg")).unwrap();
        assert_eq!(cmdline(dir.path()), None, "another root's command line is not this kernel's");
    }

    #[test]
    fn grub_is_recognised_in_the_mbr() {
        let mut mbr = vec![0u8; 512];
        assert!(!in_mbr(&mbr));
        mbr[0x180..0x184].copy_from_slice(b"GRUB");
        assert!(in_mbr(&mbr));
    }
}
