//! The one interface every partition-table format implements, as libfdisk
//! gives each label its `fdisk_label_operations`: [`detect`](super::detect)
//! tries them from one static list in the kernel's order, and no scheme
//! needs to know another's place in it.

use super::error::TableError;
use super::{Layout, Partition};
use crate::io::ReadAt;

/// What every reader is given: the device and what the dispatcher read
/// of it first.
pub struct SchemeDisk<'a> {
    pub dev: &'a dyn ReadAt,
    /// The logical sector size (512..=4096, a power of two).
    pub sector_size: u64,
    pub size_bytes: u64,
    /// Whole logical sectors in `size_bytes`.
    pub sectors: u64,
    /// The first logical sector, zero-padded when the device is shorter.
    pub sector0: Vec<u8>,
    /// LBA 1 holds a fully valid GPT. The GPT reader needs it when no
    /// protective MBR guards the disk, the MBR reader to name a GPT left
    /// behind it; read once here, neither imports the other for it.
    pub gpt_at_lba1: bool,
}

/// What a scheme's reader made of a disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Not this scheme (the layout may hold notes or contents it saw).
    No,
    /// This scheme's table, read into the layout, or a scheme only named.
    Table,
    /// This scheme's label, but no partition Linux would make of it: an
    /// audited scheme after it that finds its table wins.
    Empty,
}

/// A partition-table format.
pub trait Scheme: Sync {
    /// Its name, as libblkid gives it.
    fn name(&self) -> &'static str;

    /// Whether blkalign reads its partitions; false for schemes it only
    /// names (`Label::Unsupported`).
    fn audited(&self) -> bool {
        true
    }

    /// Probe `disk` and, when it holds this scheme's table, read it into
    /// `layout`. Errors are I/O errors or a table with no usable copy;
    /// bytes that are not this scheme's are `Found::No`.
    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError>;

    /// `p` is one of this scheme's entries that holds no data of its own
    /// by the label's custom (Sun's whole-disk entry, SGI's volume, a BSD
    /// raw partition, Apple's map and free entries): Linux makes
    /// partitions of them, but they overlap the others by design.
    fn holds_no_data(&self, _p: &Partition) -> bool {
        false
    }
}
