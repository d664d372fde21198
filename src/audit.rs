//! One audit per target: its topology and layout, judged start by start.

use crate::align::{Class, Geometry, Verdict};
use crate::device::libvirt::DomainDisk;
use crate::device::vmimage::{Access, Export, ImageFormat};
use crate::device::{self, Overrides, Source, Sourced, SysRoot, Target, TargetKind, Topology};
use crate::io::{ReadAt, ReadCache};
use crate::probe;
use crate::realign;
use crate::stack::{self, Contents, Layer, LayerVerdict};
use crate::table::{self, GptInfo, Label, MbrInfo, PartKind, Partition, Problem, Severity};
use serde::Serialize;
use std::fs::File;
use std::path::{Path, PathBuf};

/// How to judge.
#[derive(Clone, Debug, Default)]
pub struct AuditOptions {
    pub overrides: Overrides,
    /// Where unfinished and scheduled moves are recorded (by default
    /// $BLKALIGN_STATE_DIR, else /var/lib/blkalign).
    pub store: realign::state::Store,
    /// Believe a reported physical sector below 4096.
    pub trust_kernel: bool,
    /// Measure the physical sector and alignment offset by timing writes
    /// (non-destructive), and judge by what was measured.
    pub probe: bool,
}

/// What we know of the target's partition table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TableState {
    Mbr,
    Gpt,
    Bsd,
    Sun,
    Sgi,
    Mac,
    Amiga,
    Atari,
    /// A scheme recognised but not audited: exit 2.
    Unsupported,
    None,
    /// The table could not be read; partitions come from the kernel.
    Unknown,
}

impl TableState {
    pub fn as_str(self) -> &'static str {
        match self {
            TableState::Mbr => "mbr",
            TableState::Gpt => "gpt",
            TableState::Bsd => "bsd",
            TableState::Sun => "sun",
            TableState::Sgi => "sgi",
            TableState::Mac => "mac",
            TableState::Amiga => "amiga",
            TableState::Atari => "atari",
            TableState::Unsupported => "unsupported",
            TableState::None => "none",
            TableState::Unknown => "unknown",
        }
    }
}

impl From<Label> for TableState {
    fn from(label: Label) -> Self {
        match label {
            Label::Mbr => TableState::Mbr,
            Label::Gpt => TableState::Gpt,
            Label::Bsd => TableState::Bsd,
            Label::Sun => TableState::Sun,
            Label::Sgi => TableState::Sgi,
            Label::Mac => TableState::Mac,
            Label::Amiga => TableState::Amiga,
            Label::Atari => TableState::Atari,
            Label::Unsupported => TableState::Unsupported,
            Label::None => TableState::None,
        }
    }
}

/// Where a partition's position was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PartSource {
    /// The partition table on the medium.
    Table,
    /// The kernel's view in sysfs (the medium was unreadable).
    Kernel,
}

#[derive(Clone, Debug, Serialize)]
pub struct PartitionAudit {
    pub partition: Partition,
    pub source: PartSource,
    pub verdict: Verdict,
    /// The user named this partition.
    pub selected: bool,
    /// What it holds, outermost first, each judged where its data starts.
    pub layers: Vec<LayerAudit>,
    /// The stacked devices the kernel has open above it (md, device-mapper,
    /// and what sits on those), each where its bytes land on this disk.
    pub holders: Vec<OriginAudit>,
    /// Where the kernel has it mounted ("[SWAP]" for swap), as lsblk's
    /// MOUNTPOINTS; empty for images and sysfs fixtures.
    pub mountpoints: Vec<String>,
}

impl PartitionAudit {
    /// Not the extended container (only EBRs) nor an entry that stands
    /// for the label itself (Sun's whole disk, Apple's map).
    pub(crate) fn holds_data(&self) -> bool {
        self.partition.kind != PartKind::Extended && !table::holds_no_data(&self.partition)
    }
}

/// A layer of a stack and its verdict.
#[derive(Clone, Debug, Serialize)]
pub struct LayerAudit {
    #[serde(flatten)]
    pub layer: Layer,
    #[serde(flatten)]
    pub verdict: LayerVerdict,
}

/// A way a stacked device (md, device-mapper) reaches a disk under it,
/// judged against that disk: where the device's byte 0 falls relative to
/// the disk's physical sectors.
#[derive(Clone, Debug, Serialize)]
pub struct OriginAudit {
    #[serde(flatten)]
    pub origin: device::Origin,
    /// The disk's physical sector, as judged (4096 when it claims less,
    /// unless trusted).
    pub physical_sector_size: u64,
    /// The device's alignment offset by this way down: bytes from its
    /// byte 0 to the first on a physical boundary of the disk. The kernel's
    /// `alignment_offset` when all ways agree; it says -1 when they do not.
    pub alignment_offset: Option<u64>,
    /// None when the mapping is unknown.
    pub aligned_physical: Option<bool>,
    /// Bytes past the last physical boundary of the disk.
    pub misalignment_bytes: Option<u64>,
    pub verdict: Option<Class>,
}

/// A table structure whose position is worth showing (EBRs, GPT arrays).
#[derive(Clone, Debug, Serialize)]
pub struct StructureAudit {
    pub what: &'static str,
    pub lba: u64,
    pub aligned_physical: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct DiskAudit {
    pub path: PathBuf,
    pub name: Option<String>,
    pub kind: Option<device::DeviceKind>,
    /// A VM image's format ("qcow2", ...), read through QEMU; None for a
    /// disk or a raw image.
    pub image_format: Option<&'static str>,
    /// The libvirt guest whose disk this is, and its name for it (vda).
    pub domain: Option<String>,
    pub domain_disk: Option<String>,
    pub topology: Option<Topology>,
    pub geometry: Option<Geometry>,
    pub table: TableState,
    pub problems: Vec<Problem>,
    pub partitions: Vec<PartitionAudit>,
    pub structures: Vec<StructureAudit>,
    pub gpt: Option<GptInfo>,
    pub mbr: Option<MbrInfo>,
    /// The scheme of an unsupported table ("pc98", ...).
    pub scheme: Option<&'static str>,
    /// What starts at byte 0 of a disk without a table.
    pub contents: Option<Contents>,
    /// The layers of a disk without a table, outermost first.
    pub layers: Vec<LayerAudit>,
    /// For a stacked device: the ways its bytes reach the disks under it.
    pub stack: Vec<OriginAudit>,
    /// The stacked devices the kernel has open on the whole disk.
    pub holders: Vec<OriginAudit>,
    /// Why part of this target could not be checked.
    pub error: Option<String>,
    /// A move of a partition of this disk that was begun and not finished
    /// (problem `realign_unfinished`).
    pub unfinished_move: Option<UnfinishedMove>,
}

/// A partition half moved: where from, where to, and its journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnfinishedMove {
    pub partition: u32,
    pub from: u64,
    pub to: u64,
    pub journal: PathBuf,
}

impl DiskAudit {
    fn failed(path: &Path, error: String) -> DiskAudit {
        DiskAudit { error: Some(error), ..DiskAudit::empty(path) }
    }

    fn empty(path: &Path) -> DiskAudit {
        DiskAudit {
            path: path.to_path_buf(),
            name: None,
            kind: None,
            image_format: None,
            domain: None,
            domain_disk: None,
            topology: None,
            geometry: None,
            table: TableState::Unknown,
            problems: Vec::new(),
            unfinished_move: None,
            partitions: Vec::new(),
            structures: Vec::new(),
            gpt: None,
            mbr: None,
            scheme: None,
            contents: None,
            layers: Vec::new(),
            stack: Vec::new(),
            holders: Vec::new(),
            error: None,
        }
    }

    /// The partitions that hold data. The extended container holds only
    /// EBRs, and some labels' entries (Sun's whole disk, Apple's map) hold
    /// nothing: their starts cost nothing and never count.
    pub(crate) fn data_partitions(&self) -> impl Iterator<Item = &PartitionAudit> + Clone {
        self.partitions.iter().filter(|p| p.holds_data())
    }

    /// The worst verdict among data partitions, the layers they (or a
    /// disk without a table) hold, and a stacked device's ways down.
    pub fn worst(&self) -> Option<Class> {
        let data = self.data_partitions();
        let layers = data.clone().flat_map(|p| &p.layers).chain(&self.layers);
        let holders = data.clone().flat_map(|p| &p.holders).chain(&self.holders);
        let stack = self.stack.iter().chain(holders).filter_map(|o| o.verdict);
        data.map(|p| p.verdict.verdict).chain(layers.map(|l| l.verdict.verdict)).chain(stack).max()
    }

    /// Some problem makes data unreachable or not where the table says.
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(|p| p.severity == Severity::Error)
    }
}

/// Audit every whole disk on this machine.
pub fn audit_machine(
    root: &SysRoot,
    opts: &AuditOptions,
) -> Result<Vec<DiskAudit>, device::DeviceError> {
    Ok(device::list_disks(root)?.iter().map(|t| audit_target(root, t, opts)).collect())
}

/// Audit what the user named: a disk, a partition (its disk) or an image.
pub fn audit_path(root: &SysRoot, path: &Path, opts: &AuditOptions) -> DiskAudit {
    audit_path_shared(root, path, opts, false)
}

/// A libvirt guest's disk, named for its guest; a running guest's image is
/// read past its QEMU's lock, and said to be.
pub fn audit_domain_disk(root: &SysRoot, disk: &DomainDisk, opts: &AuditOptions) -> DiskAudit {
    let mut audit = audit_path_shared(root, &disk.source, opts, disk.running);
    audit.domain = Some(disk.domain.clone());
    audit.domain_disk = Some(disk.target.clone());
    if let (true, Some(t)) = (disk.running && audit.image_format.is_some(), &mut audit.topology) {
        t.notes.push(
            "the guest is running: its image was read past its lock, so what the guest has not \
             written back yet is not seen"
                .into(),
        );
    }
    audit
}

fn audit_path_shared(root: &SysRoot, path: &Path, opts: &AuditOptions, share: bool) -> DiskAudit {
    match device::resolve(root, path) {
        Ok(target) => audit_target(root, &target, opts),
        Err(device::DeviceError::VmImage { format, .. }) => {
            audit_vm_image(root, path, &format, opts, share)
        }
        Err(err) => DiskAudit::failed(path, err.to_string()),
    }
}

/// The guest's virtual disk of a VM image, read-only through QEMU's format
/// driver, reported under the image's own path.
fn audit_vm_image(
    root: &SysRoot,
    path: &Path,
    format: &ImageFormat,
    opts: &AuditOptions,
    share: bool,
) -> DiskAudit {
    let access = if share { Access::ReadShared } else { Access::Read };
    let export = match Export::start(path, format, access) {
        Ok(export) => export,
        Err(err) => return DiskAudit::failed(path, err.to_string()),
    };
    let target = Target {
        path: export.file().to_path_buf(),
        name: None,
        kind: TargetKind::Image,
        selected_partition: None,
    };
    let mut audit = audit_target(root, &target, opts);
    audit.path = path.to_path_buf();
    audit.image_format = Some(format.name());
    if let Some(t) = &mut audit.topology {
        t.notes.insert(
            0,
            format!(
                "a {} image: its virtual disk read through qemu-storage-daemon, read-only",
                format.name()
            ),
        );
    }
    audit
}

pub fn audit_target(root: &SysRoot, target: &Target, opts: &AuditOptions) -> DiskAudit {
    let mut audit = DiskAudit::empty(&target.path);
    audit.name = target.name.clone();
    audit.kind = Some(device::device_kind(root, target));
    let file = device::open(target);
    let mut topology = match crate::open::topology(
        root,
        target,
        file.as_ref().ok().map(|f| f.file()),
        &opts.overrides,
    ) {
        Ok(t) => t,
        Err(err) => {
            audit.error = Some(err.to_string());
            return audit;
        }
    };
    if let (true, TargetKind::Disk, Ok(file)) = (opts.probe, target.kind, &file) {
        apply_probe(&mut topology, root, file.file(), &target.path);
    }
    if opts.trust_kernel
        && target.kind == TargetKind::Image
        && topology.physical_sector_size.source == Source::Assumed
    {
        topology.notes.push(
            "--trust-kernel: an image has no kernel values to trust; judged as without it \
             (--physical-sector-size says what the drive it is for has)"
                .into(),
        );
    }
    let geometry = topology.geometry(opts.trust_kernel);
    let logical = topology.logical_sector_size.value;
    if let (Some(name), TargetKind::Disk) = (&target.name, target.kind) {
        audit.stack = follow_slaves(root, name, opts.trust_kernel);
    }
    let offsets = stacked_offsets(&topology, &geometry, &audit.stack);
    // Everything from here on reads; the probe above was the only writer.
    let file = file.as_ref().map(|f| ReadCache::new(f, topology.size_bytes));
    let found = match &file {
        Ok(file) => match read_table(&mut audit, file, &topology) {
            // Better the kernel's view than nothing when the table is unusable.
            None => kernel_partitions(root, target, logical),
            Some(partitions) => partitions,
        },
        Err(err) => {
            audit.error = Some(format!("unreadable: {err}"));
            kernel_partitions(root, target, logical)
        }
    };
    if let (Ok(file), TargetKind::Disk) = (&file, target.kind) {
        check_kernel_view(&mut audit, &found, root, target, &topology);
        check_sector_size(&mut audit, file, target, &topology);
    }
    if let Ok(file) = &file {
        check_unfinished_move(&mut audit, &opts.store, root, target, &topology, file);
        check_move_at_boot(&mut audit, &opts.store, root, target, &topology);
    }
    judge(&mut audit, found, &geometry, target.selected_partition);
    if let Ok(file) = &file {
        walk_layers(&mut audit, file, &geometry, &offsets, topology.size_bytes);
        if target.kind == TargetKind::Disk {
            follow_open_luks(&mut audit, root, target, &geometry);
            follow_holders(&mut audit, root, target, opts.trust_kernel);
        }
        mark_compensated(&mut audit);
    }
    audit.topology = Some(topology);
    audit.geometry = Some(geometry);
    audit
}

/// Replace the reported geometry by the measured one, unless overridden.
fn apply_probe(topology: &mut Topology, root: &SysRoot, file: &File, path: &Path) {
    let opts = probe::ProbeOptions { sys: root.sys.clone(), ..Default::default() };
    match probe::probe(file, &opts) {
        Ok(result) => adopt_probe(topology, &result, path),
        Err(err) => {
            topology.notes.push(format!("cannot probe: {err}; judging by the reported geometry"))
        }
    }
}

/// The probe's finding in `topology`, noted; a penalty found with less
/// than [`probe::MIN_CONFIDENCE`] is noted and not judged by: timings
/// taken beside other work once made a 4096-byte drive look like 16384.
fn adopt_probe(topology: &mut Topology, result: &probe::ProbeResult, path: &Path) {
    let sentence = result.sentence(path);
    let confidence = result.confidence;
    if result.penalty.is_some() && confidence < probe::MIN_CONFIDENCE {
        topology.notes.push(format!(
            "probe: {sentence} (confidence {confidence:.2}, below {:.2}: judging by the reported geometry; rerun it when the disk and the machine are idle)",
            probe::MIN_CONFIDENCE
        ));
        return;
    }
    topology.notes.push(format!("probe: {sentence} (confidence {confidence:.2})"));
    if result.penalty.is_none() {
        return;
    }
    if topology.physical_sector_size.source != Source::Override {
        topology.physical_sector_size = Sourced::new(result.physical_sector_size, Source::Probe);
    }
    if topology.alignment_offset.source != Source::Override {
        topology.alignment_offset = Sourced::new(result.alignment_offset, Source::Probe);
    }
}

/// Read the table into `audit`, returning its partitions; None when it
/// could not be read (the error is in `audit`).
fn read_table(
    audit: &mut DiskAudit,
    file: &dyn ReadAt,
    topology: &Topology,
) -> Option<Vec<Partition>> {
    let sector = topology.logical_sector_size.value;
    match table::read(file, sector, topology.size_bytes) {
        Ok(layout) => {
            audit.table = layout.label.into();
            audit.problems = layout.problems;
            audit.gpt = layout.gpt;
            audit.mbr = layout.mbr;
            audit.scheme = layout.scheme;
            audit.contents = layout.contents;
            if let Some(scheme) = audit.scheme {
                audit.error = Some(format!(
                    "holds a partition table of the {scheme} scheme, which blkalign recognises \
                     but does not audit"
                ));
            }
            Some(layout.partitions)
        }
        Err(err) => {
            audit.error = Some(err.to_string());
            None
        }
    }
}

/// A realign interrupted on this disk leaves a partition half moved: the
/// audit is not complete until it is finished.
fn check_unfinished_move(
    audit: &mut DiskAudit,
    store: &realign::state::Store,
    root: &SysRoot,
    target: &Target,
    topology: &Topology,
    file: &dyn ReadAt,
) {
    let id = device::identity(root, target, topology);
    let Some((record, journal)) = store.unfinished_on(file, &id) else {
        return;
    };
    let m = &journal.record;
    let message = format!(
        "partition {} is being moved from LBA {} to {} and the move is unfinished (journal {})",
        m.partition,
        m.old_start,
        m.new_start,
        record.journal.display(),
    );
    audit.unfinished_move = Some(UnfinishedMove {
        partition: m.partition,
        from: m.old_start,
        to: m.new_start,
        journal: record.journal.clone(),
    });
    // A problem found (exit 1), said once: the audit itself completed.
    audit.problems.push(Problem::new("realign_unfinished", message));
}

/// A move scheduled for the next boot on this disk (`realign --at-boot`):
/// the disk stays misaligned until that boot, and says why.
fn check_move_at_boot(
    audit: &mut DiskAudit,
    store: &realign::state::Store,
    root: &SysRoot,
    target: &Target,
    topology: &Topology,
) {
    let path = store.boot_plan();
    let Ok(plan) = realign::boot::BootPlan::read(&path) else { return };
    if plan.identity != device::identity(root, target, topology) {
        return;
    }
    let moves: Vec<String> = plan
        .moves
        .iter()
        .map(|s| format!("partition {} from LBA {} to {}", s.partition, s.from, s.to))
        .collect();
    let dir = plan.journal.mountpoint.join(realign::boot::DIR);
    let last = realign::boot::BootResult::read(&dir);
    let at_last_boot = match last.as_ref().map(|r| (r.state, r.reason.as_deref())) {
        Some((realign::boot::BootState::Refused, why)) => format!(
            "; the last boot refused it and wrote nothing: {}",
            why.unwrap_or("no reason recorded")
        ),
        Some((realign::boot::BootState::Stopped, why)) => {
            format!("; the last boot stopped it half-way: {}", why.unwrap_or("no reason recorded"))
        }
        _ => String::new(),
    };
    audit.problems.push(Problem::new(
        "realign_at_boot",
        format!(
            "a move of {} is scheduled for the next boot of kernel {} ({}){at_last_boot}",
            moves.join(", "),
            plan.kernel,
            path.display()
        ),
    ));
}

/// A table written for the other logical sector size puts every partition
/// somewhere else for the kernel (and for the verdicts above): say so, and
/// what rewrites it for this device.
fn check_sector_size(
    audit: &mut DiskAudit,
    file: &dyn ReadAt,
    target: &Target,
    topology: &Topology,
) {
    let logical = topology.logical_sector_size.value;
    let Some(other) = table::written_for(file, topology.size_bytes, logical) else { return };
    let path = target.path.display();
    audit.problems.push(Problem::new(
        "table_sector_size",
        format!(
            "the partition table was written for {other}-byte sectors, but {path} presents \
             {logical}-byte ones (a disk moved into or out of a USB enclosure that changes \
             the sector size, or attached with another one): the kernel and these verdicts read its \
             partitions at the wrong places. Attached like this for good, `blkalign rescale \
             {path} --from {other}` rewrites the table for it (a dry run; each partition keeps \
             its bytes); else attach the disk where it presents {other}-byte sectors"
        ),
    ));
}

/// The kernel's partitions, for a disk whose medium cannot be read.
fn kernel_partitions(root: &SysRoot, target: &Target, logical: u64) -> Vec<Partition> {
    let Some(name) = &target.name else { return Vec::new() };
    device::kernel_partitions(root, name)
        .into_iter()
        .map(|k| Partition {
            number: k.number,
            start: k.start_bytes / logical,
            size: k.size_bytes / logical,
            kind: PartKind::Unknown,
            type_id: String::new(),
            name: None,
            ebr: None,
        })
        .collect()
}

/// Compare the table on the medium with what the kernel is using: they
/// differ after an edit the kernel has not re-read. What the kernel's own
/// rules leave out of a table it has read is no such difference.
fn check_kernel_view(
    audit: &mut DiskAudit,
    found: &[Partition],
    root: &SysRoot,
    target: &Target,
    topology: &Topology,
) {
    let Some(name) = &target.name else { return };
    if !matches!(audit.table, TableState::Mbr | TableState::Gpt) {
        return;
    }
    let extended: Vec<u32> =
        found.iter().filter(|p| p.kind == PartKind::Extended).map(|p| p.number).collect();
    let mut ours = kernel_would_make(audit, found, topology);
    let mut kernel: Vec<(u32, u64, u64)> = device::kernel_partitions(root, name)
        .into_iter()
        .filter(|k| !extended.contains(&k.number))
        .map(|k| (k.number, k.start_bytes, k.size_bytes))
        .collect();
    ours.sort_unstable();
    kernel.sort_unstable();
    if ours == kernel {
        return;
    }
    let message = if target.is_mapper() {
        // The kernel makes no partitions on a device-mapper device: kpartx
        // maps them as dm devices over it, its holders.
        if device::is_held(root, name) {
            return;
        }
        format!(
            "no device maps these partitions: the kernel makes none on a device-mapper device \
             (kpartx -a {} maps them as {})",
            target.path.display(),
            device::mapper_partition(&target.path, 1).unwrap_or_default().display()
        )
    } else if kernel.is_empty() {
        format!(
            "the kernel knows none of these partitions: it has not read this table (partx -a {})",
            target.path.display()
        )
    } else {
        "the kernel's partitions differ from the table on the disk: the table changed and was \
         not re-read (partprobe, or reboot if the disk is in use)"
            .to_string()
    };
    audit.problems.push(Problem::new("kernel_differs", message));
}

/// The data partitions (number, start, size in bytes) the kernel makes of
/// this table, checked against Linux 6.1 in the kernel lab: none of a GPT
/// it ignores unbooted with `gpt` (block/partitions/efi.c,
/// find_valid_gpt); no GPT entry that ends past the last LBA (efi.c,
/// is_pte_valid); no MBR partition that starts past the end, and one that
/// ends past it cut there (block/partitions/core.c, blk_add_partition).
fn kernel_would_make(
    audit: &DiskAudit,
    found: &[Partition],
    topology: &Topology,
) -> Vec<(u32, u64, u64)> {
    const IGNORED_GPT: [&str; 3] =
        ["gpt_primary_invalid", "gpt_ignored_by_linux", "gpt_without_protective_mbr"];
    let gpt = audit.table == TableState::Gpt;
    if gpt && audit.problems.iter().any(|p| IGNORED_GPT.contains(&p.code)) {
        return Vec::new();
    }
    let logical = topology.logical_sector_size.value;
    let disk = topology.size_bytes;
    found
        .iter()
        .filter(|p| p.kind != PartKind::Extended)
        .filter_map(|p| {
            let start = p.start.checked_mul(logical)?;
            let size = p.size.checked_mul(logical)?;
            let past_end = start.checked_add(size)? > disk;
            match (start < disk, past_end, gpt) {
                (false, _, _) | (true, true, true) => None,
                (true, true, false) => Some((p.number, start, disk - start)),
                (true, false, _) => Some((p.number, start, size)),
            }
        })
        .collect()
}

fn judge(audit: &mut DiskAudit, found: Vec<Partition>, geometry: &Geometry, selected: Option<u32>) {
    let source =
        if audit.table == TableState::Unknown { PartSource::Kernel } else { PartSource::Table };
    for partition in found {
        let Some(verdict) = geometry.judge(partition.start, partition.size) else {
            audit.problems.push(Problem::new(
                "position_overflow",
                format!("partition {} lies beyond any addressable byte", partition.number),
            ));
            continue;
        };
        let selected = selected == Some(partition.number);
        audit.partitions.push(PartitionAudit {
            partition,
            source,
            verdict,
            selected,
            layers: Vec::new(),
            holders: Vec::new(),
            mountpoints: Vec::new(),
        });
    }
    if let Some(n) = selected.filter(|n| !audit.partitions.iter().any(|p| p.partition.number == *n))
    {
        audit.problems.push(Problem::new(
            "selected_not_in_table",
            format!("partition {n} is known to the kernel but not found in the table"),
        ));
    }
    audit.structures = structures(audit, geometry);
}

/// Find and judge what each data partition holds, and what a disk without
/// a table holds from byte 0, against each alignment offset in `offsets`.
fn walk_layers(
    audit: &mut DiskAudit,
    file: &dyn ReadAt,
    geometry: &Geometry,
    offsets: &[u64],
    size_bytes: u64,
) {
    let judged = |at: u64, len: u64| judge_layers(stack::walk(file, at, len), geometry, offsets);
    let ss = geometry.logical;
    for p in &mut audit.partitions {
        if !p.holds_data() {
            continue;
        }
        let part = &p.partition;
        if let (Some(at), Some(len)) = (part.start.checked_mul(ss), part.size.checked_mul(ss)) {
            // Only what lies on the disk: a partition may claim more.
            p.layers = judged(at, len.min(size_bytes.saturating_sub(at)));
        }
    }
    if audit.table == TableState::None {
        audit.layers = judged(0, size_bytes);
    }
}

/// The layers in the `len` bytes at byte `at` of `dev`, each judged where
/// its data starts.
pub fn layers_at(dev: &dyn ReadAt, at: u64, len: u64, geometry: &Geometry) -> Vec<LayerAudit> {
    judge_layers(stack::walk(dev, at, len), geometry, &[geometry.alignment_offset])
}

/// Each layer judged against every alignment offset in `offsets` (one per
/// way down a stack that the kernel could not fold into one), the worst
/// verdict kept: a mirror's write waits for its slowest member.
fn judge_layers(layers: Vec<Layer>, geometry: &Geometry, offsets: &[u64]) -> Vec<LayerAudit> {
    let judge = |layer: Layer| {
        let verdict = offsets
            .iter()
            .map(|&offset| stack::judge(&layer, geometry.physical, offset, geometry.optimal_io))
            .max_by_key(|v| v.verdict)
            .unwrap_or_else(|| {
                let offset = geometry.alignment_offset;
                stack::judge(&layer, geometry.physical, offset, geometry.optimal_io)
            });
        LayerAudit { layer, verdict }
    };
    layers.into_iter().map(judge).collect()
}

/// The ways a stacked device reaches the disks under it, each judged on
/// its disk.
fn follow_slaves(root: &SysRoot, name: &str, trust_kernel: bool) -> Vec<OriginAudit> {
    let judge = |o| judge_origin(root, o, trust_kernel);
    device::origins(root, name).into_iter().map(judge).collect()
}

/// What the kernel has stacked on each data partition and on the whole
/// disk: a device-mapper table leaves no header to find.
fn follow_holders(audit: &mut DiskAudit, root: &SysRoot, target: &Target, trust_kernel: bool) {
    let Some(name) = &target.name else { return };
    let judge = |o| judge_origin(root, o, trust_kernel);
    // A fixture's device numbers would be looked up among the host's mounts.
    let real = *root == SysRoot::real();
    for p in audit.partitions.iter_mut().filter(|p| p.holds_data()) {
        let found = device::held(root, name, Some(p.partition.number));
        p.holders = found.into_iter().map(judge).collect();
        if real {
            p.mountpoints = device::exclusive::mountpoints(root, name, p.partition.number);
        }
    }
    audit.holders = device::held(root, name, None).into_iter().map(judge).collect();
}

/// Where a way down puts a stacked device's byte 0 on its disk, judged
/// against the disk's physical sector and alignment offset.
fn judge_origin(root: &SysRoot, origin: device::Origin, trust_kernel: bool) -> OriginAudit {
    let disk = root.sys.join("block").join(&origin.disk);
    let number = |attr: &str| device::sysfs::read_number(&disk.join(attr));
    let reported = number("queue/physical_block_size").unwrap_or(0);
    // -1 (a disk that cannot be aligned) reads as no number: 0.
    let disk_offset = number("alignment_offset").unwrap_or(0);
    let p = Geometry::new(1, reported, disk_offset, None, trust_kernel).physical;
    // Device byte b lies at disk byte b - device_offset + on_disk, on a
    // boundary when that is disk_offset (mod p); u128 cannot overflow.
    let offset = origin.disk_offset_bytes.and_then(|on_disk| {
        let [p, a, d, o] = [p, disk_offset, origin.device_offset_bytes, on_disk].map(u128::from);
        u64::try_from((a % p + d % p + p - o % p) % p).ok()
    });
    let aligned = offset.map(|o| o == 0);
    OriginAudit {
        physical_sector_size: p,
        alignment_offset: offset,
        aligned_physical: aligned,
        misalignment_bytes: offset.map(|o| (p - o) % p),
        verdict: aligned.map(|a| if a { Class::Aligned } else { Class::Misaligned }),
        origin,
    }
}

/// The alignment offsets to judge a device's layers against: the
/// topology's, unless the kernel gave none (it says -1 when a stack's ways
/// down disagree) and the stack says what each way makes of it.
fn stacked_offsets(topology: &Topology, geometry: &Geometry, stack: &[OriginAudit]) -> Vec<u64> {
    let mut offsets: Vec<u64> = stack.iter().filter_map(|o| o.alignment_offset).collect();
    offsets.sort_unstable();
    offsets.dedup();
    if topology.alignment_offset.source != Source::Assumed || offsets.is_empty() {
        return vec![geometry.alignment_offset];
    }
    offsets
}

/// On a live system, what an opened LUKS partition holds is read through
/// its dm-crypt device (sysfs `holders/`), whose byte 0 sits at the
/// payload offset on the disk: the header walk stops at the ciphertext.
fn follow_open_luks(audit: &mut DiskAudit, root: &SysRoot, target: &Target, geometry: &Geometry) {
    let Some(name) = &target.name else { return };
    for p in &mut audit.partitions {
        let Some(luks) = p.layers.last().filter(|l| l.layer.kind == stack::Kind::Luks) else {
            continue;
        };
        let (base, depth) = (luks.layer.absolute_offset_bytes, luks.layer.depth.saturating_add(1));
        let Some((node, size)) = device::crypt_holder(root, name, p.partition.number) else {
            continue;
        };
        let Ok(inner) = device::open_path(&node) else { continue };
        let mut found = stack::walk(&inner, 0, size);
        for layer in &mut found {
            layer.depth = layer.depth.saturating_add(depth);
            layer.absolute_offset_bytes = layer.absolute_offset_bytes.saturating_add(base);
            layer.note.get_or_insert_with(|| format!("read through {}", node.display()));
        }
        p.layers.extend(judge_layers(found, geometry, &[geometry.alignment_offset]));
    }
}

/// A misaligned partition whose data areas, and every mapping the kernel
/// holds open on it, are aligned is judged by its data: compensated.
fn mark_compensated(audit: &mut DiskAudit) {
    for p in audit.partitions.iter_mut().filter(|p| p.verdict.verdict == Class::Misaligned) {
        let held_aligned = p.holders.iter().all(|o| o.verdict != Some(Class::Misaligned));
        if held_aligned && stack::compensates(p.layers.iter().map(|l| (&l.layer, &l.verdict))) {
            p.verdict.verdict = Class::Compensated;
        }
    }
}

/// EBRs, the GPT entry array and the first usable LBA, with their alignment.
fn structures(audit: &DiskAudit, geometry: &Geometry) -> Vec<StructureAudit> {
    let mut found: Vec<(&'static str, u64)> = Vec::new();
    if let Some(mbr) = &audit.mbr {
        found.extend(mbr.ebrs.iter().map(|&lba| ("ebr", lba)));
    }
    if let Some(gpt) = &audit.gpt {
        found.push(("gpt_entries", gpt.entries_lba));
        found.push(("gpt_first_usable", gpt.first_usable_lba));
    }
    found
        .into_iter()
        .filter_map(|(what, lba)| {
            let v = geometry.judge(lba, 1)?;
            Some(StructureAudit { what, lba, aligned_physical: v.aligned_physical })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(physical: u64, offset: u64, confidence: f64) -> probe::ProbeResult {
        probe::ProbeResult {
            physical_sector_size: physical,
            alignment_offset: offset,
            lowest_aligned_lba: offset / 512,
            confidence,
            kernel: None,
            agrees_with_kernel: false,
            elapsed_s: 1.0,
            logical_sector_size: 512,
            penalty: Some(3.9),
            writes: 100,
        }
    }

    #[test]
    fn a_sure_probe_replaces_the_reported_geometry() {
        let mut topo = Topology::reported(512, 512, 0);
        adopt_probe(&mut topo, &found(4096, 3584, 0.9), Path::new("/dev/sdz"));
        assert_eq!(topo.physical_sector_size, Sourced::new(4096, Source::Probe));
        assert_eq!(topo.alignment_offset, Sourced::new(3584, Source::Probe));
        assert_eq!(topo.notes.len(), 1, "{:?}", topo.notes);
    }

    #[test]
    fn an_unsure_probe_is_noted_and_not_judged_by() {
        let mut topo = Topology::reported(512, 512, 0);
        adopt_probe(&mut topo, &found(16384, 3584, 0.33), Path::new("/dev/sdz"));
        assert_eq!(topo.physical_sector_size, Sourced::new(512, Source::Kernel));
        assert_eq!(topo.alignment_offset, Sourced::new(0, Source::Kernel));
        assert!(topo.notes[0].contains("confidence 0.33, below 0.50"), "{:?}", topo.notes);
    }

    #[test]
    fn an_override_outranks_even_a_sure_probe() {
        let mut topo = Topology::reported(512, 512, 0);
        topo.physical_sector_size = Sourced::new(8192, Source::Override);
        adopt_probe(&mut topo, &found(4096, 3584, 1.0), Path::new("/dev/sdz"));
        assert_eq!(topo.physical_sector_size, Sourced::new(8192, Source::Override));
        assert_eq!(topo.alignment_offset, Sourced::new(3584, Source::Probe));
    }
}
