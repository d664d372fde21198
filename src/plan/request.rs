//! What a plan is asked for: the label, how starts are aligned, and each
//! partition's size, type and name, as typed.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NewLabel {
    Gpt,
    Mbr,
}

impl NewLabel {
    /// Its name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            NewLabel::Gpt => "gpt",
            NewLabel::Mbr => "mbr",
        }
    }
}

/// How starts are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// lcm(1 MiB, optimal I/O, physical sector).
    Optimal,
    /// The effective physical sector.
    Minimal,
    /// An explicit grain in bytes.
    Bytes(u64),
}

/// Text that names no grain.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AlignError {
    #[error(transparent)]
    Size(#[from] SizeError),
    #[error("--align takes optimal, minimal or a size in bytes (e.g. 4MiB), not {0:?}")]
    NotBytes(String),
}

impl std::str::FromStr for Align {
    type Err = AlignError;

    /// `optimal`, `minimal` or a size in bytes (`4MiB`), as `--align` takes.
    fn from_str(text: &str) -> Result<Align, AlignError> {
        match text {
            "optimal" => Ok(Align::Optimal),
            "minimal" => Ok(Align::Minimal),
            size => match parse_size(size)? {
                Size::Bytes(b) => Ok(Align::Bytes(b)),
                _ => Err(AlignError::NotBytes(size.to_string())),
            },
        }
    }
}

/// How big a requested partition is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    /// Logical sectors of the disk.
    Sectors(u64),
    /// Per cent of the whole disk.
    Percent(u64),
    /// Everything left.
    Rest,
}

/// One partition as asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRequest {
    /// The lowest LBA it may start at (an sfdisk script's `start=`); the
    /// start is still rounded up to the grain.
    pub min_start: Option<u64>,
    pub size: Size,
    pub type_id: String,
    pub name: Option<String>,
}

/// Parse a size: "512MiB", "20G", "4096" (bytes), "2048s" (sectors),
/// "25%", "rest".
pub fn parse_size(text: &str) -> Result<Size, SizeError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("rest") || t == "+" {
        return Ok(Size::Rest);
    }
    if let Some(p) = t.strip_suffix('%') {
        return p.trim().parse().map(Size::Percent).map_err(|_| SizeError::Percent(text.into()));
    }
    if let Some(n) = t.strip_suffix(['s', 'S']) {
        return n.trim().parse().map(Size::Sectors).map_err(|_| SizeError::Sectors(text.into()));
    }
    crate::units::parse_bytes(t).map(Size::Bytes).ok_or_else(|| SizeError::Bytes(text.into()))
}

/// A size that [`parse_size`] cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("bad percentage {0:?}")]
    Percent(String),
    #[error("bad sector count {0:?}")]
    Sectors(String),
    #[error("bad size {0:?}: {syntax}; or sectors as 2048s, N%, or rest", syntax = crate::units::SIZE_SYNTAX)]
    Bytes(String),
}

/// Parse `--part SIZE[:TYPE[:NAME]]`; TYPE defaults to linux. A name may
/// itself hold colons.
pub fn parse_part(text: &str) -> Result<PartitionRequest, SizeError> {
    let mut fields = text.splitn(3, ':');
    let size = parse_size(fields.next().unwrap_or_default())?;
    let type_id = fields.next().filter(|t| !t.is_empty()).unwrap_or("linux").to_string();
    let name = fields.next().map(str::to_string);
    Ok(PartitionRequest { min_start: None, size, type_id, name })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::units::SIZE_SYNTAX;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512MiB"), Ok(Size::Bytes(512 * MIB)));
        assert_eq!(parse_size("2G"), Ok(Size::Bytes(2 << 30)));
        assert_eq!(parse_size("1t"), Ok(Size::Bytes(1 << 40)));
        assert_eq!(parse_size("4096"), Ok(Size::Bytes(4096)));
        assert_eq!(parse_size("2048s"), Ok(Size::Sectors(2048)));
        assert_eq!(parse_size("25%"), Ok(Size::Percent(25)));
        assert_eq!(parse_size("rest"), Ok(Size::Rest));
        assert!(parse_size("12parsecs").is_err());
        let want = format!("bad size \"1 Q\": {SIZE_SYNTAX}; or sectors as 2048s, N%, or rest");
        assert_eq!(parse_size("1 Q").unwrap_err().to_string(), want);
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn parts_parse() {
        let r = parse_part("512MiB:efi:EFI system").unwrap();
        assert_eq!(
            (r.size, r.type_id.as_str(), r.name.as_deref()),
            (Size::Bytes(512 * MIB), "efi", Some("EFI system"))
        );
        let r = parse_part("rest").unwrap();
        assert_eq!((r.size, r.type_id.as_str(), r.name), (Size::Rest, "linux", None));
        assert!(parse_part("lots:linux").is_err());
    }
}
