//! Refusing to write to a device that something else uses: a mounted file
//! system, swap, or a holder (device mapper, md) on it or its partitions.

use super::io::sysfs_dir;
use super::BenchError;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Err(InUse) when the block device behind `file` or any of its partitions
/// is mounted, swapped on or held. Regular files are not checked.
pub fn check_unused(file: &fs::File, path: &Path, sys: &Path) -> Result<(), BenchError> {
    let meta = file.metadata().map_err(|e| BenchError::Open { path: path.to_path_buf(), source: e })?;
    if !meta.file_type().is_block_device() {
        return Ok(());
    }
    let dir = sysfs_dir(sys, meta.rdev())?;
    let mut dirs = vec![dir.clone()];
    dirs.extend(partitions(&dir));
    let numbers: Vec<String> = dirs.iter().filter_map(|d| read_trimmed(&d.join("dev"))).collect();
    let users = mounts(&numbers)
        .into_iter()
        .chain(swaps(&numbers))
        .chain(dirs.iter().flat_map(|d| holders(d)))
        .collect::<Vec<_>>();
    if users.is_empty() {
        return Ok(());
    }
    Err(BenchError::InUse { path: path.to_path_buf(), by: users.join(", ") })
}

/// Partition directories inside a disk's sysfs directory.
fn partitions(disk: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = fs::read_dir(disk) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("partition").is_file())
        .collect()
}

fn read_trimmed(path: &Path) -> Option<String> {
    Some(fs::read_to_string(path).ok()?.trim().to_string())
}

/// Mount points whose device (field 3 of mountinfo, MAJ:MIN) is one of ours.
fn mounts(numbers: &[String]) -> Vec<String> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounted_at(&text, numbers)
}

fn mounted_at(mountinfo: &str, numbers: &[String]) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (number, point) = (fields.get(2)?, fields.get(4)?);
            numbers.iter().any(|n| n == number).then(|| format!("mounted at {point}"))
        })
        .collect()
}

/// Swap areas, compared by device number since /proc/swaps names paths.
fn swaps(numbers: &[String]) -> Vec<String> {
    let text = fs::read_to_string("/proc/swaps").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let path = line.split_whitespace().next()?;
            let rdev = fs::metadata(path).ok()?.rdev();
            let number = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
            numbers.contains(&number).then(|| format!("swap on {path}"))
        })
        .collect()
}

fn holders(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir.join("holders")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| format!("held by {}", e.file_name().to_string_lossy()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_is_matched_by_device_number() {
        let info = "36 25 7:3 / /mnt/x rw,relatime shared:1 - ext4 /dev/loop3 rw\n\
                    37 25 7:30 / /mnt/y rw - ext4 /dev/loop30 rw\n";
        let numbers = ["7:3".to_string()];
        assert_eq!(mounted_at(info, &numbers), ["mounted at /mnt/x"]);
        assert!(mounted_at(info, &["8:0".to_string()]).is_empty());
    }
}
