//! What one layer of a stack is ([`Layer`], its [`Details`]) and what a
//! parser hands the walk ([`Found`]); the walk itself is `walk`.

use super::region::{Contents, Kind};
use serde::Serialize;

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
