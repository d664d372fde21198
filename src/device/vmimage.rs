//! Virtual-machine disk images (qcow2, VMDK, VHD, VHDX, VDI, QED): found by
//! their headers, never read as raw, and read through QEMU's own format
//! drivers, exported by qemu-storage-daemon as a FUSE file that holds the
//! guest's virtual disk. QEMU reads every format it writes, follows backing
//! chains and takes the image lock a running VM holds; a reader of our own
//! would do each of those worse (docs/vm-images.md).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An image format QEMU reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// `encryption` names its encryption ("AES", "LUKS") when it has one.
    Qcow2 {
        encryption: Option<&'static str>,
    },
    Qed,
    Vmdk,
    Vhd,
    Vhdx,
    Vdi,
}

impl ImageFormat {
    /// As users and qemu-img name it.
    pub fn name(&self) -> &'static str {
        match self {
            ImageFormat::Qcow2 { .. } => "qcow2",
            ImageFormat::Qed => "qed",
            ImageFormat::Vmdk => "vmdk",
            ImageFormat::Vhd => "vhd",
            ImageFormat::Vhdx => "vhdx",
            ImageFormat::Vdi => "vdi",
        }
    }

    /// QEMU's block driver for it.
    fn driver(&self) -> &'static str {
        match self {
            ImageFormat::Vhd => "vpc",
            other => other.name(),
        }
    }
}

/// The format of the image file `file` of `len` bytes, by its header (or
/// a VHD's footer); None for a raw image.
pub fn detect(file: &File, len: u64) -> Option<ImageFormat> {
    let mut head = [0u8; 512];
    let got = file.read_at(&mut head, 0).ok()?;
    let head = &head[..got];
    let be32 = |at: usize| Some(u32::from_be_bytes(head.get(at..at + 4)?.try_into().ok()?));
    let le32 = |at: usize| Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?));
    if head.starts_with(b"QFI\xfb") {
        let encryption = match be32(32) {
            Some(0) | None => None,
            Some(1) => Some("AES"),
            Some(2) => Some("LUKS"),
            Some(_) => Some("an unknown method"),
        };
        return Some(ImageFormat::Qcow2 { encryption });
    }
    if head.starts_with(b"QED\0") {
        return Some(ImageFormat::Qed);
    }
    if head.starts_with(b"KDMV") || head.starts_with(b"# Disk DescriptorFile") {
        return Some(ImageFormat::Vmdk);
    }
    if head.starts_with(b"vhdxfile") {
        return Some(ImageFormat::Vhdx);
    }
    if le32(64) == Some(0xbeda_107f) {
        return Some(ImageFormat::Vdi);
    }
    // A dynamic VHD starts with a copy of its footer; a fixed one has it
    // only in its last sector.
    if head.starts_with(b"conectix") {
        return Some(ImageFormat::Vhd);
    }
    let mut tail = [0u8; 8];
    let at = len.checked_sub(512)?;
    file.read_exact_at(&mut tail, at).ok()?;
    (&tail == b"conectix").then_some(ImageFormat::Vhd)
}

/// Why an image could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{}: an encrypted {} image ({encryption}): blkalign cannot read it without its key", path.display(), format.name())]
    Encrypted { path: PathBuf, format: ImageFormat, encryption: &'static str },
    #[error("reading a {format} image needs qemu-storage-daemon (Debian: qemu-system-common; or `qemu-img convert -O raw` it first)")]
    Missing { format: &'static str },
    #[error("{}: qemu-storage-daemon could not open it as {format}: {detail}", path.display())]
    Failed { path: PathBuf, format: &'static str, detail: String },
    #[error("exporting {}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
}

/// How an export may use its image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read-only; a running VM's lock makes the export fail, naming it.
    Read,
    /// Read-only past a running VM's lock (a running guest audited on
    /// purpose).
    ReadShared,
    /// Read-write, holding QEMU's write lock so no VM starts on it
    /// meanwhile. Written zeros become unallocated clusters, so a move
    /// grows the image only by the data it lands on new clusters.
    Write,
}

/// The guest's virtual disk of a VM image as a file, for as long as this
/// lives: qemu-storage-daemon serving it on a FUSE mount over `file`.
pub(crate) struct Export {
    file: PathBuf,
    child: Option<std::process::Child>,
    /// Holds the mount point; removed after the daemon is gone.
    _dir: tempfile::TempDir,
}

impl Export {
    /// Export `image` in `format` for `access`. A running VM's lock on the
    /// image makes this fail, naming the VM, unless reading shared.
    pub fn start(
        image: &Path,
        format: &ImageFormat,
        access: Access,
    ) -> Result<Export, ExportError> {
        if let ImageFormat::Qcow2 { encryption: Some(encryption) } = format {
            let (path, format) = (image.to_path_buf(), format.clone());
            return Err(ExportError::Encrypted { path, format, encryption });
        }
        let io = |error| ExportError::Io { path: image.to_path_buf(), error };
        let canonical = std::fs::canonicalize(image).map_err(io)?;
        let dir = tempfile::Builder::new().prefix("blkalign-image-").tempdir().map_err(io)?;
        let file = dir.path().join("disk");
        File::create(&file).map_err(io)?;
        let log = dir.path().join("qsd.log");
        let mut daemon = Command::new("qemu-storage-daemon");
        daemon
            .args(daemon_args(&canonical, format, access, &file))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).map_err(io)?);
        // SAFETY: prctl is async-signal-safe. Dying with us (even killed
        // with SIGKILL) makes the daemon flush, unmount and drop the image
        // lock, so a rerun is not refused by our own leftover.
        unsafe {
            daemon.pre_exec(|| match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        let child = daemon.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ExportError::Missing { format: format.name() },
            _ => io(e),
        })?;
        let mut export = Export { file, child: Some(child), _dir: dir };
        if export.wait_mounted().map_err(io)? {
            return Ok(export);
        }
        let mut detail =
            std::fs::read_to_string(&log).unwrap_or_default().trim().replace('\n', " ");
        if detail.contains("lock") {
            detail += &super::exclusive::holders(&canonical);
            detail += match access {
                Access::Write => "; shut the VM down first",
                _ => {
                    "; a running VM's image is audited once it is shut down, or with \
                     --domain while it runs"
                }
            };
        }
        let path = image.to_path_buf();
        Err(ExportError::Failed { path, format: format.name(), detail })
    }

    /// Wait until the export is mounted (true) or the daemon has exited
    /// (false); a daemon neither mounted nor gone in 30 s is stopped.
    fn wait_mounted(&mut self) -> std::io::Result<bool> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let Some(child) = self.child.as_mut() else { return Ok(false) };
        while Instant::now() < deadline {
            if super::exclusive::is_mount_point(&self.file) {
                return Ok(true);
            }
            if child.try_wait()?.is_some() {
                self.child = None;
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(false)
    }

    /// The file holding the virtual disk.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

/// qemu-storage-daemon's arguments: the image through its format driver
/// (backing files as its header names them, read-only), exported over FUSE
/// at `mountpoint`.
fn daemon_args(
    image: &Path,
    format: &ImageFormat,
    access: Access,
    mountpoint: &Path,
) -> Vec<String> {
    let (read_only, share, write) = match access {
        Access::Read => (true, false, false),
        Access::ReadShared => (true, true, false),
        Access::Write => (false, false, true),
    };
    let file = serde_json::json!({
        "driver": "file", "node-name": "file", "filename": image, "read-only": read_only,
        "force-share": share,
    });
    let mut disk = serde_json::json!({
        "driver": format.driver(), "node-name": "disk", "file": "file", "read-only": read_only,
        "force-share": share,
    });
    if write {
        disk["detect-zeroes"] = "unmap".into();
        disk["discard"] = "unmap".into();
    }
    let export = serde_json::json!({
        "type": "fuse", "id": "export", "node-name": "disk", "mountpoint": mountpoint,
        "writable": write, "growable": false,
    });
    vec![
        "--blockdev".into(),
        file.to_string(),
        "--blockdev".into(),
        disk.to_string(),
        "--export".into(),
        export.to_string(),
    ]
}

impl Drop for Export {
    /// Stop the daemon (it flushes and unmounts its export as it exits);
    /// unmount by hand if it will not go.
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if super::exclusive::is_mount_point(&self.file) {
            let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&self.file).status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn image(head: &[u8], at: u64, len: u64) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.set_len(len).unwrap();
        f.write_all_at(head, at).unwrap();
        f.flush().unwrap();
        f
    }

    #[test]
    fn formats_by_header() {
        let mut qcow2 = b"QFI\xfb\0\0\0\x03".to_vec();
        qcow2.resize(36, 0);
        assert_eq!(
            detect(&image(&qcow2, 0, 4096), 4096),
            Some(ImageFormat::Qcow2 { encryption: None })
        );
        qcow2[35] = 2;
        let luks = ImageFormat::Qcow2 { encryption: Some("LUKS") };
        assert_eq!(detect(&image(&qcow2, 0, 4096), 4096), Some(luks));
        assert_eq!(detect(&image(b"KDMV", 0, 4096), 4096), Some(ImageFormat::Vmdk));
        let descriptor = b"# Disk DescriptorFile\nversion=1\n";
        assert_eq!(detect(&image(descriptor, 0, 512), 512), Some(ImageFormat::Vmdk));
        assert_eq!(detect(&image(b"vhdxfile", 0, 4096), 4096), Some(ImageFormat::Vhdx));
        assert_eq!(detect(&image(b"QED\0", 0, 4096), 4096), Some(ImageFormat::Qed));
        assert_eq!(
            detect(&image(&0xbeda_107fu32.to_le_bytes(), 64, 4096), 4096),
            Some(ImageFormat::Vdi)
        );
        // A fixed VHD: raw data, then the footer in the last sector.
        assert_eq!(
            detect(&image(b"conectix", 1 << 20, (1 << 20) + 512), (1 << 20) + 512),
            Some(ImageFormat::Vhd)
        );
        assert_eq!(detect(&image(b"conectix", 0, 4096), 4096), Some(ImageFormat::Vhd));
    }

    #[test]
    fn raw_images_are_raw() {
        let mut mbr = vec![0u8; 512];
        mbr[510] = 0x55;
        mbr[511] = 0xAA;
        assert_eq!(detect(&image(&mbr, 0, 1 << 20), 1 << 20), None);
        assert_eq!(detect(&image(b"", 0, 0), 0), None);
        assert_eq!(detect(&image(b"conectix", 100, 4096), 4096), None, "not at the footer");
    }

    #[test]
    fn names_are_escaped_by_json_not_by_commas() {
        let image = Path::new("/vm/a,b \"c\".qcow2");
        let mount = Path::new("/t/disk");
        let args = daemon_args(image, &ImageFormat::Vhd, Access::ReadShared, mount);
        let file: serde_json::Value = serde_json::from_str(&args[1]).unwrap();
        assert_eq!(file["filename"], "/vm/a,b \"c\".qcow2");
        assert_eq!((&file["read-only"], &file["force-share"]), (&true.into(), &true.into()));
        let disk: serde_json::Value = serde_json::from_str(&args[3]).unwrap();
        assert_eq!(disk["driver"], "vpc");
        let export: serde_json::Value = serde_json::from_str(&args[5]).unwrap();
        assert_eq!(export["writable"], false);
        let args = daemon_args(image, &ImageFormat::Vdi, Access::Write, mount);
        let disk: serde_json::Value = serde_json::from_str(&args[3]).unwrap();
        assert_eq!((&disk["read-only"], &disk["force-share"]), (&false.into(), &false.into()));
        assert_eq!(disk["detect-zeroes"], "unmap");
        let export: serde_json::Value = serde_json::from_str(&args[5]).unwrap();
        assert_eq!(export["writable"], true);
    }
}
