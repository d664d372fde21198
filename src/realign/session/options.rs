//! What to move and how: the options of a run.

use crate::plan::Align;
use std::path::PathBuf;

/// What to move and how.
#[derive(Clone, Debug)]
pub struct MoveOptions {
    /// An explicit destination LBA (one partition only).
    pub to: Option<u64>,
    pub align: Align,
    /// Overwrite non-zero gap bytes, or move what a boot loader records.
    pub force: bool,
    /// Move even when a layer inside that is aligned today would not be.
    pub misalign_layers: bool,
    /// Read every sector the move will read before writing any.
    pub read_check: bool,
    /// Write zeros for sectors that stay unreadable, listing them in a map.
    pub rescue: bool,
    /// The journal to use instead of the default place.
    pub journal: Option<PathBuf>,
    /// The bytes copied at a time (16 MiB): a multiple of 4096 up to
    /// 64 MiB. The move holds four in memory and the journal up to three
    /// saved ones, where a chunk overlaps its own source.
    pub chunk_bytes: u64,
}

/// The safe defaults: the optimal grain, nothing forced, the read check.
impl Default for MoveOptions {
    fn default() -> MoveOptions {
        MoveOptions {
            to: None,
            align: Align::Optimal,
            force: false,
            misalign_layers: false,
            read_check: true,
            rescue: false,
            journal: None,
            chunk_bytes: crate::realign::CHUNK_BYTES,
        }
    }
}
