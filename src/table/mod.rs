//! Partition tables we own end to end: MBR with its EBR chain, and GPT.
//! Readers never panic on what they read: they return the layout and every
//! problem seen, or an error when no usable copy of the table exists.
//!
//! [`layout`] holds what a read yields and [`error`] why none could be
//! made. Each scheme has its own module implementing [`scheme::Scheme`];
//! [`detect`] tries them from one static list in the kernel's order, then
//! runs `checks`, the checks common to all. `common` holds what several
//! readers share and imports no scheme. [`write`] and [`edit`] put MBRs
//! and GPTs on disks.

pub mod amiga;
pub mod apm;
pub mod atari;
pub mod bsd;
mod checks;
mod common;
pub mod detect;
pub mod edit;
pub mod error;
pub mod foreign;
pub mod gpt;
pub mod layout;
pub mod mbr;
pub mod scheme;
pub mod sgi;
pub mod sun;
pub mod types;
pub mod write;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

pub(crate) use detect::written_for;
pub use detect::{detect_sector_size, holds_no_data, read};
pub use error::TableError;
pub(crate) use layout::{GptInfo, MbrInfo, Problem, Severity};
pub use layout::{Label, Layout, PartKind, Partition};
