//! Why a run fails or refuses: every error a session returns, and the
//! refusals made before anything is written, for a caller to match.

use crate::device::exclusive::ExclusiveError;
use crate::device::{DeviceError, Identity};
use crate::realign::copy::MoveError;
use crate::realign::journal::JournalError;
use crate::realign::place::PlaceError;
use crate::realign::prepare::PrepareError;
use crate::realign::{guard, scan, undo};
use crate::table::TableError;
use crate::units::human_size;
use std::fmt;
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
    /// A move (or an undo) stopped on an error, its journal intact;
    /// `way_on` says which ways lead on, for the caller to put in words.
    #[error("{source}\nthe move stopped; the journal {} is intact.", journal.display())]
    Move { source: MoveError, journal: PathBuf, way_on: WayOn },
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
    #[error("{} is partition {number} of /dev/{disk}: name its disk instead", path.display())]
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
    /// The move of `partition` on `target` is being undone: only the undo
    /// may be finished.
    #[error("the move of partition {partition} is being undone (journal {})", journal.display())]
    BeingUndone { target: PathBuf, partition: u32, journal: PathBuf },
    #[error(transparent)]
    Undo(#[from] undo::UndoError),
    /// The device cannot be opened O_DIRECT (and exclusively, a block
    /// device): a move must not go through a cache, nor beside another user.
    #[error(transparent)]
    OpenDirect(crate::bench::BenchError),
    /// At boot, where nothing asks a move to stop, it stopped.
    #[error("{0}")]
    Stopped(Stop),
}

/// Which ways lead on from a move stopped on an error, on partition
/// `partition` of `target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WayOn {
    /// A sector cannot be read and stays so: undo (the `moved` bytes
    /// already moved go back) or finish reading around it (`--rescue`,
    /// retrying each sector `retries` more times).
    Unreadable { target: PathBuf, partition: u32, moved: u64, retries: u32 },
    /// Once the cause is fixed, rerun the move to finish it, or undo it.
    Rerun { target: PathBuf, partition: u32 },
    /// Once the cause is fixed, finish the undo.
    FinishUndo { target: PathBuf, partition: u32 },
    /// The disk went away (unplugged, or dropped by its controller) with
    /// the move journaled (boxed: errors stay small).
    Vanished(Box<GoneDisk>),
}

/// A disk gone mid-move: once it is back, under whatever name, the same
/// move (the undo, when `undoing`) run on it goes on. The journal's record
/// finds it by `identity`, not by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoneDisk {
    pub target: PathBuf,
    pub partition: u32,
    pub identity: Identity,
    pub undoing: bool,
}

/// Where a run that a stop request ended left the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Before partition `partition` was touched: nothing to finish.
    Untouched { target: PathBuf, partition: u32 },
    /// Part-way through the move of `partition`: `copied` of `bytes`
    /// copied, or all of them and `verifying`; safe, but unusable until
    /// the move in `journal` is finished (or undone).
    Moving {
        target: PathBuf,
        partition: u32,
        journal: PathBuf,
        verifying: bool,
        copied: u64,
        bytes: u64,
    },
    /// Part-way through the undo of the move of `partition`, journaled in
    /// `journal`.
    Undoing { target: PathBuf, partition: u32, journal: PathBuf },
}

impl fmt::Display for Stop {
    /// What the disk holds now; the way on is the caller's to say.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Untouched { target, partition } => {
                write!(
                    f,
                    "interrupted: partition {partition} of {} was not touched",
                    target.display()
                )
            }
            Stop::Moving { target, partition, journal, verifying, copied, bytes } => {
                let state = if *verifying {
                    format!("is copied ({}) but not yet verified", human_size(*bytes))
                } else {
                    format!(
                        "is half-moved: {} of {} copied",
                        human_size(*copied),
                        human_size(*bytes)
                    )
                };
                write!(
                    f,
                    "interrupted: partition {partition} of {} {state}; its data is safe (each byte \
                     at its old or new place or in the journal {}), but it is unusable until the \
                     move is finished.",
                    target.display(),
                    journal.display()
                )
            }
            Stop::Undoing { partition, journal, .. } => write!(
                f,
                "interrupted: the undo of partition {partition}'s move is journaled in {}",
                journal.display()
            ),
        }
    }
}

pub(super) fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SessionError {
    let what = what.into();
    move |source| SessionError::Io { what, source }
}
