//! Why a run fails or refuses: every error a session returns, and the
//! refusals made before anything is written, for a caller to match.

use crate::device::exclusive::ExclusiveError;
use crate::device::DeviceError;
use crate::realign::copy::MoveError;
use crate::realign::journal::JournalError;
use crate::realign::place::PlaceError;
use crate::realign::prepare::PrepareError;
use crate::realign::{guard, scan, undo};
use crate::table::TableError;
use std::ops::Range;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    InUse(#[from] ExclusiveError),
    #[error("reading {path}: {source}")]
    Table { path: PathBuf, source: TableError },
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] MoveRefusal),
    #[error(transparent)]
    Guard(#[from] guard::GuardError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{source}\nthe move stopped; the journal {} is intact. {way_on}", journal.display())]
    Move { source: MoveError, journal: PathBuf, way_on: String },
    /// The read check found sectors the move could not read: nothing was
    /// written and no move is left unfinished.
    #[error(
        "partition {partition}: {} cannot be read{}: the move was refused before anything was \
         written, and nothing is left to finish. Copy off what can be read first (GNU ddrescue \
         reads around bad sectors); --no-read-check moves it anyway, stopping half-way at the \
         first of them",
        scan::describe(bad), holders.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    Unreadable { partition: u32, bad: Vec<Range<u64>>, holders: Option<String> },
}

/// Why a move was refused before anything was written, for a caller to
/// match.
#[derive(Debug, thiserror::Error)]
pub enum MoveRefusal {
    #[error("{} is partition {number}: name its disk instead (`blkalign realign /dev/{disk} {number}`)", path.display())]
    PartitionNamed { path: PathBuf, number: u32, disk: String },
    #[error(
        "the journal {} records a move on another disk (size, serial or table differ): refusing \
         to apply it to {}",
        journal.display(),
        target.display()
    )]
    OtherDisk { journal: PathBuf, target: PathBuf },
    #[error("there is no partition {number} on {}", disk.display())]
    NoSuchPartition { number: u32, disk: PathBuf },
    /// `why` adds what would make room (a shrink) to `error`.
    #[error("{why}")]
    Unplaceable { error: PlaceError, why: String },
    #[error("partition {0} vanished")]
    Vanished(u32),
    #[error("{} holds another unfinished move: finish it or pass another --journal", .0.display())]
    JournalTaken(PathBuf),
    #[error(
        "the move of partition {partition} is being undone (journal {}): finish the undo with \
         `{finish} --undo`",
        journal.display()
    )]
    BeingUndone { partition: u32, journal: PathBuf, finish: String },
    #[error(transparent)]
    Undo(#[from] undo::UndoError),
    /// The device cannot be opened O_DIRECT (and exclusively, a block
    /// device): a move must not go through a cache, nor beside another user.
    #[error(transparent)]
    OpenDirect(crate::bench::BenchError),
    /// At boot, where nothing asks a move to stop, it stopped.
    #[error("{0}")]
    Stopped(String),
}

pub(super) fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SessionError {
    let what = what.into();
    move |source| SessionError::Io { what, source }
}
