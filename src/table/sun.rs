//! PLACEHOLDER: being written (issue 9). Reads a sun label into a Layout.

use super::{Layout, ReadAt, TableError};

/// Fill `layout` when `dev` holds this scheme; false when it does not.
pub(crate) fn read_into(
    _dev: &dyn ReadAt,
    _sectors: u64,
    _layout: &mut Layout,
) -> Result<bool, TableError> {
    Ok(false)
}
