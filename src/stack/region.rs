//! The bytes being probed ([`Region`]) and what they are found to hold
//! ([`Kind`], [`Contents`]), with the byte helpers every parser shares: a
//! leaf, so that recognising a layer and parsing one need not import each
//! other.

use crate::io::ReadAt;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Ext,
    Xfs,
    Btrfs,
    LvmPv,
    Luks,
    Swap,
    Fat,
    Ntfs,
    Exfat,
    Md,
    Iso9660,
    /// A ZFS vdev ("zfs_member").
    Zfs,
    /// A bcache backing or cache device.
    Bcache,
    /// A logical volume: found in its volume group's metadata, never by
    /// [`identify`](super::identify); named "lvm" as lsblk's TYPE column does.
    LvmLv,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Contents {
    pub kind: Kind,
    /// libblkid's TYPE name: "ext2"/"ext3"/"ext4", "xfs", "btrfs", "LVM2_member",
    /// "crypto_LUKS", "swap", "vfat", "ntfs", "exfat", "linux_raid_member", "iso9660",
    /// "zfs_member", "bcache".
    pub name: &'static str,
    pub label: Option<String>,
    /// The size the contents claim for themselves, in bytes, when the header
    /// says: what must fit in the partition. NTFS counts its backup boot
    /// sector, btrfs this device's share, md 1.1/1.2 data offset plus data.
    pub size_bytes: Option<u64>,
}

impl Contents {
    pub(super) fn new(kind: Kind, name: &'static str) -> Self {
        Self { kind, name, label: None, size_bytes: None }
    }

    pub(super) fn label(mut self, label: Option<String>) -> Self {
        self.label = label;
        self
    }

    pub(super) fn size(mut self, size_bytes: Option<u64>) -> Self {
        self.size_bytes = size_bytes;
        self
    }
}

/// The partition being probed; reads never leave it.
pub(crate) struct Region<'a> {
    pub(crate) dev: &'a dyn ReadAt,
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

impl Region<'_> {
    /// `len` bytes at `at` within the region, or None if they lie past its
    /// end or cannot be read.
    pub(crate) fn bytes(&self, at: u64, len: usize) -> Option<Vec<u8>> {
        let end = at.checked_add(u64::try_from(len).ok()?)?;
        if end > self.size {
            return None;
        }
        let mut buf = vec![0u8; len];
        self.dev.read_exact_at(&mut buf, self.offset.checked_add(at)?).ok()?;
        Some(buf)
    }
}

pub(crate) fn has(buf: &[u8], at: usize, magic: &[u8]) -> bool {
    at.checked_add(magic.len()).and_then(|end| buf.get(at..end)) == Some(magic)
}

/// A NUL- or space-padded label; None when empty or not UTF-8.
pub(crate) fn text(buf: &[u8], at: usize, len: usize) -> Option<String> {
    let raw = buf.get(at..at.checked_add(len)?)?;
    let raw = raw.split(|&b| b == 0).next().unwrap_or_default();
    let label = std::str::from_utf8(raw).ok()?.trim_end();
    (!label.is_empty()).then(|| label.to_string())
}
