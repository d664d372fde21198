//! Building a Topology from sysfs, ioctls, quirks, images and overrides,
//! keeping for every value the source that vouched for it.

use super::drive::{self, Answer, Drive, Protocol};
use super::ioctl::{self, Reported};
use super::quirks::quirk_for;
use super::sysfs::{read_text, read_u64, SysRoot};
use super::{DeviceError, Overrides, Source, Sourced, Target, TargetKind, Topology};
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Some USB-SATA bridges report 0xFFFF sectors of 512 bytes as optimal I/O
/// whatever the disk behind them.
const BOGUS_OPTIMAL_IO: u64 = 33_553_920;

/// What an image's table tells of its logical sector size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectorGuess {
    /// This size, with a note when it was inferred rather than read.
    Known(u64, Option<&'static str>),
    /// Both sizes read as a plausible table.
    Unsure(&'static str),
    Unknown,
}

/// Reads an image's table for its sector size: `device` cannot read tables
/// (they are a layer above), so the caller passes the reader
/// (`open::topology` passes `table::detect_sector_size`).
pub(crate) type SectorGuesser<'a> = &'a dyn Fn(&File, u64) -> SectorGuess;

/// Topology of `target`. `file` is the opened device or image when it could
/// be opened; ioctls are used only when it is a block device.
pub fn topology(
    root: &SysRoot,
    target: &Target,
    file: Option<&File>,
    overrides: &Overrides,
    guess: SectorGuesser,
) -> Result<Topology, DeviceError> {
    validate_overrides(overrides)?;
    let mut topo = match target.kind {
        TargetKind::Image => image_topology(target, file, guess)?,
        TargetKind::Disk => disk_topology(root, target, file),
    };
    apply_overrides(&mut topo, overrides);
    reconcile(&mut topo)?;
    Ok(topo)
}

fn disk_topology(root: &SysRoot, target: &Target, file: Option<&File>) -> Topology {
    let mut notes = Vec::new();
    let dir = sysfs_dir(root, target);
    if !dir.is_dir() {
        notes.push(format!("no sysfs entry at {}", dir.display()));
    }
    let sys = from_sysfs(&dir, &mut notes);
    let ioc = file.filter(|f| is_block_device(f)).map(ioctl::query).unwrap_or_default();
    let n = &mut notes;

    let logical = merge("logical", "BLKSSZGET", sys.logical, ioc.logical, n);
    let logical = sector_size("logical", logical, n)
        .unwrap_or_else(|| assumed("logical sector size", 512, n));
    let physical = merge("physical", "BLKPBSZGET", sys.physical, ioc.physical, n);
    let physical = sector_size("physical", physical, n)
        .unwrap_or(Sourced::new(logical.value, Source::Assumed));
    let minimum_io = merge("minimum I/O", "BLKIOMIN", sys.minimum_io, ioc.minimum_io, n);
    let optimal_io = merge("optimal I/O", "BLKIOOPT", sys.optimal_io, ioc.optimal_io, n);
    let offset =
        merge("alignment offset", "BLKALIGNOFF", sys.alignment_offset, ioc.alignment_offset, n);
    let size = merge("size", "BLKGETSIZE64", sys.size_bytes, ioc.size_bytes, n);
    let size = size.unwrap_or_else(|| assumed("size", 0, n));
    let model = read_text(&dir.join("device/model"));
    let drive = file.filter(|f| is_block_device(f)).and_then(|f| drive::ask(f, &dir));
    let (physical, offset) = match &drive {
        Some(d) => believe_drive(d, logical.value, physical, offset, n),
        None => (physical, offset),
    };

    Topology {
        minimum_io_size: minimum_io_hint(minimum_io, logical.value, n),
        // Judged against the reported physical size: the question is whether
        // the device's own answers are consistent.
        optimal_io_size: optimal_io_hint(optimal_io, physical.value, n),
        physical_sector_size: apply_quirk(physical, model.as_deref(), n),
        logical_sector_size: logical,
        alignment_offset: offset.unwrap_or(Sourced::new(0, Source::Assumed)),
        size_bytes: size.value,
        rotational: read_rotational(&dir),
        vendor: read_text(&dir.join("device/vendor")),
        model,
        serial: super::identity::serial(root, &dir),
        drive,
        notes,
    }
}

/// Put the drive's word beside the kernel's. A larger physical sector or
/// another alignment offset from the drive wins, with the reason the
/// kernel missed it; a smaller physical sector does not (a start aligned
/// to the larger is aligned to both).
fn believe_drive(
    drive: &Drive,
    logical: u64,
    physical: Sourced<u64>,
    offset: Option<Sourced<u64>>,
    notes: &mut Vec<String>,
) -> (Sourced<u64>, Option<Sourced<u64>>) {
    for u in &drive.unanswered {
        notes.push(format!("the drive did not answer {}: {}", u.command, u.reason));
    }
    if let Some(d) = drive.logical_sector_size.filter(|d| d.value != logical) {
        notes.push(logical_disagreement(drive, logical, d));
    }
    let physical = match drive.physical_sector_size {
        Some(d) if d.value > physical.value => {
            notes.push(format!(
                "{}the kernel says physical {}, the drive {} ({}); judging against {}",
                why_kernel_missed(drive, d.value),
                physical.value,
                d.value,
                d.via,
                d.value
            ));
            Sourced::new(d.value, Source::Drive)
        }
        Some(d) if d.value < physical.value => {
            notes.push(format!(
                "the drive says physical {} ({}), the kernel {}; keeping {}: a start aligned to it is aligned to both",
                d.value, d.via, physical.value, physical.value
            ));
            physical
        }
        _ => physical,
    };
    let offset = match (drive.alignment_offset, offset) {
        (Some(d), Some(k)) if d.value != k.value => {
            notes.push(format!(
                "the kernel says alignment offset {}, the drive {} ({}); using the drive's",
                k.value, d.value, d.via
            ));
            Some(Sourced::new(d.value, Source::Drive))
        }
        (Some(d), None) => Some(Sourced::new(d.value, Source::Drive)),
        (_, k) => k,
    };
    (physical, offset)
}

/// Why the kernel's physical size is smaller than the drive's, where the
/// driver is known to look elsewhere.
fn why_kernel_missed(drive: &Drive, physical: u64) -> String {
    if let Some(bridge) = &drive.usb_bridge {
        return format!(
            "USB bridge {}: the kernel read capacity(10) and never saw the {physical}-byte physical sector; ",
            bridge.id
        );
    }
    if drive.protocol == Some(Protocol::Nvme) {
        return format!(
            "NVMe: the kernel caps the physical block size at the atomic write unit; the namespace prefers {physical}-byte writes (NPWG); "
        );
    }
    String::new()
}

fn logical_disagreement(drive: &Drive, logical: u64, d: Answer) -> String {
    match &drive.usb_bridge {
        Some(bridge) => format!(
            "USB bridge {} presents {logical}-byte logical sectors over a drive with {}-byte ones ({}): \
             a partition table written through it will not read once the drive is out of the enclosure, \
             nor one written outside it here",
            bridge.id, d.value, d.via
        ),
        None => format!(
            "the drive says logical {} ({}), the kernel {logical}; LBAs here are the kernel's",
            d.value, d.via
        ),
    }
}

/// SYS/block/NAME, NAME being the kernel name or else the node's file name.
fn sysfs_dir(root: &SysRoot, target: &Target) -> PathBuf {
    let node = target.path.file_name().map(|n| n.to_string_lossy().into_owned());
    match target.name.clone().or(node) {
        Some(name) if !name.is_empty() => root.block(&name),
        // No name at all: a path that cannot exist, so nothing is read.
        _ => root.sys.join("block/.unnamed"),
    }
}

fn read_rotational(dir: &Path) -> Option<bool> {
    match read_text(&dir.join("queue/rotational"))?.as_str() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

fn from_sysfs(dir: &Path, notes: &mut Vec<String>) -> Reported {
    let queue = dir.join("queue");
    let sectors = read_u64(&dir.join("size"), notes);
    Reported {
        logical: read_u64(&queue.join("logical_block_size"), notes),
        physical: read_u64(&queue.join("physical_block_size"), notes),
        minimum_io: read_u64(&queue.join("minimum_io_size"), notes),
        optimal_io: read_u64(&queue.join("optimal_io_size"), notes),
        alignment_offset: read_alignment(&dir.join("alignment_offset"), notes),
        // sysfs `size` is in 512-byte units whatever the sector size.
        size_bytes: sectors.and_then(|s| s.checked_mul(512)),
    }
}

/// The kernel writes -1 when stacked limits make the device unalignable.
fn read_alignment(path: &Path, notes: &mut Vec<String>) -> Option<u64> {
    let text = read_text(path)?;
    if text == "-1" {
        notes.push("the kernel reports alignment_offset -1: the device cannot be aligned".into());
        return None;
    }
    read_u64(path, notes)
}

fn is_block_device(file: &File) -> bool {
    file.metadata().is_ok_and(|m| m.file_type().is_block_device())
}

/// Prefer the ioctl when the two disagree, since it answers for the node we
/// actually opened; say so.
fn merge(
    what: &str,
    ioctl_name: &str,
    sysfs: Option<u64>,
    ioctl: Option<u64>,
    notes: &mut Vec<String>,
) -> Option<Sourced<u64>> {
    match (sysfs, ioctl) {
        (Some(s), Some(i)) if s != i => {
            notes.push(format!("sysfs says {what} {s}, {ioctl_name} says {i}; using the ioctl"));
            Some(Sourced::new(i, Source::Ioctl))
        }
        (Some(s), _) => Some(Sourced::new(s, Source::Kernel)),
        (None, Some(i)) => Some(Sourced::new(i, Source::Ioctl)),
        (None, None) => None,
    }
}

/// Drop a reported sector size that no real device has.
fn sector_size(
    what: &str,
    value: Option<Sourced<u64>>,
    notes: &mut Vec<String>,
) -> Option<Sourced<u64>> {
    let v = value?;
    if crate::units::is_sector_size(v.value, 65536) {
        return Some(v);
    }
    notes.push(format!(
        "ignored {what} sector size {}: not a power of two from 512 to 65536",
        v.value
    ));
    None
}

fn assumed(what: &str, value: u64, notes: &mut Vec<String>) -> Sourced<u64> {
    notes.push(format!("no {what} reported; assuming {value}"));
    Sourced::new(value, Source::Assumed)
}

/// 0 means unreported; a value that is not whole logical sectors is noise.
fn minimum_io_hint(
    value: Option<Sourced<u64>>,
    logical: u64,
    notes: &mut Vec<String>,
) -> Option<Sourced<u64>> {
    let v = value.filter(|v| v.value != 0)?;
    if v.value % logical == 0 {
        return Some(v);
    }
    notes.push(format!(
        "ignored minimum I/O {}: not a multiple of the {logical}-byte logical sector",
        v.value
    ));
    None
}

/// 0 means unreported; the USB-bridge constant and values that are not
/// whole physical sectors (hence not whole logical ones either) are bogus.
fn optimal_io_hint(
    value: Option<Sourced<u64>>,
    physical: u64,
    notes: &mut Vec<String>,
) -> Option<Sourced<u64>> {
    let v = value.filter(|v| v.value != 0)?;
    let why = if v.value == BOGUS_OPTIMAL_IO {
        "the 0xFFFF-sector value some USB bridges report whatever the disk".to_string()
    } else if v.value % physical != 0 {
        format!("not a multiple of the {physical}-byte physical sector")
    } else {
        return Some(v);
    };
    notes.push(format!("ignored optimal I/O {}: {why}", v.value));
    None
}

/// Correct a physical size that a known drive family under-reports.
fn apply_quirk(
    physical: Sourced<u64>,
    model: Option<&str>,
    notes: &mut Vec<String>,
) -> Sourced<u64> {
    let Some((model, quirk)) = model.and_then(|m| Some((m, quirk_for(m)?))) else {
        return physical;
    };
    if physical.value >= quirk.physical {
        return physical;
    }
    notes.push(format!(
        "model {model:?} is a {} drive ({}): it reports {}-byte physical sectors but uses {} inside; using {}",
        quirk.family, quirk.pattern, physical.value, quirk.physical, quirk.physical
    ));
    Sourced::new(quirk.physical, Source::Quirk)
}

/// Images have no kernel topology: only a GPT header can tell the sector size.
fn image_topology(
    target: &Target,
    file: Option<&File>,
    guess: SectorGuesser,
) -> Result<Topology, DeviceError> {
    let meta = match file {
        Some(f) => f.metadata(),
        None => std::fs::metadata(&target.path),
    };
    let meta = meta.map_err(|e| DeviceError::from_io(&target.path, e))?;
    let mut notes = Vec::new();
    let guess = file.map(|f| guess(f, meta.len()));
    let logical = match guess.unwrap_or(SectorGuess::Unknown) {
        SectorGuess::Known(size, why) => {
            notes
                .extend(why.map(|why| format!("logical sector size {size} from the table: {why}")));
            Sourced::new(size, Source::Table)
        }
        SectorGuess::Unsure(why) => {
            notes.push(why.to_string());
            Sourced::new(512, Source::Assumed)
        }
        SectorGuess::Unknown => Sourced::new(512, Source::Assumed),
    };
    Ok(Topology {
        logical_sector_size: logical,
        physical_sector_size: Sourced::new(logical.value, Source::Assumed),
        alignment_offset: Sourced::new(0, Source::Assumed),
        minimum_io_size: None,
        optimal_io_size: None,
        size_bytes: meta.len(),
        rotational: None,
        vendor: None,
        model: None,
        serial: None,
        drive: None,
        notes,
    })
}

/// Check overrides on their own, before any device is read: sector sizes
/// are powers of two (logical 512..=4096, physical 512..=65536), physical
/// not below logical, alignment offset below physical. `topology` checks
/// them again against the device's values (offset in whole logical sectors).
pub fn validate_overrides(o: &Overrides) -> Result<(), DeviceError> {
    if let Some(l) = o.logical_sector_size.filter(|&l| !crate::units::is_sector_size(l, 4096)) {
        return Err(invalid(format!(
            "logical sector size {l} is not a power of two from 512 to 4096"
        )));
    }
    if let Some(p) = o.physical_sector_size.filter(|&p| !crate::units::is_sector_size(p, 65536)) {
        return Err(invalid(format!(
            "physical sector size {p} is not a power of two from 512 to 65536"
        )));
    }
    if let (Some(l), Some(p)) = (o.logical_sector_size, o.physical_sector_size) {
        if p < l {
            return Err(invalid(format!("physical sector size {p} is smaller than logical {l}")));
        }
    }
    if let (Some(a), Some(p)) = (o.alignment_offset, o.physical_sector_size) {
        if a >= p {
            return Err(invalid(format!(
                "alignment offset {a} is not below the physical sector size {p}"
            )));
        }
    }
    Ok(())
}

fn invalid(message: String) -> DeviceError {
    DeviceError::InvalidOverride(message)
}

fn apply_overrides(topo: &mut Topology, o: &Overrides) {
    let set = |value: Option<u64>, field: &mut Sourced<u64>| {
        if let Some(v) = value {
            *field = Sourced::new(v, Source::Override);
        }
    };
    set(o.logical_sector_size, &mut topo.logical_sector_size);
    set(o.physical_sector_size, &mut topo.physical_sector_size);
    set(o.alignment_offset, &mut topo.alignment_offset);
}

/// Make the final values consistent. An override that cannot fit the other
/// values is an error; a reported value that clashes with an override is
/// adjusted, with a note.
fn reconcile(topo: &mut Topology) -> Result<(), DeviceError> {
    let logical = topo.logical_sector_size;
    let physical = topo.physical_sector_size;
    if physical.value < logical.value {
        if physical.source == Source::Override {
            return Err(invalid(format!(
                "physical sector size {} is smaller than the logical sector size {}",
                physical.value, logical.value
            )));
        }
        if physical.source != Source::Assumed {
            topo.notes.push(format!(
                "physical sector size {} raised to the {}-byte logical sector size",
                physical.value, logical.value
            ));
        }
        topo.physical_sector_size = Sourced::new(logical.value, logical.source);
    }
    let physical = topo.physical_sector_size.value;
    let offset = topo.alignment_offset;
    if offset.source == Source::Override {
        // A drive reporting 512 may be 4096 inside (the audit assumes so):
        // the jumper's 3584 must be expressible without a physical override.
        let bound = match topo.physical_sector_size.source {
            Source::Override => physical,
            _ => physical.max(crate::align::ASSUMED_PHYSICAL),
        };
        if offset.value >= bound || offset.value % logical.value != 0 {
            return Err(invalid(format!(
                "alignment offset {} must be a multiple of {} below {bound}",
                offset.value, logical.value
            )));
        }
    } else if offset.value >= physical {
        // Only the offset of the first physical boundary matters.
        let reduced = offset.value % physical;
        topo.notes.push(format!(
            "alignment offset {} is not below the {physical}-byte physical sector; using {reduced}",
            offset.value
        ));
        topo.alignment_offset = Sourced::new(reduced, offset.source);
    }
    let offset = topo.alignment_offset;
    if offset.value % logical.value != 0 {
        // No LBA can start there: a reported offset in part-sectors is junk.
        topo.notes.push(format!(
            "ignored alignment offset {}: not a whole number of {}-byte sectors",
            offset.value, logical.value
        ));
        topo.alignment_offset = Sourced::new(0, Source::Assumed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(value: u64) -> Option<Sourced<u64>> {
        Some(Sourced::new(value, Source::Kernel))
    }

    #[test]
    fn ioctl_wins_a_disagreement_and_says_so() {
        let mut notes = Vec::new();
        let got = merge("physical", "BLKPBSZGET", Some(512), Some(4096), &mut notes);
        assert_eq!(got, Some(Sourced::new(4096, Source::Ioctl)));
        assert_eq!(notes, ["sysfs says physical 512, BLKPBSZGET says 4096; using the ioctl"]);
    }

    #[test]
    fn agreement_keeps_the_kernel_and_gaps_are_filled() {
        let mut notes = Vec::new();
        assert_eq!(merge("logical", "BLKSSZGET", Some(512), Some(512), &mut notes), kernel(512));
        assert_eq!(merge("logical", "BLKSSZGET", Some(512), None, &mut notes), kernel(512));
        let from_ioctl = Some(Sourced::new(4096, Source::Ioctl));
        assert_eq!(merge("logical", "BLKSSZGET", None, Some(4096), &mut notes), from_ioctl);
        assert_eq!(merge("logical", "BLKSSZGET", None, None, &mut notes), None);
        assert!(notes.is_empty());
    }

    #[test]
    fn io_hints() {
        let mut notes = Vec::new();
        assert_eq!(optimal_io_hint(kernel(0), 4096, &mut notes), None);
        assert_eq!(minimum_io_hint(kernel(0), 512, &mut notes), None);
        assert!(notes.is_empty(), "0 is just unreported");
        assert_eq!(optimal_io_hint(kernel(1_048_576), 4096, &mut notes), kernel(1_048_576));
        // Even on a 512/512 device, where it is whole sectors.
        assert_eq!(optimal_io_hint(kernel(BOGUS_OPTIMAL_IO), 512, &mut notes), None);
        assert_eq!(optimal_io_hint(kernel(6144), 4096, &mut notes), None);
        assert_eq!(minimum_io_hint(kernel(1000), 512, &mut notes), None);
        assert_eq!(notes.len(), 3, "{notes:?}");
    }

    #[test]
    fn part_sector_offsets_are_ignored() {
        let mut topo = Topology::reported(4096, 4096, 512);
        reconcile(&mut topo).unwrap();
        assert_eq!(topo.alignment_offset, Sourced::new(0, Source::Assumed));
        assert_eq!(topo.notes.len(), 1, "{:?}", topo.notes);
    }

    fn drive(physical: Option<u64>, offset: Option<u64>) -> Drive {
        let answer = |value| Answer { value, via: "SCSI RC16" };
        Drive {
            protocol: Some(Protocol::Scsi),
            logical_sector_size: Some(answer(512)),
            physical_sector_size: physical.map(answer),
            alignment_offset: offset.map(answer),
            ..Drive::default()
        }
    }

    #[test]
    fn a_larger_drive_sector_wins_and_the_bridge_is_named() {
        let mut usb = drive(Some(4096), Some(0));
        usb.usb_bridge =
            Some(drive::UsbBridge { id: "174c:55aa".into(), manufacturer: None, product: None });
        let mut notes = Vec::new();
        let (physical, offset) =
            believe_drive(&usb, 512, kernel(512).unwrap(), kernel(0), &mut notes);
        assert_eq!(physical, Sourced::new(4096, Source::Drive));
        assert_eq!(offset, kernel(0), "agreement keeps the kernel's");
        assert_eq!(
            notes,
            ["USB bridge 174c:55aa: the kernel read capacity(10) and never saw the 4096-byte \
              physical sector; the kernel says physical 512, the drive 4096 (SCSI RC16); judging \
              against 4096"]
        );
    }

    #[test]
    fn a_smaller_drive_sector_is_noted_not_believed() {
        let mut notes = Vec::new();
        let d = drive(Some(512), None);
        let (physical, offset) =
            believe_drive(&d, 512, kernel(4096).unwrap(), kernel(0), &mut notes);
        assert_eq!((physical, offset), (kernel(4096).unwrap(), kernel(0)));
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    /// The jumpered drive whose offset the kernel missed, and an NVMe
    /// namespace whose NPWG the driver capped.
    #[test]
    fn the_drives_offset_wins_and_nvme_is_explained() {
        let mut notes = Vec::new();
        let d = drive(Some(4096), Some(3584));
        let (_, offset) = believe_drive(&d, 512, kernel(4096).unwrap(), kernel(0), &mut notes);
        assert_eq!(offset, Some(Sourced::new(3584, Source::Drive)));
        assert_eq!(
            notes,
            ["the kernel says alignment offset 0, the drive 3584 (SCSI RC16); using the drive's"]
        );
        let nvme = Drive { protocol: Some(Protocol::Nvme), ..drive(Some(4096), None) };
        let mut notes = Vec::new();
        believe_drive(&nvme, 512, kernel(512).unwrap(), kernel(0), &mut notes);
        assert!(notes[0].starts_with("NVMe: the kernel caps the physical block size"), "{notes:?}");
    }

    #[test]
    fn a_bridge_with_another_logical_sector_is_a_warning() {
        let mut d = drive(Some(4096), None);
        d.usb_bridge =
            Some(drive::UsbBridge { id: "174c:55aa".into(), manufacturer: None, product: None });
        d.unanswered.push(drive::Unanswered { command: "SCSI VPD", reason: "rejected".into() });
        let mut notes = Vec::new();
        believe_drive(&d, 4096, kernel(4096).unwrap(), kernel(0), &mut notes);
        assert_eq!(notes[0], "the drive did not answer SCSI VPD: rejected");
        assert!(notes[1].starts_with("USB bridge 174c:55aa presents 4096-byte logical sectors over a drive with 512-byte ones"), "{notes:?}");
        assert_eq!(notes.len(), 2, "equal physical sizes say nothing: {notes:?}");
    }

    #[test]
    fn quirk_only_raises() {
        let mut notes = Vec::new();
        let reported = Sourced::new(512, Source::Kernel);
        let got = apply_quirk(reported, Some("WDC WD20EARS-00M"), &mut notes);
        assert_eq!(got, Sourced::new(4096, Source::Quirk));
        let honest = Sourced::new(4096, Source::Ioctl);
        assert_eq!(apply_quirk(honest, Some("WDC WD20EARS-00M"), &mut notes), honest);
        assert_eq!(apply_quirk(reported, Some("WDC WD20EADS-00S"), &mut notes), reported);
        assert_eq!(apply_quirk(reported, None, &mut notes), reported);
        assert_eq!(notes.len(), 1, "{notes:?}");
    }
}
