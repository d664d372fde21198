//! Emulated Advanced Format drives: nbdkit behind nbdfuse behind a
//! direct-I/O loop device.
//!
//! nbdkit plays the platter (memory or file plugin) with filters for the
//! drive's quirks: `offset` shifts LBAs (the XP jumper), `cache` is a
//! volatile write cache, `blocksize` turns writes smaller than a physical
//! sector into read-modify-write, `delay` makes each platter access cost.
//! nbdfuse exposes it as a file; `losetup --direct-io=on` makes it a block
//! device whose O_DIRECT requests reach nbdkit with their exact offsets.
//!
//! Every drive has a record under [`state_dir`], so any process can list,
//! stop or power-cut it, and `stop --all` cleans up after crashed callers.

mod preset;
mod stack;

pub use stack::which;
mod state;

pub use preset::{preset, EmulatedGeometry, DEFAULT_LATENCY_MS};
pub use stack::{healthy, power_cut, start, stop, stop_all};
pub use state::{list, state_dir, EmulatedDrive};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What to emulate.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The preset's name, or "custom".
    pub preset: String,
    pub geometry: EmulatedGeometry,
    /// Bytes the host sees; None: the existing file's size, else 1 GiB.
    pub size: Option<u64>,
    /// Keep the platter in this file instead of memory.
    pub file: Option<PathBuf>,
    /// Writes stay in a volatile cache until the host flushes.
    pub volatile_cache: bool,
    /// These LBAs fail with EIO.
    pub fail_lba: Option<LbaRange>,
    /// ... until a write of the whole physical sector remaps them.
    pub until_written: bool,
}

/// Size of a drive when neither `--size` nor an existing file says.
pub(crate) const DEFAULT_SIZE: u64 = 1 << 30;

/// An inclusive range of logical sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbaRange {
    pub first: u64,
    pub last: u64,
}

impl std::str::FromStr for LbaRange {
    type Err = EmulateError;

    /// "1000-1999" or a single "1000".
    fn from_str(text: &str) -> Result<LbaRange, EmulateError> {
        let bad = || EmulateError::LbaRange(text.to_string());
        let (first, last) = text.split_once('-').unwrap_or((text, text));
        let first: u64 = first.trim().parse().map_err(|_| bad())?;
        let last: u64 = last.trim().parse().map_err(|_| bad())?;
        if last < first {
            return Err(bad());
        }
        Ok(LbaRange { first, last })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error("missing {}", missing_list(.0))]
    MissingTools(Vec<(&'static str, &'static str)>),
    #[error("emulated drives need root (loop devices and FUSE mounts); run with sudo")]
    NotRoot,
    #[error("unknown preset `{0}` (known: wd-ears, wd-ears-jumper, 4kn, native-512)")]
    UnknownPreset(String),
    #[error("invalid geometry: {0}")]
    Geometry(String),
    #[error(
        "invalid size `{0}`: expected bytes or a number with K, M, G, T (or KiB, MiB, GiB, TiB)"
    )]
    Size(String),
    #[error("invalid LBA range `{0}`: expected FIRST-LAST, e.g. 1000-1999")]
    LbaRange(String),
    #[error("{0}")]
    Spec(String),
    #[error("no emulated drive `{0}`")]
    NoSuchDrive(String),
    #[error(
        "{id} ({}) is in use: {by}; unmount or release it first \
         (power-cut ends it anyway, losing writes not yet on the platter)",
        device.display()
    )]
    InUse { id: String, device: PathBuf, by: String },
    /// `error` is in the message, so it is no `source`: printed with its
    /// chain, the cause would appear twice.
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error("{command} failed: {detail}")]
    Command { command: String, detail: String },
    #[error("timed out waiting for {0}")]
    Timeout(String),
    #[error("bad state record {path}: {source}")]
    Record {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl EmulateError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EmulateError {
        let what = what.into();
        move |error| EmulateError::Io { what, error }
    }
}

fn missing_list(missing: &[(&str, &str)]) -> String {
    let each: Vec<String> = missing
        .iter()
        .map(|(tool, package)| format!("{tool} (Debian package {package})"))
        .collect();
    each.join(", ")
}

/// Parses a size as [`crate::units::parse_bytes`] does ("64MiB", "1GB", "4096").
pub fn parse_size(text: &str) -> Result<u64, EmulateError> {
    crate::units::parse_bytes(text).ok_or_else(|| EmulateError::Size(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("16K").unwrap(), 16384);
        for bad in ["", "MiB", "1..5G", "12 parsecs", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lba_ranges() {
        assert_eq!("1000-1999".parse::<LbaRange>().unwrap(), LbaRange { first: 1000, last: 1999 });
        assert_eq!("7".parse::<LbaRange>().unwrap(), LbaRange { first: 7, last: 7 });
        assert!("9-3".parse::<LbaRange>().is_err());
        assert!("a-b".parse::<LbaRange>().is_err());
    }
}
