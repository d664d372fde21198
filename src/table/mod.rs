//! Partition tables we own end to end: MBR with its EBR chain, and GPT.
//! Readers never panic on what they read: they return the layout and every
//! problem seen, or an error when no usable copy of the table exists.
//!
//! [`layout`] holds what a read yields, [`detect`] the dispatch between
//! schemes, `checks` the checks common to all; each scheme has its own
//! module, and [`write`] and [`edit`] put MBRs and GPTs on disks.

pub mod amiga;
pub mod apm;
pub mod atari;
pub mod bsd;
mod checks;
pub mod detect;
pub mod edit;
pub mod foreign;
pub mod gpt;
pub mod layout;
pub mod mbr;
pub mod sgi;
pub mod sun;
pub mod types;
pub mod write;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

pub use detect::{detect_sector_size, read, written_for, TableError};
pub use layout::{GptInfo, Label, Layout, MbrInfo, PartKind, Partition, Problem, Severity};
