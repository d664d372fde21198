//! Why a table cannot be read, and why one copy of a GPT is unusable: a
//! leaf, so that every scheme can return these without importing another.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read the partition table: {0}")]
    Io(#[from] io::Error),
    /// Neither copy of a GPT can be used: why not, each.
    #[error(
        "corrupt partition table with no usable copy: primary GPT at LBA 1: {primary}; \
         backup GPT at LBA {backup_lba}: {backup}"
    )]
    Unusable { primary: CopyError, backup_lba: u64, backup: CopyError },
    #[error("unsupported sector size {0} (must be a power of two from 512 to 4096)")]
    SectorSize(u64),
}

/// Why a header's bytes are not a GPT header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header has no \"EFI PART\" signature")]
    Signature,
    #[error("header is truncated")]
    Truncated,
    #[error("header revision {0:#010x} is not 1.x")]
    Revision(u32),
    /// `min` is the header's known size (`gpt::HEADER_SIZE`).
    #[error("header size {size} is outside {min}..={sector}")]
    Size { size: u32, min: u32, sector: usize },
    #[error("header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Crc { stored: u32, computed: u32 },
}

/// Why one copy of the table (a header and its entry array) is unusable;
/// phrased to follow "primary GPT " or similar.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("header at LBA {0} lies past the end of the device")]
    PastEnd(u64),
    #[error("header at LBA {0} cannot be read: {1}")]
    HeaderUnreadable(u64, io::Error),
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error("header at LBA {lba} says it lives at LBA {my_lba}")]
    Misplaced { lba: u64, my_lba: u64 },
    #[error("header gives an invalid entry size of {0} bytes")]
    EntrySize(u32),
    #[error("header gives an implausible entry array of {0} bytes")]
    ArrayTooLarge(u64),
    #[error("header's first usable LBA {0} is after its last usable LBA {1}")]
    Inverted(u64, u64),
    #[error("entry array at LBA {0} runs past the end of the device")]
    ArrayPastEnd(u64),
    #[error("entry array at LBA {0} cannot be read: {1}")]
    ArrayUnreadable(u64, io::Error),
    #[error("entry array too large")]
    ArrayBytes,
    #[error("entry array is truncated")]
    ArrayTruncated,
    #[error("entry array CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    ArrayCrc { stored: u32, computed: u32 },
    #[error("entry size too large")]
    EntryBytes,
    #[error("entry is truncated")]
    EntryTruncated,
    #[error("device has no room for a backup header")]
    NoRoom,
}
