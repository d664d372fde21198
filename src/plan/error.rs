//! Why a request cannot be laid out.

use super::request::NewLabel;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("no partitions requested")]
    Empty,
    #[error("invalid alignment grain {0}: it must be a positive multiple of the {1}-byte logical sector")]
    Grain(u64, u64),
    #[error("an MBR cannot address this disk: {0} sectors of {1} bytes exceed the 2^32-sector limit (use --label gpt)")]
    MbrTooLarge(u64, u64),
    #[error("partition {0} does not fit: it needs {1} sectors from LBA {2}, and the last usable LBA is {3}{room}", room = room(*.1, *.2, *.3))]
    NoRoom(usize, u64, u64, u64),
    #[error("only the last partition may be `rest`")]
    RestNotLast,
    #[error("a percentage must be between 1 and 100, not {0}")]
    Percent(u64),
    #[error("--cylinder-compatible needs 512-byte logical sectors")]
    Cylinder,
    #[error("the disk is too small for a {0:?} table")]
    TooSmall(NewLabel),
    #[error("unknown partition type {0:?} for {1:?}: use a name (linux, swap, efi, lvm, raid, ...), an MBR hex code or a GPT type GUID")]
    Type(String, NewLabel),
    #[error("type {0:?} is not a partition's: 0x05, 0x0f and 0x85 mark the extended container (made by the planner when more than four partitions are asked for) and 0xee a GPT's protective entry (use --label gpt)")]
    Container(String),
    #[error("partition name {0:?}: {1}")]
    Name(String, &'static str),
    #[error("a GPT holds at most 128 partitions, not {0}")]
    TooMany(usize),
    #[error("partition {0} is given twice")]
    Duplicate(u32),
    #[error("partition {0}: an MBR numbers its primary and extended partitions 1 to 4, its logical ones from 5")]
    Slot(u32),
    #[error("an MBR holds one extended partition, and the script gives {0}")]
    Extendeds(usize),
    #[error(
        "the logical partitions need an extended partition, and primaries take all four MBR slots"
    )]
    NoSlot,
    #[error("the script's grain {0} and {1} have no common multiple")]
    NoCommonGrain(u64, u64),
}

/// What would fit of `wanted` sectors from `start` up to `last`: the size
/// to reduce a partition to.
fn room(wanted: u64, start: u64, last: u64) -> String {
    match last.checked_add(1).and_then(|end| end.checked_sub(start)).filter(|&n| n > 0) {
        Some(fits) => format!(
            ": at most {fits} sectors fit there (reduce its size by {})",
            wanted.saturating_sub(fits)
        ),
        None => String::new(),
    }
}
