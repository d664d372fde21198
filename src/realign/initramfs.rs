//! The initramfs side of a move at boot: which generator a system uses
//! (initramfs-tools on Debian and Ubuntu, dracut on Fedora, RHEL and SUSE),
//! the hook that puts blkalign and its plan into the image, and the
//! command that rebuilds it.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file name of the hook and of the boot script, in the generator's
/// configuration directory; dracut's module name.
const NAME: &str = "blkalign-at-boot";
/// dracut's modules, as the generator installed them.
const DRACUT_MODULES: &str = "/usr/lib/dracut";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Generator {
    InitramfsTools,
    Dracut,
}

impl Generator {
    /// Where the hook runs, for the dry run.
    pub fn hook_point(self) -> &'static str {
        match self {
            Generator::InitramfsTools => {
                "initramfs-tools' init-premount (after udev has found the disks, before root \
                 is mounted or LUKS opened; a volume group udev's rules activated \
                 on a partition moved is let go first and activated again after)"
            }
            Generator::Dracut => {
                "dracut's pre-udev hook (before udev, so before LVM, LUKS or md are assembled; \
                 blkalign loads the disks' drivers itself)"
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InitramfsError {
    #[error(
        "{0} has neither /etc/initramfs-tools nor dracut's configuration (/etc/dracut.conf, \
         /etc/dracut.conf.d): a move at boot needs initramfs-tools or dracut"
    )]
    NoGenerator(PathBuf),
    #[error("{0} has no kernel (boot/vmlinuz-*) to build an initramfs for")]
    NoKernel(PathBuf),
    #[error(
        "{0} has no initramfs of kernel {1} (boot/initramfs-{1}.img, initrd.img-{1} or initrd-{1})"
    )]
    NoImage(PathBuf, String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{command}` failed ({status})")]
    Rebuild { command: String, status: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InitramfsError + '_ {
    move |source| InitramfsError::Io { path: path.to_path_buf(), source }
}

/// The generator of the system rooted at `sysroot`. Debian lets dracut-core
/// sit beside initramfs-tools without building anything at kernel installs:
/// there dracut is the generator only once its kernel hook is installed,
/// and dracut itself (the hook is a conffile, left behind by a removal).
pub fn detect(sysroot: &Path) -> Result<Generator, InitramfsError> {
    let has = |p: &str| sysroot.join(p).exists();
    let tools = sysroot.join("etc/initramfs-tools").is_dir();
    let dracut = has("etc/dracut.conf") || sysroot.join("etc/dracut.conf.d").is_dir();
    let binary = ["usr/bin/dracut", "usr/sbin/dracut", "bin/dracut", "sbin/dracut"];
    let dracut_hook = binary.iter().any(|b| has(b))
        && (has("etc/kernel/postinst.d/dracut")
            || has("usr/lib/kernel/install.d/50-dracut.install"));
    match (tools, dracut) {
        (_, true) if dracut_hook || !tools => Ok(Generator::Dracut),
        (true, _) => Ok(Generator::InitramfsTools),
        _ => Err(InitramfsError::NoGenerator(sysroot.to_path_buf())),
    }
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

/// The files of the hook under `sysroot`.
fn files(sysroot: &Path, generator: Generator) -> Vec<PathBuf> {
    match generator {
        Generator::InitramfsTools => {
            let conf = sysroot.join("etc/initramfs-tools");
            vec![conf.join("hooks").join(NAME), conf.join("scripts/init-premount").join(NAME)]
        }
        Generator::Dracut => {
            let module = dracut_module(sysroot);
            vec![
                module.join("module-setup.sh"),
                module.join(format!("{NAME}.sh")),
                sysroot.join(format!("etc/dracut.conf.d/90-{NAME}.conf")),
            ]
        }
    }
}

fn dracut_module(sysroot: &Path) -> PathBuf {
    let modules = DRACUT_MODULES.trim_start_matches('/');
    sysroot.join(modules).join("modules.d").join(format!("90{NAME}"))
}

/// Install the hook (copies blkalign and the plan into the image) and the
/// boot script that runs the move: initramfs-tools' init-premount, after
/// udev has found the disks (and its rules activated LVM on them: the move
/// lets go of those mappings) and before local-top opens LUKS. dracut's
/// pre-udev, before udev starts: under dracut's systemd a
/// partition the move re-adds at its new start must not have been seen
/// (its device going away fails the root mount waiting on it), and LVM,
/// LUKS and md are assembled from udev events. There blkalign loads the
/// drivers itself (`--coldplug`); udev's coldplug then sees the new table.
pub fn install(sysroot: &Path, generator: Generator, hook: &Hook) -> Result<(), InitramfsError> {
    let modules = hook.modules.join(" ");
    let (binary, plan) = (quote(hook.binary), quote(hook.plan));
    let run = |more: &str| {
        format!(
            "/sbin/blkalign realign --at-boot-run /etc/blkalign/at-boot.json{more}\n\
             case $? in\n\
             0 | 1) ;;\n"
        )
    };
    let stopped = "the partition move stopped; the commands above finish or undo it";
    let texts = match generator {
        Generator::InitramfsTools => vec![
            format!(
                "#!/bin/sh\n{HEADER}{PREREQS}. /usr/share/initramfs-tools/hook-functions\n\
                 copy_exec {binary} /sbin/blkalign\n\
                 mkdir -p \"$DESTDIR/etc/blkalign\"\n\
                 cp {plan} \"$DESTDIR/etc/blkalign/at-boot.json\"\n\
                 manual_add_modules {modules}\n"
            ),
            format!(
                "#!/bin/sh\n{HEADER}{PREREQS}. /scripts/functions\n\
                 for m in {modules}; do modprobe -q \"$m\" || true; done\n\
                 {}*) panic \"blkalign: {stopped}\" ;;\nesac\n",
                run("")
            ),
        ],
        Generator::Dracut => vec![
            format!(
                "#!/bin/bash\n{HEADER}check() {{ return 255; }}\n\
                 depends() {{ return 0; }}\n\
                 installkernel() {{ hostonly='' instmods {modules}; }}\n\
                 install() {{\n    inst_binary {binary} /sbin/blkalign\n    \
                 inst_simple {plan} /etc/blkalign/at-boot.json\n    \
                 inst_hook pre-udev 00 \"$moddir/{NAME}.sh\"\n}}\n"
            ),
            // Sourced by dracut-pre-udev: no exit. The emergency shell
            // returns to the boot when the user leaves it.
            format!(
                "#!/bin/sh\n{HEADER}{BLACKLIST}\
                 for m in {modules}; do modprobe -q \"$m\" || true; done\n\
                 {}*) emergency_shell -n blkalign \"{stopped}\" ;;\nesac\n",
                run(" --coldplug")
            ),
            format!("{HEADER}add_dracutmodules+=\" {NAME} \"\n"),
        ],
    };
    for (file, text) in files(sysroot, generator).iter().zip(texts) {
        write_script(file, &text)?;
    }
    Ok(())
}

const HEADER: &str = "# Installed by `blkalign realign --at-boot`: moves a partition at the next\n\
# boot; `blkalign realign --at-boot --finish` removes it once done.\n";
/// dracut applies `rd.driver.blacklist=` (and holds back `rd.driver.post=`)
/// only after the pre-udev hooks: the drivers blkalign loads (`modprobe
/// -b`) must honour them already.
const BLACKLIST: &str = "mkdir -p /etc/modprobe.d\n\
for _blkalign_arg in $(getargs rd.driver.blacklist -d rdblacklist=) \\\n    \
$(getargs rd.driver.post -d rdinsmodpost=); do\n    \
(IFS=,; for _blkalign_p in $_blkalign_arg; do echo \"blacklist $_blkalign_p\"; done)\n\
done >>/etc/modprobe.d/blkalign-at-boot.conf\n\
unset _blkalign_arg\n";
const PREREQS: &str = "PREREQ=\"\"\n\
prereqs() { echo \"$PREREQ\"; }\n\
case \"$1\" in prereqs) prereqs; exit 0 ;; esac\n";

/// Remove the hook, whichever generator's; true if there was any.
pub fn remove(sysroot: &Path) -> Result<bool, InitramfsError> {
    let mut any = false;
    for generator in [Generator::InitramfsTools, Generator::Dracut] {
        for file in files(sysroot, generator) {
            match fs::remove_file(&file) {
                Ok(()) => any = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&file)(e)),
            }
        }
    }
    let module = dracut_module(sysroot);
    match fs::remove_dir(&module) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&module)(e)),
        _ => Ok(any),
    }
}

/// Whether the hook is installed, whichever generator's.
pub fn installed(sysroot: &Path) -> bool {
    [Generator::InitramfsTools, Generator::Dracut]
        .into_iter()
        .any(|g| files(sysroot, g).iter().any(|f| f.exists()))
}

/// Rebuild the initramfs of `kernel`. The running system's: with
/// `update-initramfs -u -k`, or dracut with the system's configuration.
/// Another root's: the same generator on that root's configuration (and,
/// for dracut, its modules beside the host's), written to its /boot. The
/// old image is replaced only by a whole new one (a new file, synced,
/// renamed over it), as update-initramfs does and dracut does not: a power
/// cut mid-build must leave a bootable image.
pub fn rebuild(
    sysroot: &Path,
    generator: Generator,
    kernel: &str,
) -> Result<String, InitramfsError> {
    let host = sysroot == Path::new("/");
    match generator {
        Generator::InitramfsTools if host => {
            let mut c = Command::new("update-initramfs");
            c.args(["-u", "-k", kernel]);
            run(c)
        }
        Generator::InitramfsTools => {
            let image = sysroot.join("boot").join(format!("initrd.img-{kernel}"));
            replace(&image, |new| {
                let mut c = Command::new("mkinitramfs");
                c.arg("-d").arg(sysroot.join("etc/initramfs-tools"));
                c.arg("-o").arg(new).arg(kernel);
                c
            })
        }
        Generator::Dracut => {
            let image = dracut_image(sysroot, kernel)?;
            let modules = Path::new(DRACUT_MODULES);
            let base = if host { None } else { Some(module_base(sysroot, modules)?) };
            replace(&image, |new| {
                let mut c = Command::new("dracut");
                c.args(["--force", "--quiet"]);
                if let Some(base) = &base {
                    // dracut refuses a --conf that does not exist; the root
                    // may keep its configuration in dracut.conf.d alone.
                    let conf = sysroot.join("etc/dracut.conf");
                    let conf = if conf.exists() { conf } else { PathBuf::from("/dev/null") };
                    c.env("dracutbasedir", base.path());
                    c.arg("--conf").arg(conf);
                    c.arg("--confdir").arg(sysroot.join("etc/dracut.conf.d"));
                }
                c.arg(new).arg(kernel);
                c
            })
        }
    }
}

/// Build `image` anew with the command `build` gives for the new file's
/// path, then put it in place.
fn replace(image: &Path, build: impl FnOnce(&Path) -> Command) -> Result<String, InitramfsError> {
    let mut name = image.file_name().unwrap_or_default().to_os_string();
    name.push(".new");
    let new = image.with_file_name(name);
    let command = run(build(&new)).inspect_err(|_| {
        let _ = fs::remove_file(&new);
    })?;
    fs::File::open(&new).and_then(|f| f.sync_all()).map_err(io(&new))?;
    fs::rename(&new, image).map_err(io(image))?;
    crate::device::exclusive::sync_parent(image).map_err(io(image))?;
    Ok(command)
}

/// The image of `kernel` that `generator` rebuilds; for dracut, found
/// before anything is written (a system without one is refused then).
pub fn image(
    sysroot: &Path,
    generator: Generator,
    kernel: &str,
) -> Result<PathBuf, InitramfsError> {
    match generator {
        Generator::InitramfsTools => Ok(sysroot.join("boot").join(format!("initrd.img-{kernel}"))),
        Generator::Dracut => dracut_image(sysroot, kernel),
    }
}

/// The image dracut built for `kernel`, by the names distributions give
/// it (Fedora and RHEL, Debian, SUSE); of several, the newest: the one the
/// kernel hook wrote last, not one a former generator left behind.
fn dracut_image(sysroot: &Path, kernel: &str) -> Result<PathBuf, InitramfsError> {
    let boot = sysroot.join("boot");
    [format!("initramfs-{kernel}.img"), format!("initrd.img-{kernel}"), format!("initrd-{kernel}")]
        .into_iter()
        .map(|name| boot.join(name))
        .filter_map(|p| Some((fs::metadata(&p).ok().filter(|m| m.is_file())?.modified().ok()?, p)))
        .max_by_key(|(when, _)| *when)
        .map(|(_, p)| p)
        .ok_or_else(|| InitramfsError::NoImage(sysroot.to_path_buf(), kernel.to_string()))
}

/// dracut reads its modules from one directory: for another root, a
/// directory of links to the host's (`host`), with that root's blkalign
/// module.
fn module_base(sysroot: &Path, host: &Path) -> Result<tempfile::TempDir, InitramfsError> {
    let base = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    let modules = base.path().join("modules.d");
    fs::create_dir(&modules).map_err(io(&modules))?;
    let link = |from: &Path, to: &Path| std::os::unix::fs::symlink(from, to).map_err(io(to));
    let ours = dracut_module(sysroot);
    if ours.is_dir() {
        link(&ours, &modules.join(format!("90{NAME}")))?;
    }
    // The root's distribution defaults, where it has them, not the host's.
    let defaults = ours.parent().and_then(Path::parent).map(|d| d.join("dracut.conf.d"));
    if let Some(defaults) = defaults.filter(|d| d.is_dir()) {
        link(&defaults, &base.path().join("dracut.conf.d"))?;
    }
    for (dir, into) in [(host.to_path_buf(), base.path()), (host.join("modules.d"), &*modules)] {
        for entry in fs::read_dir(&dir).map_err(io(&dir))?.flatten() {
            let to = into.join(entry.file_name());
            if entry.file_name() != "modules.d" && fs::symlink_metadata(&to).is_err() {
                link(&entry.path(), &to)?;
            }
        }
    }
    Ok(base)
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

    fn hook() -> Hook<'static> {
        Hook {
            binary: Path::new("/usr/sbin/blk'align"),
            plan: Path::new("/var/lib/blkalign/at-boot.json"),
            modules: &["ext4"],
        }
    }

    #[test]
    fn the_hook_goes_in_and_out_and_sh_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(detect(dir.path()), Err(InitramfsError::NoGenerator(_))));
        fs::create_dir_all(dir.path().join("etc/initramfs-tools")).unwrap();
        assert_eq!(detect(dir.path()).unwrap(), Generator::InitramfsTools);
        install(dir.path(), Generator::InitramfsTools, &hook()).unwrap();
        assert!(installed(dir.path()));
        for file in files(dir.path(), Generator::InitramfsTools) {
            let ok = Command::new("sh").arg("-n").arg(&file).status().unwrap().success();
            assert!(ok, "{}", fs::read_to_string(&file).unwrap());
            let out = Command::new("sh").arg(&file).arg("prereqs").output().unwrap();
            assert!(out.status.success() && out.stdout == b"\n", "{out:?}");
        }
        let text = fs::read_to_string(&files(dir.path(), Generator::InitramfsTools)[0]).unwrap();
        assert!(text.contains(r"copy_exec '/usr/sbin/blk'\''align' /sbin/blkalign"), "{text}");
        assert!(remove(dir.path()).unwrap());
        assert!(!installed(dir.path()) && !remove(dir.path()).unwrap());
    }

    #[test]
    fn dracut_is_the_generator_where_it_builds_the_images() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("etc/dracut.conf.d")).unwrap();
        assert_eq!(detect(root).unwrap(), Generator::Dracut, "Fedora: dracut alone");
        fs::create_dir_all(root.join("etc/initramfs-tools")).unwrap();
        assert_eq!(detect(root).unwrap(), Generator::InitramfsTools, "Debian with dracut-core");
        fs::create_dir_all(root.join("etc/kernel/postinst.d")).unwrap();
        fs::write(root.join("etc/kernel/postinst.d/dracut"), "").unwrap();
        assert_eq!(detect(root).unwrap(), Generator::InitramfsTools, "its hook left behind");
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/dracut"), "").unwrap();
        assert_eq!(detect(root).unwrap(), Generator::Dracut, "Debian's dracut package");
    }

    #[test]
    fn the_dracut_module_goes_in_and_out_and_its_shells_read_it() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), Generator::Dracut, &hook()).unwrap();
        assert!(installed(dir.path()));
        let [setup, script, conf] =
            <[PathBuf; 3]>::try_from(files(dir.path(), Generator::Dracut)).unwrap();
        for (shell, file) in [("bash", &setup), ("sh", &script), ("bash", &conf)] {
            let ok = Command::new(shell).arg("-n").arg(file).status().unwrap().success();
            assert!(ok, "{}", fs::read_to_string(file).unwrap());
        }
        let text = fs::read_to_string(&setup).unwrap();
        assert!(text.contains(r"inst_binary '/usr/sbin/blk'\''align' /sbin/blkalign"), "{text}");
        assert!(text.contains("inst_hook pre-udev 00"), "{text}");
        let run = fs::read_to_string(&script).unwrap();
        assert!(run.contains("at-boot.json --coldplug\n"), "{run}");
        assert!(run.contains("\nfor m in ext4; do modprobe"), "{run}");
        // The blacklist as dracut-lib's getargs gives it, run by sh.
        let getargs = "getargs() { case $1 in rd.driver.blacklist) echo nouveau,radeon \
                       floppy ;; rd.driver.post) echo i915 ;; esac; }";
        let etc = dir.path().join("etc");
        let snippet = BLACKLIST.replace("/etc/", &format!("{}/", etc.display()));
        let ok =
            Command::new("sh").arg("-c").arg(format!("{getargs}\n{snippet}")).status().unwrap();
        assert!(ok.success());
        let listed = fs::read_to_string(etc.join("modprobe.d/blkalign-at-boot.conf")).unwrap();
        let want = "blacklist nouveau\nblacklist radeon\nblacklist floppy\nblacklist i915\n";
        assert_eq!(listed, want);
        let conf_text = fs::read_to_string(&conf).unwrap();
        assert!(conf_text.contains("add_dracutmodules+=\" blkalign-at-boot \""), "{conf_text}");
        let host = tempfile::tempdir().unwrap();
        fs::create_dir_all(host.path().join("modules.d/99base")).unwrap();
        fs::write(host.path().join("dracut-init.sh"), "").unwrap();
        let base = module_base(dir.path(), host.path()).unwrap();
        assert!(base.path().join("modules.d/99base").is_dir());
        assert!(base.path().join("dracut-init.sh").is_file());
        let linked = base.path().join("modules.d/90blkalign-at-boot/module-setup.sh");
        assert_eq!(fs::read_to_string(linked).unwrap(), text);
        assert!(remove(dir.path()).unwrap());
        assert!(!installed(dir.path()) && !dracut_module(dir.path()).exists());
    }

    #[test]
    fn dracut_images_are_found_by_each_distribution_s_name() {
        let dir = tempfile::tempdir().unwrap();
        let boot = dir.path().join("boot");
        fs::create_dir(&boot).unwrap();
        let v = "6.1.0-56-amd64";
        assert!(matches!(dracut_image(dir.path(), v), Err(InitramfsError::NoImage(..))));
        let names =
            [format!("initramfs-{v}.img"), format!("initrd.img-{v}"), format!("initrd-{v}")];
        for (age, name) in names.iter().enumerate() {
            let file = fs::File::create(boot.join(name)).unwrap();
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000 * age as u64);
            file.set_modified(when).unwrap();
            assert_eq!(dracut_image(dir.path(), v).unwrap(), boot.join(name), "the newest");
        }
    }
}
