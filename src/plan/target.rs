//! The topology a table is planned on, refused where it would be a guess:
//! a table laid out for sectors the target does not have is one that no
//! tool (nor the kernel) finds.

use crate::device::{self, DeviceError, Overrides, Source, SysRoot, Target, TargetKind, Topology};
use crate::io::{DirectReader, ReadAt};
use std::path::PathBuf;

/// Why a target has no topology to plan on. The I/O error is in the
/// message, so it is no `source`: printed with its chain, the cause would
/// appear twice.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("{}: cannot read: {error}", path.display())]
    Unreadable { path: PathBuf, error: std::io::Error },
    #[error(
        "{} is a block device with {reported}-byte logical sectors; a table laid out for \
         --logical-sector-size {wanted} would be unreadable there (to prepare an image for a \
         {wanted}-byte disk, plan an image file instead)",
        path.display()
    )]
    OtherLogicalSize { path: PathBuf, reported: u64, wanted: u64 },
}

/// `target`'s topology with `overrides`, as [`crate::open::topology`] has
/// it. An image that cannot be read has no sector size to find: nothing is
/// planned rather than 512 assumed. A block device is read and written in
/// the sectors the kernel uses, so another logical size is refused there;
/// an image may be planned for the disk it will be copied to.
pub fn topology(
    root: &SysRoot,
    target: &Target,
    overrides: &Overrides,
) -> Result<Topology, TargetError> {
    let file = device::open(target)?;
    if target.kind == TargetKind::Image {
        check_readable(&file, target)?;
    }
    if let (TargetKind::Disk, Some(wanted)) = (target.kind, overrides.logical_sector_size) {
        let reported =
            crate::open::topology(root, target, Some(file.file()), &Overrides::default())?
                .logical_sector_size;
        if reported.source != Source::Assumed && reported.value != wanted {
            let path = target.path.clone();
            return Err(TargetError::OtherLogicalSize { path, reported: reported.value, wanted });
        }
    }
    Ok(crate::open::topology(root, target, Some(file.file()), overrides)?)
}

/// Read where the sector size is found (the GPT header at byte 512 or
/// 4096): an I/O error there is an error, not a blank image.
fn check_readable(file: &DirectReader, target: &Target) -> Result<(), TargetError> {
    let size = file.file().metadata().map(|m| m.len()).unwrap_or(0);
    let mut head = vec![0u8; size.min(8192) as usize];
    file.read_exact_at(&mut head, 0)
        .map_err(|error| TargetError::Unreadable { path: target.path.clone(), error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Fixture disk sdz of 1 MiB whose kernel reports `logical`-byte
    /// sectors, its node a plain file under DIR/dev.
    fn disk(dir: &std::path::Path, logical: u64) -> (SysRoot, Target) {
        let queue = dir.join("sys/block/sdz/queue");
        fs::create_dir_all(&queue).unwrap();
        fs::write(queue.join("logical_block_size"), format!("{logical}\n")).unwrap();
        fs::write(dir.join("sys/block/sdz/size"), "2048\n").unwrap();
        fs::create_dir_all(dir.join("dev")).unwrap();
        fs::write(dir.join("dev/sdz"), vec![0u8; 1 << 20]).unwrap();
        let target = Target {
            path: dir.join("dev/sdz"),
            name: Some("sdz".into()),
            kind: TargetKind::Disk,
            selected_partition: None,
        };
        (SysRoot::fixture(dir.join("sys")), target)
    }

    #[test]
    fn a_disk_is_planned_in_the_kernels_sectors_only() {
        let dir = tempfile::tempdir().unwrap();
        let (root, target) = disk(dir.path(), 4096);
        let wanted = |size| Overrides { logical_sector_size: Some(size), ..Overrides::default() };
        let err = topology(&root, &target, &wanted(512)).unwrap_err();
        assert!(
            matches!(err, TargetError::OtherLogicalSize { reported: 4096, wanted: 512, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--logical-sector-size 512 would be unreadable there"));
        let same = topology(&root, &target, &wanted(4096)).unwrap();
        assert_eq!(same.logical_sector_size.value, 4096);
    }

    #[test]
    fn an_image_may_be_planned_for_another_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let target = Target { path, name: None, kind: TargetKind::Image, selected_partition: None };
        let wanted = Overrides { logical_sector_size: Some(4096), ..Overrides::default() };
        let root = SysRoot::fixture(dir.path().join("sys"));
        assert_eq!(topology(&root, &target, &wanted).unwrap().logical_sector_size.value, 4096);
    }
}
