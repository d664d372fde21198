//! One realign run as a library call: open a target, say what would move
//! ([`Session::plan`]), move ([`Session::move_all`]), finish or report an
//! unfinished move. The CLI parses arguments and prints; every crash-critical
//! ordering is here, where unit tests reach it on an in-memory disk.
//!
//! The orderings: a move's state record is written before its journal
//! (`Session::create_journal`, in `run`); finishing runs copy → verify →
//! table → tell the kernel → commit Done → remove the record
//! ([`Session::finish`]).
//!
//! One concern a file, each using only those before it here: `error`,
//! `status`, `events`, `host`, `options`, `open` (the [`Session`]),
//! `journals`, `choose`, `dry_run`, `read_check`, `finish`, `run`, `undo`.
//! This file only names them.

mod choose;
mod dry_run;
mod error;
mod events;
mod finish;
mod host;
mod journals;
mod open;
mod options;
mod read_check;
mod run;
mod status;
mod undo;

pub use dry_run::PlannedMove;
pub use error::{GoneDisk, MoveRefusal, SessionError, Stop, WayOn};
pub use events::{Done, Events, Outcome};
pub use open::Session;
pub use options::MoveOptions;
pub use status::Status;

#[cfg(test)]
mod lab;
