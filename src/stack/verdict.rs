//! Judging a layer: its absolute data offset against the physical sector
//! and optimal I/O size (the arithmetic and words are [`crate::align`]'s),
//! and the header settings that cost read-modify-write even on an aligned
//! offset: XFS 512-byte sectors, bcache 512-byte blocks or ZFS ashift=9 on
//! a 4 KiB drive, ext4 without stride on a striped device, blocks smaller
//! than a sector.

use super::layers::{Details, Layer};
use crate::align::{Class, Geometry};
use serde::Serialize;

/// What we say about one layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayerVerdict {
    pub aligned_physical: bool,
    /// None when no optimal I/O size is known.
    pub aligned_optimal: Option<bool>,
    /// `misaligned` when its data is off a physical boundary; `suboptimal`
    /// when off the optimal I/O size or when `finding` has one.
    pub verdict: Class,
    /// Bytes past the last physical boundary (0 when aligned).
    pub misalignment_bytes: u64,
    /// For a misaligned offset: the cost in words.
    pub cost: Option<String>,
    /// Findings from the layer's own settings, whatever its offset.
    pub finding: Option<String>,
}

/// Judge `layer` on a device whose effective physical sector is `physical`
/// bytes (already raised to 4096 when assumed), first boundary at
/// `alignment_offset`, optimal I/O `optimal` (a RAID stripe) when known.
pub fn judge(
    layer: &Layer,
    physical: u64,
    alignment_offset: u64,
    optimal: Option<u64>,
) -> LayerVerdict {
    // Byte-granular: one "LBA" per byte, so judge's start is the offset.
    let geometry = Geometry::new(1, physical, alignment_offset, optimal, true);
    let v = geometry.judge(layer.absolute_offset_bytes, 0);
    let aligned_physical = v.as_ref().is_some_and(|v| v.aligned_physical);
    let aligned_optimal = v.as_ref().and_then(|v| v.aligned_optimal);
    let findings = findings(layer, geometry.physical, geometry.optimal_io);
    let verdict = if !aligned_physical {
        Class::Misaligned
    } else if aligned_optimal == Some(false) || !findings.is_empty() {
        Class::Suboptimal
    } else {
        Class::Aligned
    };
    LayerVerdict {
        aligned_physical,
        aligned_optimal,
        verdict,
        misalignment_bytes: v.as_ref().map_or(0, |v| v.misalignment_bytes),
        cost: v.and_then(|v| v.cost),
        finding: (!findings.is_empty()).then(|| findings.join("; ")),
    }
}

/// Settings of the layer itself that make writes read-modify-write or
/// ignore the stripe, in words.
fn findings(layer: &Layer, physical: u64, optimal: Option<u64>) -> Vec<String> {
    let mut found = Vec::new();
    match layer.details {
        Details::Xfs { sector_bytes, .. } if sector_bytes < physical => found.push(format!(
            "XFS was made with {sector_bytes}-byte sectors on a {physical}-byte physical device: \
             its log and metadata writes are read-modify-write; only recreating it \
             (mkfs.xfs -s size={physical}) changes that"
        )),
        Details::Zfs { ashift } => {
            let block = u32::try_from(ashift).ok().and_then(|a| 1u64.checked_shl(a));
            if let Some(block) = block.filter(|&b| b < physical) {
                found.push(format!(
                    "ashift={ashift} ({block}-byte blocks) on a {physical}-byte physical device: \
                     small writes are read-modify-write; ashift is fixed per vdev: recreate it \
                     with ashift={}",
                    physical.trailing_zeros()
                ));
            }
        }
        Details::Bcache { block_bytes, .. } if block_bytes < physical => found.push(format!(
            "bcache was made with {block_bytes}-byte blocks on a {physical}-byte physical device: \
             /dev/bcacheN presents {block_bytes}-byte sectors, so what is made on it may write \
             less than a physical sector (read-modify-write); only remaking it \
             (make-bcache -w {physical}) changes that"
        )),
        Details::Ext { block_bytes, stride_blocks: None, .. } => {
            if let Some(io) = optimal.filter(|&io| io > physical) {
                found.push(format!(
                    "no RAID stride on a device with {io}-byte optimal I/O: ext4 does not spread \
                     its allocations over the stripe (tune2fs -E stride=CHUNK/{block_bytes},\
                     stripe_width={})",
                    io / block_bytes.max(1)
                ));
            }
        }
        _ => {}
    }
    let file_system = !matches!(
        layer.details,
        Details::LvmPv { .. }
            | Details::LvmLv { .. }
            | Details::Luks { .. }
            | Details::Md { .. }
            | Details::Bcache { .. }
    );
    if let Some(unit) = layer.unit_bytes.filter(|&u| file_system && u < physical) {
        found.push(format!(
            "its {unit}-byte allocation unit is smaller than the {physical}-byte physical sector: \
             writing one alone is read-modify-write"
        ));
    }
    found
}

/// Whether a partition's layers make up for a start off a physical
/// boundary: the outermost keeps its data a fixed distance into the
/// partition (LUKS payload, LVM `pe_start`, md or bcache data offset, FAT
/// data area) and every layer's data lands on a boundary. cryptsetup and
/// LVM place their data that way on a misaligned partition; moving the
/// partition would then misalign the data.
pub fn compensates<'a>(mut layers: impl Iterator<Item = (&'a Layer, &'a LayerVerdict)>) -> bool {
    match layers.next() {
        Some((outer, v)) if outer.depth == 0 && outer.offset_bytes > 0 && v.aligned_physical => {
            layers.all(|(_, v)| v.aligned_physical)
        }
        _ => false,
    }
}
