//! What one timed request is, the largest one, whether requests read or
//! write, and what can go wrong: a leaf that the planner, the engines and
//! the run share.

use std::path::PathBuf;

/// Backups held in memory at once; larger workloads run in chunks, each
/// backed up before its own timed phase. Also the largest request.
pub(crate) const CHUNK_BYTES: u64 = 64 << 20;

/// What the timed phase does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    /// Writes back what was read before the timed phase: nothing changes.
    Write,
    /// Writes a pattern over the data.
    Destructive,
}

/// What can go wrong measuring a device. The I/O errors are in the
/// messages, so they are no `source`: printed with its chain, the cause
/// would appear twice.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{}: {error}", path.display())]
    Open { path: PathBuf, error: std::io::Error },
    #[error("{what} of {size} bytes at byte {pos}: {error}")]
    Io { what: &'static str, pos: u64, size: u64, error: std::io::Error },
    #[error("{}: in use ({by}); refusing to write to it", path.display())]
    InUse { path: PathBuf, by: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
}

/// One timed request: a cell's size at a position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    pub cell: usize,
    pub pos: u64,
    pub size: u64,
}
