//! What can go wrong finding, opening or describing a target.

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{}: no such file or directory", .0.display())]
    NotFound(PathBuf),
    /// Kept apart from other I/O errors so the caller can still show the
    /// sysfs topology and say "unreadable (need root)".
    #[error("{}: permission denied ({})", path.display(), permission_hint())]
    Permission { path: PathBuf },
    /// `error` is in the message, so it is no `source`: printed with its
    /// chain, the cause would appear twice.
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    /// `kind` names what it is instead: "a FIFO", "a directory", ...
    #[error("{}: {kind}, not a block device or image file", path.display())]
    NotBlockOrFile { path: PathBuf, kind: &'static str },
    #[error("{}: block device {number} has no entry under sys/dev/block", path.display())]
    NoSysfs { path: PathBuf, number: String },
    /// An unbound loop device reads as an empty disk: say what it is.
    #[error("{}: loop device not attached to any file (losetup {} FILE attaches one)", .0.display(), .0.display())]
    NotAttached(PathBuf),
    #[error("invalid override: {0}")]
    InvalidOverride(String),
    /// Read as raw, a VM image is "no partitions" at best: audit and
    /// realign use it through QEMU; the other commands refuse it.
    #[error("{}: a {} image, not a raw disk: convert it to raw first (qemu-img convert -O raw)", path.display(), format.name())]
    VmImage { path: PathBuf, format: super::vmimage::ImageFormat },
    #[error(transparent)]
    Export(#[from] super::vmimage::ExportError),
}

/// Root can still be refused: by a container's device cgroup or a
/// security module, and the fix is then not sudo.
fn permission_hint() -> &'static str {
    if rustix::process::geteuid().is_root() {
        "refused even to root: a container or security policy forbids opening it"
    } else {
        "reading a disk usually needs root"
    }
}

impl DeviceError {
    /// Sort an I/O error on `path` into the variants callers act on.
    pub(crate) fn from_io(path: &Path, source: io::Error) -> DeviceError {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::NotFound => DeviceError::NotFound(path),
            io::ErrorKind::PermissionDenied => DeviceError::Permission { path },
            _ => DeviceError::Io { path, error: source },
        }
    }
}
