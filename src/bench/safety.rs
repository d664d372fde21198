//! Refusing to write to a device that something else uses: a mounted file
//! system, swap, or a holder (device mapper, md) on it or its partitions.

use super::io::sysfs_dir;
use super::BenchError;
use crate::device::exclusive::user_of_dir;
use crate::device::SysRoot;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Err(InUse) when the block device behind `file` or any of its partitions
/// is mounted, held or claimed (swap included). Regular files are not checked.
pub fn check_unused(file: &fs::File, path: &Path, sys: &Path) -> Result<(), BenchError> {
    let meta =
        file.metadata().map_err(|e| BenchError::Open { path: path.to_path_buf(), source: e })?;
    if !meta.file_type().is_block_device() {
        return Ok(());
    }
    let dir = sysfs_dir(sys, meta.rdev())?;
    let root = SysRoot { sys: sys.to_path_buf(), dev: PathBuf::from("/dev") };
    match user_of_dir(&root, &dir) {
        Some(by) => Err(BenchError::InUse { path: path.to_path_buf(), by }),
        None => Ok(()),
    }
}
