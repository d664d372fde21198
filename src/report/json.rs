//! The JSON contract (version 1): fields may be added, none renamed.

use crate::align::Class;
use crate::audit::{
    DiskAudit, LayerAudit, OriginAudit, PartSource, PartitionAudit, StructureAudit, TableState,
    UnfinishedMove,
};
use crate::device::drive::Drive;
use crate::device::{DeviceKind, Source};
use crate::stack::Contents;
use crate::table::{PartKind, Problem};
use serde::Serialize;
use std::path::Path;

#[derive(Serialize)]
struct Document<'a> {
    version: u32,
    targets: Vec<Target<'a>>,
}

#[derive(Serialize)]
struct Target<'a> {
    path: &'a Path,
    name: Option<&'a str>,
    kind: Option<DeviceKind>,
    /// A VM image's format, read through QEMU; null for a disk or raw image.
    image_format: Option<&'a str>,
    /// The libvirt guest whose disk this is, and its name for it (vda).
    domain: Option<&'a str>,
    domain_disk: Option<&'a str>,
    size_bytes: Option<u64>,
    logical_sector_size: Option<u64>,
    logical_sector_source: Option<Source>,
    physical_sector_size: Option<u64>,
    physical_sector_source: Option<Source>,
    /// The physical sector verdicts were judged against.
    effective_physical_sector_size: Option<u64>,
    physical_sector_assumed: Option<bool>,
    alignment_offset: Option<u64>,
    alignment_offset_source: Option<Source>,
    minimum_io_size: Option<u64>,
    optimal_io_size: Option<u64>,
    rotational: Option<bool>,
    vendor: Option<&'a str>,
    model: Option<&'a str>,
    serial: Option<&'a str>,
    /// What the drive itself answered, beside the kernel's values above.
    drive: Option<&'a Drive>,
    table: TableState,
    /// The scheme when `table` is "unsupported".
    scheme: Option<&'a str>,
    /// What starts at byte 0 when `table` is "none".
    contents: Option<&'a Contents>,
    /// For `table` "none": the layers from byte 0, outermost first.
    layers: &'a [LayerAudit],
    /// For a stacked device (md, device-mapper): each way its bytes reach
    /// a disk under it, and where its byte 0 falls there.
    stack: &'a [OriginAudit],
    /// The stacked devices the kernel has open on the whole disk.
    holders: &'a [OriginAudit],
    problems: &'a [Problem],
    /// A move begun on this disk and not finished.
    unfinished_move: Option<&'a UnfinishedMove>,
    notes: &'a [String],
    error: Option<&'a str>,
    structures: &'a [StructureAudit],
    partitions: Vec<Partition<'a>>,
}

#[derive(Serialize)]
struct Partition<'a> {
    number: u32,
    start: u64,
    size: u64,
    start_bytes: u64,
    aligned_physical: bool,
    aligned_optimal: Option<bool>,
    aligned_1mib: bool,
    verdict: Class,
    kind: PartKind,
    type_id: &'a str,
    name: Option<&'a str>,
    source: PartSource,
    end_aligned_physical: bool,
    misalignment_bytes: u64,
    nearest_aligned_before: Option<u64>,
    nearest_aligned_after: Option<u64>,
    cost: Option<&'a str>,
    selected: bool,
    /// What it holds, outermost first.
    layers: &'a [LayerAudit],
    /// The stacked devices the kernel has open above it (sysfs holders),
    /// each where its bytes land on the disk.
    holders: &'a [OriginAudit],
    mountpoints: &'a [String],
}

pub fn render(audits: &[DiskAudit]) -> String {
    let doc = Document { version: 1, targets: audits.iter().map(target).collect() };
    let mut text =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text.push('\n');
    text
}

fn target(a: &DiskAudit) -> Target<'_> {
    let t = a.topology.as_ref();
    let g = a.geometry.as_ref();
    Target {
        path: &a.path,
        name: a.name.as_deref(),
        kind: a.kind,
        image_format: a.image_format,
        domain: a.domain.as_deref(),
        domain_disk: a.domain_disk.as_deref(),
        size_bytes: t.map(|t| t.size_bytes),
        logical_sector_size: t.map(|t| t.logical_sector_size.value),
        logical_sector_source: t.map(|t| t.logical_sector_size.source),
        physical_sector_size: t.map(|t| t.physical_sector_size.value),
        physical_sector_source: t.map(|t| t.physical_sector_size.source),
        effective_physical_sector_size: g.map(|g| g.physical),
        physical_sector_assumed: g.map(|g| g.physical_assumed),
        alignment_offset: t.map(|t| t.alignment_offset.value),
        alignment_offset_source: t.map(|t| t.alignment_offset.source),
        minimum_io_size: t.and_then(|t| t.minimum_io_size).map(|s| s.value),
        optimal_io_size: t.and_then(|t| t.optimal_io_size).map(|s| s.value),
        rotational: t.and_then(|t| t.rotational),
        vendor: t.and_then(|t| t.vendor.as_deref()),
        model: t.and_then(|t| t.model.as_deref()),
        serial: t.and_then(|t| t.serial.as_deref()),
        drive: t.and_then(|t| t.drive.as_ref()),
        table: a.table,
        scheme: a.scheme,
        contents: a.contents.as_ref(),
        layers: &a.layers,
        stack: &a.stack,
        holders: &a.holders,
        problems: &a.problems,
        unfinished_move: a.unfinished_move.as_ref(),
        notes: t.map(|t| t.notes.as_slice()).unwrap_or_default(),
        error: a.error.as_deref(),
        structures: &a.structures,
        partitions: a.partitions.iter().map(partition).collect(),
    }
}

fn partition(p: &PartitionAudit) -> Partition<'_> {
    let v = &p.verdict;
    Partition {
        number: p.partition.number,
        start: p.partition.start,
        size: p.partition.size,
        start_bytes: v.start_bytes,
        aligned_physical: v.aligned_physical,
        aligned_optimal: v.aligned_optimal,
        aligned_1mib: v.aligned_1mib,
        verdict: v.verdict,
        kind: p.partition.kind,
        type_id: &p.partition.type_id,
        name: p.partition.name.as_deref(),
        source: p.source,
        end_aligned_physical: v.end_aligned_physical,
        misalignment_bytes: v.misalignment_bytes,
        nearest_aligned_before: v.nearest_aligned_before,
        nearest_aligned_after: v.nearest_aligned_after,
        cost: v.cost.as_deref(),
        selected: p.selected,
        layers: &p.layers,
        holders: &p.holders,
        mountpoints: &p.mountpoints,
    }
}
