//! Partition tables we own end to end: MBR with its EBR chain, and GPT.
//! Readers never panic on what they read: they return the layout and every
//! problem seen, or an error when no usable copy of the table exists.

pub mod gpt;
pub mod mbr;

use serde::Serialize;
use std::io;

/// Which kind of table a target holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Mbr,
    Gpt,
    None,
}

/// Random access to a disk or image, in bytes.
pub trait ReadAt {
    /// Fill all of `buf` from byte `offset`; a short read is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = self.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// What role a partition plays in its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PartKind {
    /// An MBR primary partition.
    Primary,
    /// The MBR extended container holding the EBR chain.
    Extended,
    /// An MBR logical partition (numbered from 5).
    Logical,
    /// A GPT entry.
    Gpt,
}

/// One partition, in logical sectors of the table's sector size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// As the kernel numbers it: MBR primaries 1-4 by slot, logicals from 5
    /// in chain order, GPT by entry slot (1-based).
    pub number: u32,
    pub start: u64,
    pub size: u64,
    pub kind: PartKind,
    /// MBR type as "0x83", or the GPT type GUID in upper case.
    pub type_id: String,
    /// GPT partition name, when non-empty.
    pub name: Option<String>,
    /// For logical partitions: LBA of the EBR that describes it.
    pub ebr: Option<u64>,
}

/// Something wrong or noteworthy found while reading a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Stable, machine-readable, snake_case (e.g. "gpt_primary_header_crc").
    pub code: &'static str,
    pub message: String,
}

impl Problem {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

/// GPT facts that matter for alignment and repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GptInfo {
    /// LBA of the header the layout was taken from (1, or the backup's).
    pub header_lba: u64,
    /// LBA of the other header, as recorded.
    pub alternate_lba: u64,
    pub used_backup: bool,
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub entries_lba: u64,
    pub entry_count: u32,
    pub entry_size: u32,
    pub disk_guid: String,
}

/// MBR facts that matter for alignment and repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MbrInfo {
    pub disk_signature: u32,
    /// A single 0xEE entry guarding a GPT.
    pub protective: bool,
    /// 0xEE beside other entries: a hybrid MBR.
    pub hybrid: bool,
    /// EBR LBAs in chain order.
    pub ebrs: Vec<u64>,
}

/// A table as read from a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub label: Label,
    pub sector_size: u64,
    pub partitions: Vec<Partition>,
    pub problems: Vec<Problem>,
    pub gpt: Option<GptInfo>,
    pub mbr: Option<MbrInfo>,
}

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read the partition table: {0}")]
    Io(#[from] io::Error),
    #[error("corrupt partition table with no usable copy: {0}")]
    Unusable(String),
    #[error("unsupported sector size {0} (must be a power of two from 512 to 4096)")]
    SectorSize(u64),
}
