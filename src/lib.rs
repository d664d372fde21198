//! blkalign: find, measure, prevent and repair misaligned storage on
//! Advanced Format disks.
//!
//! Data flows one way: a [`device::Target`] yields a [`device::Topology`]
//! and a [`table::Layout`]; [`align`] turns them into verdicts; [`audit`]
//! gathers those per target and [`report`] prints them.

pub mod advise;
pub mod align;
pub mod audit;
pub mod backup;
pub mod bench;
pub mod commit;
pub mod device;
pub mod emulate;
pub mod io;
pub mod open;
pub mod plan;
pub mod probe;
pub mod realign;
pub mod report;
pub mod rescale;
pub mod stack;
pub mod table;
pub mod units;
