//! What must be true before a move starts: a table healthy enough to edit,
//! no boot loader that records the sectors being moved, and a journal on
//! persistent storage outside the target.

use crate::device::sysfs::{block_dir, partition_number, SysRoot};
use crate::device::{Target, TargetKind};
use crate::io::ReadAt;
use crate::table::{Layout, Partition};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// GPT type of a BIOS boot partition: GRUB's core.img, found by sector.
const BIOS_BOOT: &str = "21686148-6E49-6F6E-744E-656564454649";

/// Why a move may not start.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("the partition table has problems; fix them first: {0}")]
    TableProblems(String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error(
        "{0} is in memory (tmpfs/ramfs): a power cut would lose the journal; put it on a disk"
    )]
    JournalInMemory(PathBuf),
    #[error("the journal cannot be the image itself")]
    JournalIsImage,
    #[error(
        "{dir} lives on {disk}, the disk being moved: put the journal on another disk (--journal)"
    )]
    JournalOnTarget { dir: PathBuf, disk: PathBuf },
}

/// A table with problems is not edited: the move would write it back.
pub fn table_problems(layout: &Layout) -> Result<(), GuardError> {
    if layout.problems.is_empty() {
        return Ok(());
    }
    let list: Vec<String> =
        layout.problems.iter().map(|p| format!("{} ({})", p.message, p.code)).collect();
    Err(GuardError::TableProblems(list.join("; ")))
}

/// A boot loader that finds its code by sector number breaks when those
/// sectors move: GRUB's boot.img in the MBR pointing inside `p`, or a BIOS
/// boot partition, LILO, extlinux. Says what to run afterwards when forced.
pub(crate) fn boot_loader(dev: &dyn ReadAt, p: &Partition, ss: u64, disk: &Path) -> Option<String> {
    let reinstall =
        format!("reinstall the boot loader afterwards (`grub-install {}`)", disk.display());
    if p.type_id.eq_ignore_ascii_case(BIOS_BOOT) {
        return Some(format!(
            "partition {} is a BIOS boot partition: GRUB's boot.img loads core.img from it by \
             sector number; {reinstall}",
            p.number
        ));
    }
    let mut mbr = [0u8; 512];
    dev.read_exact_at(&mut mbr, 0).ok()?;
    if mbr.get(6..10) == Some(b"LILO") {
        return Some(
            "LILO is in the MBR: its map file records the sectors of every kernel it boots; run \
             `lilo` again after the move (or switch to GRUB) before rebooting"
                .into(),
        );
    }
    let mut vbr = [0u8; 512];
    let first = p.start.checked_mul(ss)?;
    if dev.read_exact_at(&mut vbr, first).is_ok()
        && vbr.windows(8).any(|w| w == b"EXTLINUX" || w == b"SYSLINUX")
    {
        return Some(format!(
            "partition {} has extlinux/syslinux in its boot sector, which finds ldlinux.sys by \
             sector number; reinstall it afterwards (`extlinux --install` on its directory)",
            p.number
        ));
    }
    let grub = mbr[..440].windows(4).any(|w| w == b"GRUB");
    let core = crate::io::le_u64(&mbr, 0x5C)?;
    let inside = core >= p.start && core < p.start.saturating_add(p.size);
    (grub && inside).then(|| {
        format!(
            "GRUB's boot.img in the MBR loads core.img from LBA {core}, inside partition {}; \
             {reinstall}",
            p.number
        )
    })
}

/// The journal must survive what the target does not: refuse it on the
/// target itself (or its partitions, except those `spared` allows: any
/// not being moved), on the image being moved, and on memory-backed file
/// systems.
pub(crate) fn journal_location(
    root: &SysRoot,
    target: &Target,
    journal: &Path,
    spared: Option<&[u32]>,
) -> Result<(), GuardError> {
    let mut dir = match journal.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A directory still to be made lands on its nearest existing ancestor's
    // file system: a dry run judges the same place --yes will use.
    while !dir.exists() {
        match dir.parent() {
            Some(up) if !up.as_os_str().is_empty() => dir = up,
            _ => break,
        }
    }
    let io = |e: std::io::Error| GuardError::Io(dir.to_path_buf(), e);
    let meta = std::fs::metadata(dir).map_err(io)?;
    let fs = rustix::fs::statfs(dir).map_err(|e| io(e.into()))?;
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58f6;
    if [TMPFS, RAMFS].contains(&(fs.f_type as i64)) {
        return Err(GuardError::JournalInMemory(dir.to_path_buf()));
    }
    match target.kind {
        TargetKind::Image => {
            let image = std::fs::metadata(&target.path)
                .map_err(|e| GuardError::Io(target.path.clone(), e))?;
            let same = std::fs::metadata(journal)
                .is_ok_and(|j| j.dev() == image.dev() && j.ino() == image.ino());
            if same {
                return Err(GuardError::JournalIsImage);
            }
            Ok(())
        }
        TargetKind::Disk => {
            let name = target.name.as_deref().unwrap_or_default();
            let holder = block_dir(&root.sys, meta.dev());
            let on_target = holder.as_deref().is_some_and(|d| {
                let beside = spared.zip(partition_number(d)).is_some_and(|(moved, n)| {
                    !moved.contains(&n)
                        && d.parent().and_then(|p| p.file_name()).is_some_and(|n| n == name)
                });
                !beside
                    && (d.file_name().is_some_and(|n| n == name)
                        || d.parent().and_then(|p| p.file_name()).is_some_and(|n| n == name))
            });
            if on_target {
                return Err(GuardError::JournalOnTarget {
                    dir: dir.to_path_buf(),
                    disk: target.path.clone(),
                });
            }
            Ok(())
        }
    }
}

/// Whether partition `p` (sectors of `ss` bytes) is a swap area holding a
/// hibernation image: the swap signature's place says S1SUSPEND,
/// S2SUSPEND or ULSUSPEND (the kernel's and uswsusp's marks) instead of
/// SWAPSPACE2.
pub fn hibernation(dev: &dyn ReadAt, p: &Partition, ss: u64) -> bool {
    let mut page = [0u8; 4096];
    let Some(at) = p.start.checked_mul(ss) else { return false };
    if p.size.saturating_mul(ss) < 4096 || dev.read_exact_at(&mut page, at).is_err() {
        return false;
    }
    page[4086..].windows(7).any(|w| w == b"SUSPEND")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::PartKind;

    fn part(start: u64, type_id: &str) -> Partition {
        Partition {
            number: 1,
            start,
            size: 1000,
            kind: PartKind::Primary,
            type_id: type_id.into(),
            name: None,
            ebr: None,
        }
    }

    #[test]
    fn grub_pointing_into_the_partition_is_named() {
        let mut mbr = vec![0u8; 4096];
        mbr[0x180..0x184].copy_from_slice(b"GRUB");
        mbr[0x5C..0x64].copy_from_slice(&100u64.to_le_bytes());
        let disk = Path::new("/dev/sdz");
        let why = boot_loader(&mbr, &part(63, "0x83"), 512, disk).unwrap();
        assert!(why.contains("LBA 100") && why.contains("grub-install /dev/sdz"), "{why}");
        assert!(boot_loader(&mbr, &part(2048, "0x83"), 512, disk).is_none(), "core.img elsewhere");
        assert!(boot_loader(&vec![0u8; 4096], &part(2048, BIOS_BOOT), 512, disk).is_some());
        assert!(boot_loader(&vec![0u8; 10], &part(63, "0x83"), 512, disk).is_none());
        let mut disk_img = vec![0u8; 64 * 512];
        disk_img[63 * 512 + 3..63 * 512 + 11].copy_from_slice(b"EXTLINUX");
        let why = boot_loader(&disk_img, &part(63, "0x83"), 512, disk).unwrap();
        assert!(why.contains("ldlinux.sys"), "{why}");
        assert!(boot_loader(&disk_img, &part(62, "0x83"), 512, disk).is_none());
        disk_img[6..10].copy_from_slice(b"LILO");
        assert!(boot_loader(&disk_img, &part(2048, "0x83"), 512, disk).unwrap().contains("lilo"));
    }

    #[test]
    fn a_hibernation_image_is_told_from_plain_swap() {
        let mut img = vec![0u8; 64 * 512 + 8192];
        let sig = 63 * 512 + 4086;
        img[sig..sig + 10].copy_from_slice(b"SWAPSPACE2");
        assert!(!hibernation(&img, &part(63, "0x82"), 512));
        img[sig..sig + 10].copy_from_slice(b"S1SUSPEND\0");
        assert!(hibernation(&img, &part(63, "0x82"), 512));
        assert!(!hibernation(&img, &part(64, "0x82"), 512));
    }

    #[test]
    fn journals_in_memory_are_refused() {
        let target = Target {
            path: "/nonexistent.img".into(),
            name: None,
            kind: TargetKind::Image,
            selected_partition: None,
        };
        if Path::new("/dev/shm").is_dir() {
            let err = journal_location(&SysRoot::real(), &target, Path::new("/dev/shm/j"), None);
            assert!(matches!(err, Err(GuardError::JournalInMemory(_))), "{err:?}");
        }
    }
}
