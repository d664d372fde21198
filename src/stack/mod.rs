//! What a partition holds (filesystems, LVM, LUKS, md, swap), recognised
//! from its own headers, and the fields that record its position.

mod shrink;
mod signature;
mod startrec;

pub use shrink::shrink_advice;
pub use signature::{identify, Contents, Kind};
pub use startrec::{start_fixups, Patch, StackError};

#[cfg(test)]
mod peers;
