//! blkalign: find, measure, prevent and repair misaligned storage on
//! Advanced Format disks.
//!
//! Data flows one way: a [`Target`] yields a [`Topology`] and a table;
//! [`Geometry`] turns them into verdicts ([`Class`]); [`audit_path`]
//! gathers those per target.
//!
//! The items at this root are the library's API, what an installer needs:
//! open a target ([`open_target`]), audit it ([`audit_path`]), plan a table
//! ([`plan_table`]), commit it ([`commit_table`] through a [`Held`] disk),
//! move a partition ([`Session`], its progress through [`Events`], its
//! journals in a [`Store`] the caller chooses), rewrite a table for the
//! other sector size ([`plan_rescale`]) and put a table back ([`Backup`]).
//! Refusals are enums to match; results are data, their English built by
//! the CLI. `examples/install_image.rs` and `examples/realign_image.rs` use
//! nothing else. ARCHITECTURE.md ("Public API and why one crate") lists
//! them; `tests/it/architecture.rs` fails on a root item not listed there.
//!
//! The modules below are hidden: they are the CLI's (`src/cli/`, a separate
//! binary crate), the fuzz targets' and the integration tests', not a
//! stable API.

// Open a target.
pub use align::{Class, Geometry};
pub use device::{DeviceError, Identity, Overrides, SysRoot, Target, TargetKind, Topology};
pub use open::{open_target, Opened};
// Audit it.
pub use audit::{
    audit_path, audit_target, AuditOptions, DiskAudit, PartitionAudit, UnfinishedMove,
};
// Plan a table.
pub use plan::{
    plan_table, Align, NewLabel, PartitionRequest, Plan, PlanError, PlannedPartition, Size,
};
// Commit it.
pub use commit::{commit_table, old_bytes, Commit, CommitError, Committed, Held, Kernel};
pub use table::write::{encode_table, Chunk, Ids};
// Move a partition.
pub use realign::session::{
    Done, Events, GoneDisk, MoveOptions, MoveRefusal, Outcome, PlannedMove, Session, SessionError,
    Stop, WayOn,
};
pub use realign::state::Store;
// Rewrite a table for the other sector size.
pub use rescale::{plan_rescale, RefusedEntry, RescaleError, RescaleRefusal, Rescaled};
// Put a table back.
pub use backup::{Backup, BackupError};

#[doc(hidden)]
pub mod advise;
#[doc(hidden)]
pub mod align;
#[doc(hidden)]
pub mod audit;
#[doc(hidden)]
pub mod backup;
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod commit;
#[doc(hidden)]
pub mod device;
#[doc(hidden)]
pub mod emulate;
#[doc(hidden)]
pub mod io;
#[doc(hidden)]
pub mod open;
#[doc(hidden)]
pub mod plan;
#[doc(hidden)]
pub mod probe;
#[doc(hidden)]
pub mod realign;
#[doc(hidden)]
pub mod report;
#[doc(hidden)]
pub mod rescale;
#[doc(hidden)]
pub mod stack;
#[doc(hidden)]
pub mod table;
#[doc(hidden)]
pub mod units;
