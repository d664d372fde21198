//! PLACEHOLDER: being written (issue 9). Reads a bsd label into a Layout.

use super::{Layout, ReadAt, TableError};

/// Fill `layout` when `dev` holds this scheme; false when it does not.
pub(crate) fn read_into(
    _dev: &dyn ReadAt,
    _sectors: u64,
    _layout: &mut Layout,
) -> Result<bool, TableError> {
    Ok(false)
}

/// The BSD partitions inside MBR slice `slice` (types 0xA5, 0xA6, 0xA9),
/// numbered from `next` as Linux numbers them; problems go to `layout`.
pub(crate) fn read_nested(
    _dev: &dyn ReadAt,
    _slice: &super::Partition,
    _next: u32,
    _layout: &mut Layout,
) -> Vec<super::Partition> {
    Vec::new()
}
