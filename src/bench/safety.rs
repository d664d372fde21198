//! Refusing to write to a device that something else uses: a mounted file
//! system, swap, or a holder (device mapper, md) on it or its partitions,
//! and an image file that a loop device is attached to.

use super::io::sysfs_dir;
use super::BenchError;
use crate::device::exclusive::{loop_backed_by, user_of_dir};
use crate::device::SysRoot;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Err(InUse) when the block device behind `file` or any of its partitions
/// is mounted, held or claimed (swap included), or when `file` is a regular
/// file backing a loop device (writing it behind the loop device's back
/// could undo the writes of a file system mounted from it). `path` names
/// `file` in messages and, for regular files, is matched against the loop
/// devices' backing files.
pub fn check_unused(file: &fs::File, path: &Path, root: &SysRoot) -> Result<(), BenchError> {
    let meta =
        file.metadata().map_err(|e| BenchError::Open { path: path.to_path_buf(), error: e })?;
    let by = if meta.file_type().is_block_device() {
        user_of_dir(root, &sysfs_dir(&root.sys, meta.rdev())?)
    } else {
        loop_backed_by(root, path)
            .map(|dev| format!("attached to /dev/{dev}; use that device or detach it"))
    };
    match by {
        Some(by) => Err(BenchError::InUse { path: path.to_path_buf(), by }),
        None => Ok(()),
    }
}

/// Real /sys and /dev, or a fixture tree (ROOT/sys, ROOT/dev) for any
/// other sysfs path.
pub(crate) fn root_of(sys: &Path) -> SysRoot {
    if sys == Path::new("/sys") {
        SysRoot::real()
    } else {
        SysRoot::fixture(PathBuf::from(sys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_attached_to_loop_devices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        fs::write(&image, b"").unwrap();
        let sys = dir.path().join("sys");
        fs::create_dir_all(sys.join("block/loop7/loop")).unwrap();
        let root = root_of(&sys);
        assert_eq!(root.dev, dir.path().join("dev"));
        let file = fs::File::open(&image).unwrap();
        check_unused(&file, &image, &root).unwrap();
        fs::write(sys.join("block/loop7/loop/backing_file"), format!("{}\n", image.display()))
            .unwrap();
        let err = check_unused(&file, &image, &root).unwrap_err().to_string();
        assert!(err.contains("in use") && err.contains("/dev/loop7"), "{err}");
    }

    #[test]
    fn real_sysfs_is_real_dev() {
        assert_eq!(root_of(Path::new("/sys")), SysRoot::real());
    }
}
