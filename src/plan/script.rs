//! sfdisk scripts, as `sfdisk -d` dumps them or as written by hand: what
//! a plan is made from.

use super::error::PlanError;
use super::planned::Plan;
use super::request::{parse_size, Align, NewLabel, PartitionRequest, Size, SizeError};
use super::resolve::mbr_code;
use crate::align::{lcm, Geometry};
use crate::table::mbr;

/// Why a script cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("the script is larger than {} KiB", SCRIPT_LIMIT >> 10)]
    TooLarge,
    #[error("the script is not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error("script line {line}: {reason}")]
    Line { line: usize, reason: Reason },
}

/// What is wrong with one line of a script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("{0:?}: headers come before the partitions")]
    HeaderAfterPartitions(String),
    #[error("unsupported label {0:?} (use gpt or dos)")]
    NewLabel(String),
    #[error("unit {0:?}: only `unit: sectors` is supported")]
    Unit(String),
    #[error("{0} {1:?} is not a number")]
    NotANumber(String, String),
    #[error("sector-size {0} is not a power of two from 512 to 4096")]
    SectorSize(u64),
    #[error("grain {0:?} is not a multiple of 512 bytes")]
    Grain(String),
    #[error("table-length {0}: blkalign writes GPTs of 128 entries, as every tool does")]
    TableLength(String),
    #[error("{0:?}: positional sfdisk fields are not supported; use start=, size=, type=")]
    Positional(String),
    #[error("{0:?}: unknown field {1:?}")]
    UnknownField(String, String),
    #[error("unclosed quote in {0:?}")]
    UnclosedQuote(String),
    #[error("name {0:?} is not UTF-8")]
    NameNotUtf8(String),
    #[error("bad start {0:?}: use a sector number")]
    Start(String),
    #[error(transparent)]
    Size(#[from] SizeError),
}

/// Why a plan cannot keep to a script's `first-lba` and `last-lba`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    #[error(
        "first-lba {first} lies inside the partition table, which ends before LBA {table_end}"
    )]
    InsideTable { first: u64, table_end: u64 },
    #[error(
        "last-lba {last} is past this disk's last usable LBA {usable} (dumped from a larger \
         disk? delete the line to use this disk's)"
    )]
    PastDisk { last: u64, usable: u64 },
    #[error("first-lba {first} is after last-lba {last}")]
    Inverted { first: u64, last: u64 },
    #[error(
        "partition {number} would take LBAs {start}-{end}, outside the script's first-lba \
         {first} and last-lba {last}"
    )]
    Outside { number: u32, start: u64, end: u64, first: u64, last: u64 },
}

/// The most of a script read: an `sfdisk -d` dump of 128 partitions is
/// about 25 KiB.
pub const SCRIPT_LIMIT: usize = 1 << 20;

/// An sfdisk script (as `sfdisk -d` dumps it, or written by hand), as a
/// plan uses it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    /// `label:`
    pub label: Option<NewLabel>,
    /// One per data partition line. `first-lba` already bounds the first
    /// start.
    pub requests: Vec<PartitionRequest>,
    /// The extended partition lines (`type=5`), kept apart: without node
    /// numbers the planner makes its own container.
    pub extended: Vec<Container>,
    /// The number each request's line gave it by its node (`/dev/sda5 :`).
    pub numbers: Vec<Option<u32>>,
    /// `sector-size:`: the sectors its starts, sizes and LBAs count.
    pub sector_size: Option<u64>,
    /// `first-lba:` and `last-lba:`: the usable range of its GPT.
    pub first_lba: Option<u64>,
    pub last_lba: Option<u64>,
    /// `grain:` in bytes.
    pub grain: Option<u64>,
    /// What the script sets that a plan does not carry (`label-id`,
    /// `uuid=`, `bootable`, ...), for the user to hear.
    pub dropped: Vec<String>,
}

/// An MBR extended partition a script asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// How many data partition lines came before its line.
    pub after: usize,
    /// Its node's number.
    pub number: Option<u32>,
    pub min_start: Option<u64>,
    pub size: Size,
}

/// An MBR's numbers as a script gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Slots {
    /// Per request: 1-4 primary, 5 on logical.
    pub(super) numbers: Vec<u32>,
    /// Numbered, when there are logicals or the script has one.
    pub(super) extended: Option<Container>,
}

/// Parse an sfdisk script of at most [`SCRIPT_LIMIT`] bytes: headers
/// (`label:`, `label-id:`, `device:`, `unit: sectors`, `first-lba:`,
/// `last-lba:`, `sector-size:`, `table-length:`, `grain:`), then one
/// partition per line as `[NODE :] start=, size=, type=, name=, uuid=,
/// attrs=, bootable`, separated by commas, semicolons or blanks, values
/// padded or quoted. Positional lines (`,1M,83`) are refused; so is
/// anything sfdisk refuses (an unknown field, a unit other than sectors).
pub fn parse_script(text: impl AsRef<[u8]>) -> Result<Script, ScriptError> {
    let bytes = text.as_ref();
    if bytes.len() > SCRIPT_LIMIT {
        return Err(ScriptError::TooLarge);
    }
    let text = std::str::from_utf8(bytes).map_err(ScriptError::NotUtf8)?;
    let mut script = Script::default();
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |reason| ScriptError::Line { line: n, reason };
        match header(line) {
            Some(_) if !script.numbers.is_empty() => {
                return Err(at(Reason::HeaderAfterPartitions(line.into())));
            }
            Some((key, value)) => script.header(key, value).map_err(at)?,
            None => script.partition(line).map_err(at)?,
        }
    }
    if let (Some(first), Some(r)) = (script.first_lba, script.requests.first_mut()) {
        r.min_start = Some(r.min_start.map_or(first, |s| s.max(first)));
    }
    Ok(script)
}

impl Script {
    fn header(&mut self, key: &str, value: &str) -> Result<(), Reason> {
        match key {
            "label" => self.label = Some(script_label(value)?),
            "label-id" => self.note_dropped(format!("label-id {value}")),
            // Where it was dumped from: nothing to plan.
            "device" => {}
            "unit" if value == "sectors" => {}
            "unit" => return Err(Reason::Unit(value.into())),
            "first-lba" => self.first_lba = Some(sectors(key, value)?),
            "last-lba" => self.last_lba = Some(sectors(key, value)?),
            "sector-size" => {
                let size = sectors(key, value)?;
                if !crate::units::is_sector_size(size, 4096) {
                    return Err(Reason::SectorSize(size));
                }
                self.sector_size = Some(size);
            }
            "grain" => {
                let bytes = crate::units::parse_bytes(value).filter(|&b| b > 0 && b % 512 == 0);
                self.grain = Some(bytes.ok_or_else(|| Reason::Grain(value.into()))?);
            }
            "table-length" if value == "128" => {}
            "table-length" => return Err(Reason::TableLength(value.into())),
            // sfdisk ignores headers it does not know, with a warning.
            other => self.note_dropped(format!("header {other:?}")),
        }
        Ok(())
    }

    /// A partition line, with its node's number; an extended container is
    /// dropped.
    fn partition(&mut self, line: &str) -> Result<(), Reason> {
        let positional = || Reason::Positional(line.into());
        if !line.contains('=') {
            return Err(positional());
        }
        // "/dev/sda1 : start=..." names the node before any `=`.
        let (node, text) = match line.split_once(':') {
            Some((node, text)) if !node.contains('=') => (Some(node.trim()), text),
            _ => (None, line),
        };
        let mut r = PartitionRequest {
            min_start: None,
            size: Size::Rest,
            type_id: "linux".into(),
            name: None,
        };
        for (key, value) in fields(text)? {
            match (key.to_ascii_lowercase().as_str(), value) {
                ("start", Some(v)) => r.min_start = script_start(&v)?,
                ("size", Some(v)) => r.size = script_size(&v)?,
                ("type" | "id", Some(v)) => r.type_id = script_type(&v).to_string(),
                ("name", Some(v)) => r.name = Some(unhex(&v)?),
                (field @ ("uuid" | "attrs"), Some(_)) => self.note_dropped(format!("{field}=")),
                ("bootable", None) => self.note_dropped("bootable".into()),
                (_, None) => return Err(positional()),
                (_, Some(_)) => return Err(Reason::UnknownField(line.into(), key)),
            }
        }
        let number = node.and_then(node_number);
        // sfdisk takes an extended type in any spelling: 5, 0x05, f, ...
        if mbr_code(&r.type_id).is_some_and(|c| mbr::EXTENDED_TYPES.contains(&c)) {
            let (min_start, size) = (r.min_start, r.size);
            self.extended.push(Container { after: self.requests.len(), number, min_start, size });
        } else {
            self.requests.push(r);
            self.numbers.push(number);
        }
        Ok(())
    }

    /// The MBR numbers the script gives, taken as sfdisk takes them: None
    /// unless every partition line names its node. Logical partitions are
    /// numbered from 5 in the order listed (the order of their EBR chain),
    /// whatever their nodes say; an extended partition the script lacks
    /// takes the first free primary slot.
    pub(super) fn slots(&self) -> Result<Option<Slots>, PlanError> {
        let Some(given) = self.numbers.iter().copied().collect::<Option<Vec<u32>>>() else {
            return Ok(None);
        };
        if given.is_empty() {
            return Ok(None);
        }
        if self.extended.len() > 1 {
            return Err(PlanError::Extendeds(self.extended.len()));
        }
        let ext = self.extended.first();
        let ext_number = ext.and_then(|e| e.number);
        if let Some(n) = ext_number.filter(|n| !(1..=4).contains(n)) {
            return Err(PlanError::Slot(n));
        }
        let mut seen = Vec::new();
        for n in given.iter().copied().chain(ext_number) {
            if n == 0 {
                return Err(PlanError::Slot(n));
            }
            if seen.contains(&n) {
                return Err(PlanError::Duplicate(n));
            }
            seen.push(n);
        }
        let mut logical = 4;
        let numbers: Vec<u32> = given
            .iter()
            .map(|&n| match n {
                1..=4 => n,
                _ => {
                    logical += 1;
                    logical
                }
            })
            .collect();
        let free = || (1..=4).find(|n| !seen.contains(n)).ok_or(PlanError::NoSlot);
        let extended = match ext {
            Some(e) => {
                Some(Container { number: Some(e.number.map_or_else(free, Ok)?), ..e.clone() })
            }
            None => match numbers.iter().position(|&n| n > 4) {
                Some(after) => Some(Container {
                    after,
                    number: Some(free()?),
                    min_start: None,
                    size: Size::Rest,
                }),
                None => None,
            },
        };
        Ok(Some(Slots { numbers, extended }))
    }

    fn note_dropped(&mut self, what: String) {
        if !self.dropped.contains(&what) {
            self.dropped.push(what);
        }
    }

    /// Hold `plan` to the script's `first-lba`/`last-lba` and give its
    /// table that usable range, as sfdisk does; a range outside what the
    /// disk allows is refused, as sfdisk refuses it.
    pub fn bound(&self, plan: &mut Plan) -> Result<(), BoundError> {
        if self.first_lba.is_none() && self.last_lba.is_none() {
            return Ok(());
        }
        let first = self.first_lba.unwrap_or(plan.first_usable_lba);
        let last = self.last_lba.unwrap_or(plan.last_usable_lba);
        if first < plan.first_usable_lba {
            return Err(BoundError::InsideTable { first, table_end: plan.first_usable_lba });
        }
        if last > plan.last_usable_lba {
            return Err(BoundError::PastDisk { last, usable: plan.last_usable_lba });
        }
        if first > last {
            return Err(BoundError::Inverted { first, last });
        }
        for p in &plan.partitions {
            let end = p.start.saturating_add(p.size).saturating_sub(1);
            if p.ebr.unwrap_or(p.start) < first || end > last {
                let (number, start) = (p.number, p.start);
                return Err(BoundError::Outside { number, start, end, first, last });
            }
        }
        (plan.first_usable_lba, plan.last_usable_lba) = (first, last);
        Ok(())
    }

    /// `align` on `g` joined with the script's `grain:`, if it gives one:
    /// starts keep both.
    pub fn align(&self, align: Align, g: &Geometry) -> Result<Align, PlanError> {
        let Some(grain) = self.grain else { return Ok(align) };
        let ours = super::grain::grain(g, align)?;
        let both = lcm(ours, grain).ok_or(PlanError::NoCommonGrain(grain, ours))?;
        Ok(Align::Bytes(both))
    }

    /// The partitions `plan` numbers otherwise than the script's nodes:
    /// (the script's number, the plan's).
    pub fn renumbered(&self, plan: &Plan) -> Vec<(u32, u32)> {
        let theirs = |i: usize| self.numbers.get(i).copied().flatten();
        let numbers = plan.partitions.iter().filter_map(|p| Some((theirs(p.request?)?, p.number)));
        numbers.filter(|(theirs, ours)| theirs != ours).collect()
    }
}

/// `key: value` header lines: partition lines have an `=`.
fn header(line: &str) -> Option<(&str, &str)> {
    if line.contains('=') {
        return None;
    }
    let (key, value) = line.split_once(':')?;
    Some((key.trim(), value.trim()))
}

fn script_label(value: &str) -> Result<NewLabel, Reason> {
    match value {
        "gpt" => Ok(NewLabel::Gpt),
        "dos" | "mbr" => Ok(NewLabel::Mbr),
        other => Err(Reason::NewLabel(other.into())),
    }
}

/// A header counting sectors: a plain number, as sfdisk dumps it.
fn sectors(key: &str, value: &str) -> Result<u64, Reason> {
    value.parse().map_err(|_| Reason::NotANumber(key.into(), value.into()))
}

/// The partition number in a node name: the digits that end it.
fn node_number(node: &str) -> Option<u32> {
    let stem = node.trim_end_matches(|c: char| c.is_ascii_digit());
    node[stem.len()..].parse().ok()
}

fn is_separator(c: char) -> bool {
    matches!(c, ',' | ';' | ' ' | '\t')
}

/// A partition line's fields in order: `key=value` (blanks after `=`
/// skipped, a value quoted or ending at a separator) or a bare word.
fn fields(text: &str) -> Result<Vec<(String, Option<String>)>, Reason> {
    let mut out = Vec::new();
    let mut rest = text.trim_start_matches(is_separator);
    while !rest.is_empty() {
        let end = rest.find(|c| c == '=' || is_separator(c)).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        let value = match after.strip_prefix('=') {
            Some(after) => {
                let (value, next) = field_value(after.trim_start_matches([' ', '\t']))?;
                rest = next;
                Some(value)
            }
            None => {
                rest = after;
                None
            }
        };
        out.push((word.to_string(), value));
        rest = rest.trim_start_matches(is_separator);
    }
    Ok(out)
}

fn field_value(text: &str) -> Result<(String, &str), Reason> {
    if let Some(quoted) = text.strip_prefix('"') {
        let unclosed = || Reason::UnclosedQuote(text.into());
        let (value, rest) = quoted.split_once('"').ok_or_else(unclosed)?;
        return Ok((value.to_string(), rest));
    }
    let end = text.find(is_separator).unwrap_or(text.len());
    Ok((text[..end].to_string(), &text[end..]))
}

/// sfdisk writes `"`, `\`, `` ` ``, `$` and unprintable bytes of a name as
/// `\xNN`.
fn unhex(text: &str) -> Result<String, Reason> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        let hex = tail.strip_prefix(b"x").and_then(|t| t.get(..2));
        let code = hex.and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match code.filter(|_| b == b'\\') {
            Some(code) => {
                bytes.push(code);
                rest = tail.get(3..).unwrap_or_default();
            }
            None => {
                bytes.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8(bytes).map_err(|_| Reason::NameNotUtf8(text.into()))
}

/// sfdisk starts: a sector number, or empty, `-` or `+` for the default.
fn script_start(value: &str) -> Result<Option<u64>, Reason> {
    if matches!(value, "" | "-" | "+") {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| Reason::Start(value.into()))
}

/// sfdisk sizes: a bare number counts sectors; empty, `-` or `+` mean the
/// rest.
fn script_size(value: &str) -> Result<Size, Reason> {
    let v = value.trim_start_matches('+');
    if v.is_empty() || v == "-" {
        return Ok(Size::Rest);
    }
    match v.parse() {
        Ok(n) => Ok(Size::Sectors(n)),
        Err(_) => Ok(parse_size(v)?),
    }
}

/// sfdisk's one-letter type shortcuts.
fn script_type(value: &str) -> &str {
    match value {
        "L" => "linux",
        "S" => "swap",
        "U" => "efi",
        "R" => "raid",
        "V" => "lvm",
        "E" | "X" => "extended",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{disk, plan_on};

    #[test]
    fn scripts_parse() {
        let script =
            "label: dos\nunit: sectors\n\n/dev/sda1 : start=2048, size=204800, type=83, bootable\n\
            start=206848 size=1GiB type=S\ntype=5\nsize=+, type=8e\n";
        let s = parse_script(script).unwrap();
        assert_eq!(s.label, Some(NewLabel::Mbr));
        let got: Vec<_> =
            s.requests.iter().map(|r| (r.min_start, r.size, r.type_id.as_str())).collect();
        assert_eq!(
            got,
            [
                (Some(2048), Size::Sectors(204800), "83"),
                (Some(206848), Size::Bytes(1 << 30), "swap"),
                (None, Size::Rest, "8e"),
            ]
        );
        assert_eq!(s.numbers, [Some(1), None, None]);
        let s = parse_script("label: gpt\nsize=1MiB, type=U, name=\"EFI system\"\n").unwrap();
        assert_eq!(s.label, Some(NewLabel::Gpt));
        assert_eq!(s.requests[0].name.as_deref(), Some("EFI system"));
        assert!(parse_script("label: sun\n").unwrap_err().to_string().contains("line 1"));
        assert!(parse_script("start=x\n").is_err());
    }

    #[test]
    fn positional_script_lines_are_refused() {
        for script in ["label: dos\n,1M,83\n", "label: gpt\n2048,4096\n", "size=1M, L\n"] {
            let err = parse_script(script).unwrap_err().to_string();
            assert!(err.contains("positional sfdisk fields are not supported"), "{err}");
            assert!(err.contains("use start=, size=, type="), "{err}");
            let line = script.lines().last().unwrap();
            assert!(err.contains(&format!("{line:?}")), "names the line: {err}");
        }
        let s = parse_script("start=2048, size=100, type=83, bootable\n").unwrap();
        assert_eq!(s.requests.len(), 1, "bootable is a flag, not a positional field");
    }

    /// `sfdisk -d` of an image sfdisk 2.38 partitioned (dos).
    const DOS_DUMP: &str = "label: dos\nlabel-id: 0x19050014\ndevice: d.img\nunit: sectors\n\
        sector-size: 512\n\n\
        d.img1 : start=          63, size=      200000, type=83, bootable\n\
        d.img2 : start=      204800, size=      100000, type=5\n\
        d.img5 : start=      204863, size=        2000, type=83\n";

    /// `sfdisk -d` of an image sfdisk 2.38 partitioned (gpt).
    const GPT_DUMP: &str = "label: gpt\nlabel-id: 83909FFD-3306-A94F-BCAA-83855B6D97FB\n\
        device: /dev/loop0\nunit: sectors\nfirst-lba: 2048\nlast-lba: 524254\nsector-size: 512\n\n\
        /dev/loop0p1 : start=        2048, size=       20000, \
        type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=D4AEADDA-F576-E34C-B011-5DF784E3A1C8\n\
        /dev/loop0p2 : start=       22528, size=       40000, \
        type=0657FD6D-A4AB-43C4-84E5-0933C84B4F4F, uuid=4CFD2F4B-486F-564C-9E17-44203DFD24EC, \
        name=\"swap x\", attrs=\"RequiredPartition LegacyBIOSBootable\"\n\
        /dev/loop0p3 : start=       63488, size=       10000, \
        type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=01234567-89AB-CDEF-0123-456789ABCDEF\n";

    /// Found while fuzzing (target script): `type=0x05` was kept as a data
    /// partition, and written as an extended container with no EBR.
    #[test]
    fn extended_lines_are_dropped_however_spelled() {
        for t in ["5", "0x05", "0x5", "0F", "85", "E", "extended-lba"] {
            let s = parse_script(format!("label: dos\nsize=100, type={t}\nsize=200\n")).unwrap();
            assert_eq!(s.requests.len(), 1, "{t}");
        }
    }

    #[test]
    fn sfdisk_dumps_parse_with_padded_fields_and_node_prefixes() {
        let s = parse_script(DOS_DUMP).unwrap();
        assert_eq!(s.label, Some(NewLabel::Mbr));
        let got: Vec<_> = s.requests.iter().map(|r| (r.min_start, r.size)).collect();
        assert_eq!(got, [(Some(63), Size::Sectors(200000)), (Some(204863), Size::Sectors(2000))]);
        assert_eq!(s.numbers, [Some(1), Some(5)], "the extended container is dropped");
        assert_eq!(s.sector_size, Some(512));
        assert_eq!(s.dropped, ["label-id 0x19050014", "bootable"]);

        let s = parse_script(GPT_DUMP).unwrap();
        assert_eq!(
            (s.label, s.first_lba, s.last_lba),
            (Some(NewLabel::Gpt), Some(2048), Some(524254))
        );
        let got: Vec<_> = s.requests.iter().map(|r| (r.min_start, r.size)).collect();
        assert_eq!(
            got,
            [
                (Some(2048), Size::Sectors(20000)),
                (Some(22528), Size::Sectors(40000)),
                (Some(63488), Size::Sectors(10000)),
            ]
        );
        assert_eq!(s.requests[1].name.as_deref(), Some("swap x"));
        assert_eq!(s.requests[1].type_id, "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F");
        assert_eq!(s.numbers, [Some(1), Some(2), Some(3)]);
        assert_eq!(s.dropped, ["label-id 83909FFD-3306-A94F-BCAA-83855B6D97FB", "uuid=", "attrs="]);
    }

    #[test]
    fn fields_split_like_sfdisk() {
        let s = parse_script("1 :start=  2048;size=  100\ttype=83 ; name=\"a, b\"\n").unwrap();
        let r = &s.requests[0];
        assert_eq!(
            (r.min_start, r.size, r.type_id.as_str()),
            (Some(2048), Size::Sectors(100), "83")
        );
        assert_eq!((r.name.as_deref(), s.numbers[0]), (Some("a, b"), Some(1)));
        // Field names in any case; an empty or `-` start is the default.
        let s = parse_script("START=, SIZE=-, Id=82\nstart=- ,size=10\n").unwrap();
        assert_eq!((s.requests[0].min_start, s.requests[0].size), (None, Size::Rest));
        assert_eq!(s.requests[0].type_id, "82");
        assert_eq!((s.requests[1].min_start, s.requests[1].size), (None, Size::Sectors(10)));
        // sfdisk writes awkward bytes of a name as \xNN.
        let s = parse_script("size=1, name=\"a\\x22b\\x5cc \\xc3\\xa9\"\n").unwrap();
        assert_eq!(s.requests[0].name.as_deref(), Some("a\"b\\c é"));
        // A node without a number numbers nothing.
        assert_eq!(parse_script("disk : size=1\n").unwrap().numbers, [None]);
    }

    #[test]
    fn every_header_is_read_or_refused_with_a_reason() {
        let s = parse_script(
            "label: gpt\nlabel-id: X\ndevice: /dev/sdb\nunit: sectors\nfirst-lba: 34\n\
             last-lba: 9000\nsector-size: 4096\ntable-length: 128\ngrain: 4MiB\nfuture: 1\n\
             size=1\n",
        )
        .unwrap();
        assert_eq!((s.first_lba, s.last_lba, s.sector_size), (Some(34), Some(9000), Some(4096)));
        assert_eq!(s.grain, Some(4 << 20));
        assert_eq!(s.requests[0].min_start, Some(34), "first-lba bounds the first start");
        assert_eq!(s.dropped, ["label-id X", "header \"future\""]);
        for (bad, why) in [
            ("unit: cylinders\n", "only `unit: sectors`"),
            ("unit: bytes\n", "only `unit: sectors`"),
            ("sector-size: 520\n", "not a power of two"),
            ("sector-size: 0\n", "not a power of two"),
            ("first-lba: 1MiB\n", "not a number"),
            ("last-lba: -1\n", "not a number"),
            ("table-length: 256\n", "128 entries"),
            ("grain: 1000\n", "multiple of 512"),
            ("label:\n", "unsupported label"),
            ("size=1\nlabel: gpt\n", "headers come before"),
            ("size=1, colour=red\n", "unknown field \"colour\""),
            ("size=1, name=\"open\n", "unclosed quote"),
        ] {
            let err = parse_script(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_scripts_grain_joins_the_alignment() {
        let g = Geometry {
            logical: 512,
            physical: 4096,
            physical_assumed: false,
            alignment_offset: 0,
            optimal_io: None,
        };
        let script = |grain| Script { grain, ..Script::default() };
        assert_eq!(script(None).align(Align::Minimal, &g), Ok(Align::Minimal));
        assert_eq!(script(Some(3 << 20)).align(Align::Optimal, &g), Ok(Align::Bytes(3 << 20)));
        assert_eq!(script(Some(512)).align(Align::Minimal, &g), Ok(Align::Bytes(4096)));
        let odd = 512 * ((1 << 54) - 1);
        let err = script(Some(odd)).align(Align::Optimal, &g).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("the script's grain {odd} and 1048576 have no common multiple")
        );
        let bad = script(Some(4096)).align(Align::Bytes(100), &g).unwrap_err();
        assert_eq!(bad, PlanError::Grain(100, 512));
    }

    #[test]
    fn renumbered_partitions_are_those_the_plan_numbers_otherwise() {
        let script = parse_script(
            "label: dos\n/dev/sda1 : start=2048, size=2048, type=83\n\
             /dev/sda3 : size=2048, type=83\nsize=2048, type=83\n",
        )
        .unwrap();
        let part = |number, request| super::super::PlannedPartition {
            number,
            start: 0,
            size: 0,
            role: super::super::Role::Primary,
            type_id: "83".into(),
            name: None,
            ebr: None,
            request,
        };
        let plan = Plan {
            label: NewLabel::Mbr,
            sector_size: 512,
            total_sectors: 1 << 20,
            grain_bytes: 1 << 20,
            first_usable_lba: 1,
            last_usable_lba: (1 << 20) - 1,
            partitions: vec![part(1, Some(0)), part(2, Some(1)), part(3, Some(2)), part(4, None)],
        };
        assert_eq!(script.renumbered(&plan), [(3, 2)]);
    }

    #[test]
    fn scripts_past_the_limit_are_refused() {
        let line = "size=1\n";
        let at_limit = line.repeat(SCRIPT_LIMIT / line.len());
        assert!(parse_script(&at_limit).is_ok());
        let over = format!("{at_limit}{}", "#".repeat(SCRIPT_LIMIT - at_limit.len() + 1));
        assert!(parse_script(&over).unwrap_err().to_string().contains("larger than 1024 KiB"));
        assert!(parse_script([b's', 0xff, b'\n']).unwrap_err().to_string().contains("not UTF-8"));
    }

    #[test]
    fn bounds_hold_the_plan_and_become_its_usable_range() {
        let d = disk(64 << 20, 512);
        let mut s =
            parse_script("first-lba: 4096\nlast-lba: 100000\nsize=1MiB\nsize=1MiB\n").unwrap();
        let mut p = plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &s.requests).unwrap();
        s.bound(&mut p).unwrap();
        assert_eq!(
            (p.partitions[0].start, p.first_usable_lba, p.last_usable_lba),
            (4096, 4096, 100000)
        );
        for (first, last, why) in [
            (Some(10), None, "inside the partition table"),
            (None, Some(1 << 30), "past this disk's last usable LBA"),
            (Some(9000), Some(8000), "after last-lba"),
            (None, Some(5000), "outside the script's"),
        ] {
            (s.first_lba, s.last_lba) = (first, last);
            let mut p = plan_on(&d, NewLabel::Gpt, Align::Optimal, false, &s.requests).unwrap();
            let err = s.bound(&mut p).unwrap_err().to_string();
            assert!(err.contains(why), "{first:?} {last:?}: {err}");
        }
    }
}
