//! The error every parser of a drive's answers returns: a leaf, so that
//! the parsers need nothing of the module that sends the commands.

/// A drive's answer that does not follow its standard.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("{what}: {got} bytes, at least {need} needed")]
    Short { what: &'static str, got: usize, need: usize },
    #[error("{what}: {reason}")]
    Invalid { what: &'static str, reason: String },
}
