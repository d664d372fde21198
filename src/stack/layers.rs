//! The layers a partition holds, outermost first, each with where its data
//! starts inside its container and on the disk: partition → md → bcache →
//! LVM PV → logical volume → file system, or partition → LUKS (encrypted:
//! the walk stops). Found from the on-disk headers alone, so it works on images.

use super::signature::{identify, Contents, Kind, Region};
use super::{bcache, fs, luks, lvm, md};
use crate::io::ReadAt;
use serde::Serialize;

/// Deeper or wider stacks than these are not real: guards against crafted
/// headers (a PV in each of a thousand LVs, each with a thousand LVs…).
const MAX_DEPTH: u32 = 8;
const MAX_LAYERS: usize = 512;

/// One layer of a stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Layer {
    pub kind: Kind,
    /// libblkid's TYPE ("LVM2_member", "ext4", …); "lvm" for a logical
    /// volume, as lsblk's TYPE column says.
    pub name: &'static str,
    /// File-system label, md set name, "vg/lv", ZFS pool name.
    pub label: Option<String>,
    /// 0 for what the partition (or disk) holds directly, +1 per nesting.
    pub depth: u32,
    /// Where its data starts, in bytes from the start of its container:
    /// the partition or the data area of the layer it sits in.
    pub offset_bytes: u64,
    /// Where its data starts on the disk (the walk's `offset` counts from
    /// the disk's first byte).
    pub absolute_offset_bytes: u64,
    /// The size of its data area, when the header says.
    pub size_bytes: Option<u64>,
    /// Its allocation unit: file-system block or cluster, LVM extent, md
    /// chunk, LUKS encryption sector, bcache block (backing) or bucket
    /// (cache), swap page, 2^ashift.
    pub unit_bytes: Option<u64>,
    pub details: Details,
    pub note: Option<String>,
}

/// The header fields each kind of layer is judged by; units in the field
/// names. Serialized without a tag: `kind` says which.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Details {
    LvmPv {
        pe_start_bytes: u64,
        /// From the volume group's metadata, when it could be read.
        extent_bytes: Option<u64>,
        vg: Option<String>,
    },
    LvmLv {
        vg: String,
        lv: String,
        /// The physical extent its first segment starts at on this PV.
        first_pe: u64,
        /// Extents in that first segment.
        extents: u64,
        stripes: u64,
        stripe_bytes: Option<u64>,
    },
    Luks {
        version: u16,
        payload_offset_bytes: u64,
        sector_bytes: u64,
        cipher: Option<String>,
        /// LUKS1: where the last active key slot's material ends.
        key_material_end_bytes: Option<u64>,
    },
    Bcache {
        /// 1, 4, 6: a backing device; 0, 3, 5: a cache device.
        version: u64,
        /// "backing" or "cache".
        device: &'static str,
        /// Backing: where /dev/bcacheN's data starts (`data_offset`).
        /// Cache: where its first bucket starts.
        data_offset_bytes: u64,
        /// The sector size /dev/bcacheN presents.
        block_bytes: u64,
        bucket_bytes: u64,
        uuid: String,
        /// The cache set it belongs or is to be attached to.
        set_uuid: String,
    },
    Md {
        /// "0.90", "1.0", "1.1" or "1.2".
        version: &'static str,
        /// mdadm's names: "raid1", "linear", …
        level: String,
        layout: u32,
        raid_disks: u32,
        /// This member's slot in the array; None for spares.
        role: Option<u32>,
        chunk_bytes: u64,
        data_offset_bytes: u64,
    },
    Ext {
        block_bytes: u64,
        /// `s_raid_stride` and `s_raid_stripe_width`; None when unset.
        stride_blocks: Option<u64>,
        stripe_width_blocks: Option<u64>,
    },
    Xfs {
        sector_bytes: u64,
        block_bytes: u64,
        /// `sb_unit` and `sb_width`, in file-system blocks (0: none).
        sunit_blocks: u64,
        swidth_blocks: u64,
    },
    Btrfs {
        sector_bytes: u64,
        node_bytes: u64,
    },
    Zfs {
        ashift: u64,
    },
    Fat {
        /// 12, 16 or 32, from the cluster count as Microsoft defines it.
        bits: u8,
        sector_bytes: u64,
        cluster_bytes: u64,
        data_start_bytes: u64,
    },
    Exfat {
        sector_bytes: u64,
        cluster_bytes: u64,
        data_start_bytes: u64,
    },
    Ntfs {
        sector_bytes: u64,
        cluster_bytes: u64,
    },
    Swap {
        page_bytes: u64,
    },
    Iso9660 {
        block_bytes: u64,
    },
    /// Recognised, but its header did not give the fields above.
    None {},
}

impl Layer {
    /// A layer of `contents` whose data starts `offset_bytes` into its
    /// container; the walk fills in depth and the absolute offset.
    pub(crate) fn new(contents: &Contents, offset_bytes: u64, details: Details) -> Layer {
        Layer {
            kind: contents.kind,
            name: contents.name,
            label: contents.label.clone(),
            depth: 0,
            offset_bytes,
            absolute_offset_bytes: 0,
            size_bytes: None,
            unit_bytes: None,
            details,
            note: None,
        }
    }

    pub(crate) fn unit(mut self, unit_bytes: Option<u64>) -> Layer {
        self.unit_bytes = unit_bytes.filter(|&u| u > 0);
        self
    }

    pub(crate) fn size(mut self, size_bytes: Option<u64>) -> Layer {
        self.size_bytes = size_bytes;
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Layer {
        self.note = Some(note.into());
        self
    }
}

/// A parsed layer and, when its data area holds more layers, how many
/// bytes of it (from its data start) to look into.
pub(crate) struct Found {
    pub(crate) layer: Layer,
    pub(crate) inner: Option<u64>,
}

impl Found {
    pub(crate) fn leaf(layer: Layer) -> Found {
        Found { layer, inner: None }
    }
}

/// The layers in the `size` bytes at `offset` of `dev` (a partition, or a
/// whole disk without a table), outermost first and depth-first: a PV's
/// logical volumes each followed by what they hold. Never fails: what
/// cannot be read or parsed ends that branch.
pub fn walk(dev: &dyn ReadAt, offset: u64, size: u64) -> Vec<Layer> {
    let mut layers = Vec::new();
    descend(dev, Span { offset, size }, 0, &mut layers);
    layers
}

/// A byte range of the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Span {
    offset: u64,
    size: u64,
}

impl Span {
    /// The `size` bytes from `start` (absolute), cut to end with `self`;
    /// None unless it lies inside `self` and is strictly smaller or later,
    /// so that every step of the walk makes progress.
    fn inner(self, start: u64, size: u64) -> Option<Span> {
        let end = self.offset.checked_add(self.size)?;
        let size = size.min(end.checked_sub(start)?);
        let inner = Span { offset: start, size };
        (start >= self.offset && inner != self).then_some(inner)
    }
}

fn descend(dev: &dyn ReadAt, span: Span, depth: u32, out: &mut Vec<Layer>) {
    if depth >= MAX_DEPTH || out.len() >= MAX_LAYERS {
        return;
    }
    let Ok(Some(contents)) = identify(dev, span.offset, span.size) else { return };
    let region = Region { dev, offset: span.offset, size: span.size };
    if contents.kind == Kind::LvmPv {
        // Logical volumes are placed in the PV's data area, in extents.
        let (pv, lvs) = lvm::found(&region, &contents);
        let Some(data) = place(pv, span, span.offset, depth, out) else { return };
        for lv in lvs {
            if out.len() >= MAX_LAYERS {
                break;
            }
            if let Some(inner) = place(lv, data, data.offset, depth + 1, out) {
                descend(dev, inner, depth + 2, out);
            }
        }
        return;
    }
    let found = match contents.kind {
        Kind::Md => md::found(&region, &contents),
        Kind::Bcache => bcache::found(&region, &contents),
        Kind::Luks => luks::found(&region, &contents),
        _ => fs::found(&region, &contents),
    };
    if let Some(inner) = place(found, span, span.offset, depth, out) {
        descend(dev, inner, depth + 1, out);
    }
}

/// Record `found` at `depth`, its offset counted from `base`; returns the
/// part of `span` its data area covers when that holds more layers.
fn place(found: Found, span: Span, base: u64, depth: u32, out: &mut Vec<Layer>) -> Option<Span> {
    let mut layer = found.layer;
    layer.depth = depth;
    let Some(absolute) = base.checked_add(layer.offset_bytes) else {
        out.push(layer.note("its data offset lies past the end of the address space"));
        return None;
    };
    layer.absolute_offset_bytes = absolute;
    out.push(layer);
    span.inner(absolute, found.inner?).filter(|inner| inner.size > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::signature::lvm_crc;
    use proptest::prelude::*;

    /// Headers that pass each recogniser, so the deeper parsers see the
    /// random bytes around them.
    fn plant(bytes: &mut [u8], which: usize) {
        let mut put = |at: usize, b: &[u8]| {
            if let Some(dst) = bytes.get_mut(at..at + b.len()) {
                dst.copy_from_slice(b);
            }
        };
        match which {
            0 => put(0, b"LUKS\xba\xbe\x00\x01"),
            1 => {
                put(0, b"LUKS\xba\xbe\x00\x02\x00\x00\x00\x00\x00\x00\x40\x00");
                put(4096, b"{\"segments\":{\"0\":{\"offset\":\"4096\",\"sector_size\":4096}}}\0");
            }
            2 => {
                put(4096, &[0xfc, 0x4e, 0x2b, 0xa9, 1, 0, 0, 0]);
                put(4096 + 144, &8u64.to_le_bytes());
            }
            3 => put(0x10000 + 0x40, b"_BHRfS_M"),
            4 => put(16384, &[1, 1, 0, 0]),
            5 => put(4086, b"SWAPSPACE2"),
            _ => {}
        }
        if which == 6 {
            // An LVM label in sector 1 whose CRC holds over the random rest.
            if let Some(label) = bytes.get_mut(512..1024) {
                label[..8].copy_from_slice(b"LABELONE");
                label[8..16].copy_from_slice(&1u64.to_le_bytes());
                label[20..24].copy_from_slice(&32u32.to_le_bytes());
                label[24..32].copy_from_slice(b"LVM2 001");
                let crc = lvm_crc(&label[20..]);
                label[16..20].copy_from_slice(&crc.to_le_bytes());
            }
        }
    }

    proptest! {
        #[test]
        fn random_headers_never_panic(
            len in 0usize..300 * 1024,
            seed in any::<u64>(),
            which in 0usize..8,
            offset in 0u64..1 << 20,
            size in 0u64..1 << 40,
        ) {
            let mut bytes = crate::stack::random_bytes(len, seed);
            plant(&mut bytes, which);
            let len = bytes.len() as u64;
            for (off, sz) in [(0, len), (offset % (len + 1), len), (offset, size), (u64::MAX - 512, size)] {
                let _ = walk(&bytes, off, sz);
            }
        }
    }
}
