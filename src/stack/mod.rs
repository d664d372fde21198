//! What a partition holds (filesystems, LVM, LUKS, md, bcache, swap, ZFS),
//! recognised from its own headers, the fields that record its position,
//! and the layers stacked inside it with where each one's data lies.

mod bcache;
mod fs;
mod layers;
mod luks;
mod lvm;
mod md;
mod signature;
mod startrec;
mod verdict;
mod zfs;

pub use layers::{walk, Details, Layer};
pub use signature::{identify, Contents, Kind};
pub use startrec::{start_fixups, Patch, StackError};
pub use verdict::{compensates, judge, LayerVerdict};

#[cfg(test)]
mod peers;
