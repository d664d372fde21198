//! Planning aligned partition tables: where each partition of a request
//! goes, before anything is written.

use crate::align::{align_down, align_up, lcm, MIB};
use crate::table::gpt::{Guid, ENTRY_SIZE};
use crate::table::write::{self, GptBytes, Ids, MbrBytes, TableBytes, WriteError};
use crate::table::{self, mbr, types};
use serde::Serialize;

/// Sectors per cylinder in the 224-head, 56-sector geometry: cylinder (and
/// track) boundaries then fall on 4 KiB, pleasing old operating systems and
/// Advanced Format drives alike.
pub const CYLINDER_SECTORS: u64 = 224 * 56;
const TRACK_SECTORS: u64 = 56;

/// MBR fields are 32-bit sector counts.
const MBR_LIMIT: u64 = u32::MAX as u64;

/// GPT entry array: 128 entries of 128 bytes, as every tool writes it.
pub const GPT_ENTRIES_BYTES: u64 = 128 * 128;
const GPT_ENTRY_SIZE: usize = ENTRY_SIZE as usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Gpt,
    Mbr,
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
pub struct Request {
    /// The lowest LBA it may start at (an sfdisk script's `start=`); the
    /// start is still rounded up to the grain.
    pub min_start: Option<u64>,
    pub size: Size,
    pub type_id: String,
    pub name: Option<String>,
}

/// The disk a plan is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disk {
    pub size_bytes: u64,
    pub logical: u64,
    /// The effective physical sector.
    pub physical: u64,
    pub alignment_offset: u64,
    pub optimal_io: Option<u64>,
}

/// Where a planned partition sits in its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Extended,
    Logical,
    Gpt,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Planned {
    pub number: u32,
    pub start: u64,
    pub size: u64,
    pub role: Role,
    pub type_id: String,
    pub name: Option<String>,
    /// For logical partitions: the LBA of their EBR.
    pub ebr: Option<u64>,
    /// The request it was made for (an index); None for an extended
    /// container the planner added.
    #[serde(skip)]
    pub request: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub label: Label,
    pub sector_size: u64,
    pub total_sectors: u64,
    pub grain_bytes: u64,
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub partitions: Vec<Planned>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("no partitions requested")]
    Empty,
    #[error("invalid alignment grain {0}: it must be a positive multiple of the {1}-byte logical sector")]
    Grain(u64, u64),
    #[error("an MBR cannot address this disk: {0} sectors of {1} bytes exceed the 2^32-sector limit (use --label gpt)")]
    MbrTooLarge(u64, u64),
    #[error("partition {0} does not fit: it needs {1} sectors from LBA {2}, and the last usable LBA is {3}")]
    NoRoom(usize, u64, u64, u64),
    #[error("only the last partition may be `rest`")]
    RestNotLast,
    #[error("a percentage must be between 1 and 100, not {0}")]
    Percent(u64),
    #[error("--cylinder-compatible needs 512-byte logical sectors")]
    Cylinder,
    #[error("the disk is too small for a {0:?} table")]
    TooSmall(Label),
    #[error("unknown partition type {0:?} for {1:?}: use a name (linux, swap, efi, lvm, raid, ...), an MBR hex code or a GPT type GUID")]
    Type(String, Label),
    #[error("type {0:?} is not a partition's: 0x05, 0x0f and 0x85 mark the extended container (made by the planner when more than four partitions are asked for) and 0xee a GPT's protective entry (use --label gpt)")]
    Container(String),
    #[error("partition name {0:?}: {1}")]
    Name(String, &'static str),
    #[error("a GPT holds at most 128 partitions, not {0}")]
    TooMany(usize),
    #[error("partition {0} is given twice")]
    Duplicate(u32),
    #[error("partition {0}: an MBR numbers its primary and extended partitions 1 to 4, its logical ones from 5")]
    Slot(u32),
    #[error("an MBR holds one extended partition, and the script gives {0}")]
    Extendeds(usize),
    #[error(
        "the logical partitions need an extended partition, and primaries take all four MBR slots"
    )]
    NoSlot,
}

/// The grain in bytes for `align` on `disk`.
pub fn grain(disk: &Disk, align: Align) -> Result<u64, PlanError> {
    let g = match align {
        Align::Minimal => Some(disk.physical.max(disk.logical)),
        Align::Bytes(b) => Some(b),
        Align::Optimal => {
            let io = disk.optimal_io.unwrap_or(disk.physical);
            lcm(MIB, io).and_then(|g| lcm(g, disk.physical))
        }
    };
    match g {
        Some(g) if g > 0 && g % disk.logical == 0 => Ok(g),
        other => Err(PlanError::Grain(other.unwrap_or(0), disk.logical)),
    }
}

/// Lay out `requests` on `disk`: every start on the grain (counted from the
/// alignment offset), in request order, without gaps beyond alignment.
pub fn plan(
    disk: &Disk,
    label: Label,
    align: Align,
    cylinder_compatible: bool,
    requests: &[Request],
) -> Result<Plan, PlanError> {
    plan_with(disk, label, align, cylinder_compatible, requests, None)
}

/// Lay out `script` on `disk` as [`plan`] does, except that an MBR script
/// numbering every partition (an `sfdisk -d` dump) keeps its numbers, as
/// sfdisk does: 1-4 primary, 5 on logical, its extended partition where
/// the script puts it, and the partitions in the order of their starts.
pub fn plan_script(
    disk: &Disk,
    label: Label,
    align: Align,
    cylinder_compatible: bool,
    script: &Script,
) -> Result<Plan, PlanError> {
    let slots = match label {
        Label::Mbr => script.slots()?,
        Label::Gpt => None,
    };
    plan_with(disk, label, align, cylinder_compatible, &script.requests, slots.as_ref())
}

fn plan_with(
    disk: &Disk,
    label: Label,
    align: Align,
    cylinder_compatible: bool,
    requests: &[Request],
    slots: Option<&Slots>,
) -> Result<Plan, PlanError> {
    if requests.is_empty() {
        return Err(PlanError::Empty);
    }
    if requests.iter().rev().skip(1).any(|r| r.size == Size::Rest) {
        return Err(PlanError::RestNotLast);
    }
    if label == Label::Gpt && requests.len() > 128 {
        return Err(PlanError::TooMany(requests.len()));
    }
    let requests = requests.iter().map(|r| resolve(label, r)).collect::<Result<Vec<_>, _>>()?;
    let requests = requests.as_slice();
    let mut grain_bytes = grain(disk, align)?;
    if cylinder_compatible {
        if disk.logical != 512 {
            return Err(PlanError::Cylinder);
        }
        grain_bytes =
            lcm(grain_bytes, CYLINDER_SECTORS * 512).ok_or(PlanError::Grain(grain_bytes, 512))?;
    }
    let total = disk.size_bytes / disk.logical;
    let (first_usable, last_usable) = usable(label, total, disk.logical)?;
    let mut layout = Layouter {
        disk,
        grain: grain_bytes,
        cursor: first_usable,
        last: last_usable,
        total,
        first: cylinder_compatible.then_some(TRACK_SECTORS),
    };
    let partitions = match (label, slots) {
        (Label::Gpt, _) => layout.gpt(requests)?,
        (Label::Mbr, None) => layout.mbr(requests)?,
        (Label::Mbr, Some(slots)) => layout.numbered(requests, slots)?,
    };
    Ok(Plan {
        label,
        sector_size: disk.logical,
        total_sectors: total,
        grain_bytes,
        first_usable_lba: first_usable,
        last_usable_lba: last_usable,
        partitions,
    })
}

/// First and last LBA a partition may use.
fn usable(label: Label, total: u64, logical: u64) -> Result<(u64, u64), PlanError> {
    match label {
        Label::Gpt => {
            let array = GPT_ENTRIES_BYTES.div_ceil(logical);
            let first = 2 + array;
            let last = total.checked_sub(2 + array).filter(|&l| l > first);
            last.map(|l| (first, l)).ok_or(PlanError::TooSmall(label))
        }
        Label::Mbr => {
            if total > MBR_LIMIT + 1 {
                return Err(PlanError::MbrTooLarge(total, logical));
            }
            let last = total.checked_sub(1).filter(|&l| l > 1);
            last.map(|l| (1, l)).ok_or(PlanError::TooSmall(label))
        }
    }
}

struct Layouter<'a> {
    disk: &'a Disk,
    grain: u64,
    /// The first LBA not yet used.
    cursor: u64,
    last: u64,
    total: u64,
    /// A fixed first start (the track-1 start of cylinder-compatible MBRs).
    first: Option<u64>,
}

impl Layouter<'_> {
    fn gpt(&mut self, requests: &[Request]) -> Result<Vec<Planned>, PlanError> {
        let mut out = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            let start = self.next_start(self.cursor.max(r.min_start.unwrap_or(0)));
            let number = i as u32 + 1;
            let size = self.size_at(number, r.size, start)?;
            self.cursor = start + size;
            out.push(planned(number, start, size, Role::Gpt, r, None).of(i));
        }
        Ok(out)
    }

    fn mbr(&mut self, requests: &[Request]) -> Result<Vec<Planned>, PlanError> {
        // Leave the first grain for the MBR and a boot loader.
        self.cursor = self.cursor.max(self.grain / self.disk.logical);
        let primaries = if requests.len() > 4 { 3 } else { requests.len() };
        let mut out = Vec::new();
        for (i, r) in requests.iter().take(primaries).enumerate() {
            out.push(self.primary(i as u32 + 1, r)?.of(i));
        }
        if requests.len() > 4 {
            let logicals: Vec<(usize, &Request)> = requests.iter().enumerate().skip(3).collect();
            let ext = Container { after: 3, number: Some(4), min_start: None, size: Size::Rest };
            self.extended(&ext, &logicals, &mut out)?;
        }
        Ok(out)
    }

    /// A primary partition at the cursor or the request's start.
    fn primary(&mut self, number: u32, r: &Request) -> Result<Planned, PlanError> {
        let start = match self.first.take() {
            Some(fixed) => fixed,
            None => self.next_start(self.cursor.max(r.min_start.unwrap_or(0))),
        };
        let size = self.size_at(number, r.size, start)?;
        self.cursor = start + size;
        Ok(planned(number, start, size, Role::Primary, r, None))
    }

    /// An MBR by the numbers of `slots`: its primaries and its extended
    /// partition in the order of their starts (when every one has a start,
    /// else as listed), listed by number.
    fn numbered(&mut self, requests: &[Request], slots: &Slots) -> Result<Vec<Planned>, PlanError> {
        self.cursor = self.cursor.max(self.grain / self.disk.logical);
        let logicals: Vec<(usize, &Request)> =
            requests.iter().enumerate().filter(|&(i, _)| slots.numbers[i] > 4).collect();
        let mut units: Vec<Option<usize>> =
            (0..requests.len()).filter(|&i| slots.numbers[i] <= 4).map(Some).collect();
        if let Some(ext) = &slots.extended {
            let at = units.iter().flatten().filter(|&&i| i < ext.after).count();
            units.insert(at, None);
        }
        let first_logical = logicals.first().and_then(|(_, r)| r.min_start);
        let key = |u: &Option<usize>| match u {
            Some(i) => requests[*i].min_start,
            None => slots.extended.as_ref().and_then(|e| e.min_start).or(first_logical),
        };
        if units.iter().all(|u| key(u).is_some()) {
            units.sort_by_key(key);
        }
        let mut out = Vec::new();
        for unit in units {
            match (unit, &slots.extended) {
                (Some(i), _) => out.push(self.primary(slots.numbers[i], &requests[i])?.of(i)),
                (None, Some(ext)) => self.extended(ext, &logicals, &mut out)?,
                (None, None) => {}
            }
        }
        out.sort_by_key(|p| p.number);
        Ok(out)
    }

    /// The extended partition `ext` holding one EBR and one logical per
    /// request, numbered from 5, each logical on the grain, its EBR in the
    /// sector run before it. A size `ext` gives is kept unless its
    /// logicals need more, and bounds a logical's `rest`.
    fn extended(
        &mut self,
        ext: &Container,
        logicals: &[(usize, &Request)],
        out: &mut Vec<Planned>,
    ) -> Result<(), PlanError> {
        let number = ext.number.unwrap_or(4);
        // The fixed first start is a primary's, before any extended.
        self.first = None;
        let ext_start = self.next_start(self.cursor.max(ext.min_start.unwrap_or(0)));
        let fixed_end = match ext.size {
            Size::Rest if !logicals.is_empty() => None,
            size => Some(ext_start + self.size_at(number, size, ext_start)?),
        };
        let at = out.len();
        let mut ebr = ext_start;
        for (k, &(i, r)) in logicals.iter().enumerate() {
            let n = 5 + k as u32;
            let start = self.next_start((ebr + 1).max(r.min_start.unwrap_or(0)));
            let size = match (r.size, fixed_end) {
                (Size::Rest, Some(end)) => end
                    .checked_sub(start)
                    .filter(|&s| s > 0)
                    .ok_or(PlanError::NoRoom(n as usize, 1, start, end.saturating_sub(1)))?,
                (size, _) => self.size_at(n, size, start)?,
            };
            out.push(planned(n, start, size, Role::Logical, r, Some(ebr)).of(i));
            self.cursor = start + size;
            ebr = self.cursor;
        }
        let end = fixed_end.map_or(self.cursor, |e| e.max(self.cursor));
        self.cursor = end;
        let container =
            Request { min_start: None, size: Size::Rest, type_id: "0x05".into(), name: None };
        out.insert(
            at,
            planned(number, ext_start, end - ext_start, Role::Extended, &container, None),
        );
        Ok(())
    }

    /// The first grain boundary at or after `lba`.
    fn next_start(&self, lba: u64) -> u64 {
        let bytes = lba.saturating_mul(self.disk.logical);
        align_up(bytes, self.grain, self.disk.alignment_offset)
            .map_or(u64::MAX, |b| b.div_ceil(self.disk.logical))
    }

    /// One past the last grain boundary within the usable area: `rest` ends
    /// there so the next layer (LUKS, LVM, a later partition) stays aligned.
    fn rest_end(&self) -> u64 {
        let logical = self.disk.logical;
        let end = self.last.saturating_add(1).saturating_mul(logical);
        align_down(end, self.grain, self.disk.alignment_offset).map_or(0, |b| b / logical)
    }

    /// Sectors for partition `number` starting at `start`: fixed sizes
    /// exact, `rest` to the last usable LBA, ends kept before the last usable.
    fn size_at(&self, number: u32, size: Size, start: u64) -> Result<u64, PlanError> {
        let logical = self.disk.logical;
        let wanted = match size {
            Size::Bytes(b) => b.div_ceil(logical),
            Size::Sectors(n) => n,
            Size::Percent(p) if (1..=100).contains(&p) => {
                let bytes = u128::from(self.total) * u128::from(logical) * u128::from(p) / 100;
                let rounded = align_down(u64::try_from(bytes).unwrap_or(u64::MAX), self.grain, 0)
                    .unwrap_or(0);
                rounded / logical
            }
            Size::Percent(p) => return Err(PlanError::Percent(p)),
            Size::Rest => self.rest_end().saturating_sub(start),
        };
        let end = start.checked_add(wanted).filter(|&e| wanted > 0 && e <= self.last + 1);
        end.map(|_| wanted).ok_or(PlanError::NoRoom(number as usize, wanted, start, self.last))
    }
}

/// `r` with its type as the table stores it and its name checked.
fn resolve(label: Label, r: &Request) -> Result<Request, PlanError> {
    if let Some(name) = &r.name {
        if label == Label::Mbr {
            return Err(PlanError::Name(name.clone(), "only GPT partitions have names"));
        }
        if name.contains('\0') {
            return Err(PlanError::Name(name.clone(), "holds a NUL, where every reader stops"));
        }
        if name.encode_utf16().count() > 36 {
            return Err(PlanError::Name(
                name.clone(),
                "longer than the 36 UTF-16 units a GPT entry holds",
            ));
        }
    }
    let type_id = resolve_type(label, &r.type_id)?;
    Ok(Request { type_id, ..r.clone() })
}

/// The MBR code a TYPE names: a name, or a hex code ("83", "0x83").
fn mbr_code(text: &str) -> Option<u8> {
    let t = text.trim().to_ascii_lowercase();
    types::by_name(&t).map_or_else(|| types::parse_mbr_code(&t), |(code, _)| code)
}

/// A TYPE as typed, as its table stores it: "0x83" on MBR, an upper-case
/// GUID on GPT. Names, MBR hex codes ("83", "0x83") and GUIDs are accepted.
pub fn resolve_type(label: Label, text: &str) -> Result<String, PlanError> {
    let bad = || PlanError::Type(text.to_string(), label);
    let t = text.trim().to_ascii_lowercase();
    match (label, types::by_name(&t)) {
        (Label::Mbr, _) => {
            let code = mbr_code(&t).ok_or_else(bad)?;
            // Written as a partition, Linux would take it for a chain of
            // EBRs or for the guard of a GPT that is not there.
            if code == mbr::TYPE_GPT || mbr::EXTENDED_TYPES.contains(&code) {
                return Err(PlanError::Container(text.to_string()));
            }
            Ok(format!("0x{code:02x}"))
        }
        (Label::Gpt, Some((_, guid))) => guid.map(str::to_string).ok_or_else(bad),
        // Not the all-zero GUID: it marks an unused entry.
        (Label::Gpt, None) => {
            let guid = t.parse::<Guid>().ok().filter(|g| !g.is_zero());
            guid.map(|g| g.to_string()).ok_or_else(bad)
        }
    }
}

fn planned(
    number: u32,
    start: u64,
    size: u64,
    role: Role,
    r: &Request,
    ebr: Option<u64>,
) -> Planned {
    Planned {
        number,
        start,
        size,
        role,
        type_id: r.type_id.clone(),
        name: r.name.clone(),
        ebr,
        request: None,
    }
}

impl Planned {
    /// Made for request `index`.
    fn of(self, index: usize) -> Planned {
        Planned { request: Some(index), ..self }
    }
}

/// Parse a size: "512MiB", "20G", "4096" (bytes), "2048s" (sectors),
/// "25%", "rest".
pub fn parse_size(text: &str) -> Result<Size, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("rest") || t == "+" {
        return Ok(Size::Rest);
    }
    if let Some(p) = t.strip_suffix('%') {
        return p.trim().parse().map(Size::Percent).map_err(|_| format!("bad percentage {text:?}"));
    }
    if let Some(n) = t.strip_suffix(['s', 'S']) {
        return n
            .trim()
            .parse()
            .map(Size::Sectors)
            .map_err(|_| format!("bad sector count {text:?}"));
    }
    crate::units::parse_bytes(t).map(Size::Bytes).ok_or_else(|| {
        format!(
            "bad size {text:?}: {}; or sectors as 2048s, N%, or rest",
            crate::units::SIZE_SYNTAX
        )
    })
}

/// Parse `--part SIZE[:TYPE[:NAME]]`; TYPE defaults to linux. A name may
/// itself hold colons.
pub fn parse_part(text: &str) -> Result<Request, String> {
    let mut fields = text.splitn(3, ':');
    let size = parse_size(fields.next().unwrap_or_default())?;
    let type_id = fields.next().filter(|t| !t.is_empty()).unwrap_or("linux").to_string();
    let name = fields.next().map(str::to_string);
    Ok(Request { min_start: None, size, type_id, name })
}

/// The most of a script read: an `sfdisk -d` dump of 128 partitions is
/// about 25 KiB.
pub const SCRIPT_LIMIT: usize = 1 << 20;

/// An sfdisk script (as `sfdisk -d` dumps it, or written by hand), as a
/// plan uses it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    /// `label:`
    pub label: Option<Label>,
    /// One per data partition line. `first-lba` already bounds the first
    /// start.
    pub requests: Vec<Request>,
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
struct Slots {
    /// Per request: 1-4 primary, 5 on logical.
    numbers: Vec<u32>,
    /// Numbered, when there are logicals or the script has one.
    extended: Option<Container>,
}

/// Parse an sfdisk script of at most [`SCRIPT_LIMIT`] bytes: headers
/// (`label:`, `label-id:`, `device:`, `unit: sectors`, `first-lba:`,
/// `last-lba:`, `sector-size:`, `table-length:`, `grain:`), then one
/// partition per line as `[NODE :] start=, size=, type=, name=, uuid=,
/// attrs=, bootable`, separated by commas, semicolons or blanks, values
/// padded or quoted. Positional lines (`,1M,83`) are refused; so is
/// anything sfdisk refuses (an unknown field, a unit other than sectors).
pub fn parse_script(text: impl AsRef<[u8]>) -> Result<Script, String> {
    let bytes = text.as_ref();
    if bytes.len() > SCRIPT_LIMIT {
        return Err(format!("the script is larger than {} KiB", SCRIPT_LIMIT >> 10));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| format!("the script is not UTF-8: {e}"))?;
    let mut script = Script::default();
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |e: String| format!("script line {n}: {e}");
        match header(line) {
            Some(_) if !script.numbers.is_empty() => {
                return Err(at(format!("{line:?}: headers come before the partitions")));
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
    fn header(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "label" => self.label = Some(script_label(value)?),
            "label-id" => self.note_dropped(format!("label-id {value}")),
            // Where it was dumped from: nothing to plan.
            "device" => {}
            "unit" if value == "sectors" => {}
            "unit" => return Err(format!("unit {value:?}: only `unit: sectors` is supported")),
            "first-lba" => self.first_lba = Some(sectors(key, value)?),
            "last-lba" => self.last_lba = Some(sectors(key, value)?),
            "sector-size" => {
                let size = sectors(key, value)?;
                if !crate::units::is_sector_size(size, 4096) {
                    return Err(format!(
                        "sector-size {size} is not a power of two from 512 to 4096"
                    ));
                }
                self.sector_size = Some(size);
            }
            "grain" => {
                let bytes = crate::units::parse_bytes(value).filter(|&b| b > 0 && b % 512 == 0);
                self.grain =
                    Some(bytes.ok_or(format!("grain {value:?} is not a multiple of 512 bytes"))?);
            }
            "table-length" if value == "128" => {}
            "table-length" => {
                return Err(format!(
                    "table-length {value}: blkalign writes GPTs of 128 entries, as every tool does"
                ))
            }
            // sfdisk ignores headers it does not know, with a warning.
            other => self.note_dropped(format!("header {other:?}")),
        }
        Ok(())
    }

    /// A partition line, with its node's number; an extended container is
    /// dropped.
    fn partition(&mut self, line: &str) -> Result<(), String> {
        let positional = || {
            format!(
                "{line:?}: positional sfdisk fields are not supported; use start=, size=, type="
            )
        };
        if !line.contains('=') {
            return Err(positional());
        }
        // "/dev/sda1 : start=..." names the node before any `=`.
        let (node, text) = match line.split_once(':') {
            Some((node, text)) if !node.contains('=') => (Some(node.trim()), text),
            _ => (None, line),
        };
        let mut r =
            Request { min_start: None, size: Size::Rest, type_id: "linux".into(), name: None };
        for (key, value) in fields(text)? {
            match (key.to_ascii_lowercase().as_str(), value) {
                ("start", Some(v)) => r.min_start = script_start(&v)?,
                ("size", Some(v)) => r.size = script_size(&v)?,
                ("type" | "id", Some(v)) => r.type_id = script_type(&v).to_string(),
                ("name", Some(v)) => r.name = Some(unhex(&v)?),
                (field @ ("uuid" | "attrs"), Some(_)) => self.note_dropped(format!("{field}=")),
                ("bootable", None) => self.note_dropped("bootable".into()),
                (_, None) => return Err(positional()),
                (_, Some(_)) => return Err(format!("{line:?}: unknown field {key:?}")),
            }
        }
        let number = node.and_then(node_number);
        // sfdisk takes an extended type in any spelling: 5, 0x05, f, ...
        if mbr_code(&r.type_id).is_some_and(|c| table::mbr::EXTENDED_TYPES.contains(&c)) {
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
    fn slots(&self) -> Result<Option<Slots>, PlanError> {
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
    pub fn bound(&self, plan: &mut Plan) -> Result<(), String> {
        if self.first_lba.is_none() && self.last_lba.is_none() {
            return Ok(());
        }
        let first = self.first_lba.unwrap_or(plan.first_usable_lba);
        let last = self.last_lba.unwrap_or(plan.last_usable_lba);
        if first < plan.first_usable_lba {
            return Err(format!(
                "first-lba {first} lies inside the partition table, which ends before LBA {}",
                plan.first_usable_lba
            ));
        }
        if last > plan.last_usable_lba {
            return Err(format!(
                "last-lba {last} is past this disk's last usable LBA {} (dumped from a larger \
                 disk? delete the line to use this disk's)",
                plan.last_usable_lba
            ));
        }
        if first > last {
            return Err(format!("first-lba {first} is after last-lba {last}"));
        }
        for p in &plan.partitions {
            let end = p.start.saturating_add(p.size).saturating_sub(1);
            if p.ebr.unwrap_or(p.start) < first || end > last {
                return Err(format!(
                    "partition {} would take LBAs {}-{end}, outside the script's first-lba {first} \
                     and last-lba {last}",
                    p.number, p.start
                ));
            }
        }
        (plan.first_usable_lba, plan.last_usable_lba) = (first, last);
        Ok(())
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

fn script_label(value: &str) -> Result<Label, String> {
    match value {
        "gpt" => Ok(Label::Gpt),
        "dos" | "mbr" => Ok(Label::Mbr),
        other => Err(format!("unsupported label {other:?} (use gpt or dos)")),
    }
}

/// A header counting sectors: a plain number, as sfdisk dumps it.
fn sectors(key: &str, value: &str) -> Result<u64, String> {
    value.parse().map_err(|_| format!("{key} {value:?} is not a number"))
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
fn fields(text: &str) -> Result<Vec<(String, Option<String>)>, String> {
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

fn field_value(text: &str) -> Result<(String, &str), String> {
    if let Some(quoted) = text.strip_prefix('"') {
        let (value, rest) = quoted.split_once('"').ok_or(format!("unclosed quote in {text:?}"))?;
        return Ok((value.to_string(), rest));
    }
    let end = text.find(is_separator).unwrap_or(text.len());
    Ok((text[..end].to_string(), &text[end..]))
}

/// sfdisk writes `"`, `\`, `` ` ``, `$` and unprintable bytes of a name as
/// `\xNN`.
fn unhex(text: &str) -> Result<String, String> {
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
    String::from_utf8(bytes).map_err(|_| format!("name {text:?} is not UTF-8"))
}

/// sfdisk starts: a sector number, or empty, `-` or `+` for the default.
fn script_start(value: &str) -> Result<Option<u64>, String> {
    if matches!(value, "" | "-" | "+") {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| format!("bad start {value:?}: use a sector number"))
}

/// sfdisk sizes: a bare number counts sectors; empty, `-` or `+` mean the
/// rest.
fn script_size(value: &str) -> Result<Size, String> {
    let v = value.trim_start_matches('+');
    if v.is_empty() || v == "-" {
        return Ok(Size::Rest);
    }
    match v.parse() {
        Ok(n) => Ok(Size::Sectors(n)),
        Err(_) => parse_size(v),
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

impl Plan {
    /// The bytes of this plan's table, with `ids` for its GUIDs and MBR
    /// signature.
    pub fn table(&self, ids: &Ids) -> Result<TableBytes, WriteError> {
        match self.label {
            Label::Gpt => self.gpt_bytes(ids).map(TableBytes::Gpt),
            Label::Mbr => self.mbr_bytes(ids).map(TableBytes::Mbr),
        }
    }

    fn gpt_bytes(&self, ids: &Ids) -> Result<GptBytes, WriteError> {
        if ids.partition_guids.len() < self.partitions.len() {
            return Err(WriteError::Ids(self.partitions.len(), ids.partition_guids.len()));
        }
        let ss = self.sector_size;
        let array_sectors = GPT_ENTRIES_BYTES.div_ceil(ss);
        let last = self.total_sectors - 1;
        let mut mbr = write::boot_sector(ss);
        let size = (self.total_sectors - 1).min(MBR_LIMIT) as u32;
        write::mbr_entry(&mut mbr, 0, table::mbr::TYPE_GPT, 1, size, 1);
        Ok(GptBytes {
            sector_size: ss,
            disk_guid: ids.disk_guid,
            first_usable_lba: self.first_usable_lba,
            last_usable_lba: self.last_usable_lba,
            entry_size: GPT_ENTRY_SIZE as u32,
            entries: self.entry_array(ids)?,
            primary_entries_lba: 2,
            backup_header_lba: last,
            backup_entries_lba: last - array_sectors,
            mbr,
        })
    }

    /// 128 entries of 128 bytes; partition N in slot N so numbers stay stable.
    fn entry_array(&self, ids: &Ids) -> Result<Vec<u8>, WriteError> {
        let mut array = vec![0u8; GPT_ENTRIES_BYTES as usize];
        for (p, guid) in self.partitions.iter().zip(&ids.partition_guids) {
            let slot = (p.number as usize).checked_sub(1).filter(|&s| s < 128);
            let kind = p.type_id.parse::<Guid>().ok().filter(|g| !g.is_zero());
            let (Some(slot), Some(kind)) = (slot, kind) else {
                return Err(WriteError::Type(p.number, p.type_id.clone()));
            };
            let e = slot * GPT_ENTRY_SIZE;
            write::put(&mut array, e, &kind.0);
            write::put(&mut array, e + 16, guid);
            write::put(&mut array, e + 32, &p.start.to_le_bytes());
            write::put(&mut array, e + 40, &(p.start + p.size - 1).to_le_bytes());
            let name: Vec<u8> = p
                .name
                .iter()
                .flat_map(|n| n.encode_utf16())
                .take(36)
                .flat_map(u16::to_le_bytes)
                .collect();
            write::put(&mut array, e + 56, &name);
        }
        Ok(array)
    }

    fn mbr_bytes(&self, ids: &Ids) -> Result<MbrBytes, WriteError> {
        let ss = self.sector_size;
        let mut mbr = write::boot_sector(ss);
        write::put(&mut mbr, 440, &ids.mbr_signature.to_le_bytes());
        for p in self.partitions.iter().filter(|p| p.role != Role::Logical) {
            let slot = (p.number as usize).checked_sub(1).filter(|&s| s < 4);
            let kind = types::parse_mbr_code(&p.type_id);
            let (Some(slot), Some(kind)) = (slot, kind) else {
                return Err(WriteError::Type(p.number, p.type_id.clone()));
            };
            write::mbr_entry(
                &mut mbr,
                slot,
                kind,
                u32_of(p, p.start)?,
                u32_of(p, p.size)?,
                p.start,
            );
        }
        Ok(MbrBytes { sector_size: ss, mbr, ebrs: self.ebrs()?, wipes: self.stale_gpt_lbas() })
    }

    /// One EBR per logical: entry 0 the logical relative to its EBR, entry 1
    /// the next EBR relative to the extended start (empty for the last).
    fn ebrs(&self) -> Result<Vec<(u64, Vec<u8>)>, WriteError> {
        let Some(ext) = self.partitions.iter().find(|p| p.role == Role::Extended) else {
            return Ok(Vec::new());
        };
        let logicals: Vec<&Planned> =
            self.partitions.iter().filter(|p| p.role == Role::Logical).collect();
        let mut out = Vec::new();
        for (i, p) in logicals.iter().enumerate() {
            let ebr = p.ebr.ok_or(WriteError::MbrRange(p.number))?;
            let kind = types::parse_mbr_code(&p.type_id)
                .ok_or_else(|| WriteError::Type(p.number, p.type_id.clone()))?;
            let mut sector = write::boot_sector(self.sector_size);
            let (start, size) = (u32_of(p, p.start - ebr)?, u32_of(p, p.size)?);
            write::mbr_entry(&mut sector, 0, kind, start, size, p.start);
            if let Some(next) = logicals.get(i + 1) {
                let next_ebr = next.ebr.ok_or(WriteError::MbrRange(next.number))?;
                let span = u32_of(next, next.start + next.size - next_ebr)?;
                let link = u32_of(next, next_ebr - ext.start)?;
                write::mbr_entry(&mut sector, 1, 0x05, link, span, next_ebr);
            }
            out.push((ebr, sector));
        }
        Ok(out)
    }

    /// The sectors where a GPT header of either sector size would sit (byte
    /// 512 or 4096, and the end of the disk), where no partition is.
    fn stale_gpt_lbas(&self) -> Vec<u64> {
        let ss = self.sector_size;
        let first_used =
            self.partitions.iter().map(|p| p.ebr.unwrap_or(p.start)).min().unwrap_or(0);
        let head = (1..=4096 / ss).filter(|&lba| lba < first_used);
        let tail_sectors = (4096 / ss).max(1);
        let last_used = self.partitions.iter().map(|p| p.start + p.size).max().unwrap_or(0);
        let tail = (self.total_sectors.saturating_sub(tail_sectors)..self.total_sectors)
            .filter(|&lba| lba >= last_used);
        head.chain(tail).collect()
    }
}

fn u32_of(p: &Planned, v: u64) -> Result<u32, WriteError> {
    u32::try_from(v).map_err(|_| WriteError::MbrRange(p.number))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::is_aligned;
    use proptest::prelude::*;

    fn disk(size: u64, logical: u64) -> Disk {
        Disk { size_bytes: size, logical, physical: 4096, alignment_offset: 0, optimal_io: None }
    }

    fn req(size: Size) -> Request {
        Request { min_start: None, size, type_id: "linux".into(), name: None }
    }

    #[test]
    fn gpt_first_partition_at_1mib() {
        let p = plan(
            &disk(1 << 30, 512),
            Label::Gpt,
            Align::Optimal,
            false,
            &[req(Size::Bytes(MIB)), req(Size::Rest)],
        )
        .unwrap();
        assert_eq!((p.first_usable_lba, p.last_usable_lba), (34, (1 << 21) - 34));
        assert_eq!((p.partitions[0].start, p.partitions[0].size), (2048, 2048));
        assert_eq!(p.partitions[1].start, 4096);
        assert_eq!(
            p.partitions[1].start + p.partitions[1].size,
            (1 << 21) - 2048,
            "rest ends on the grain"
        );
    }

    #[test]
    fn gpt_on_4kn_and_minimal() {
        let p =
            plan(&disk(1 << 30, 4096), Label::Gpt, Align::Minimal, false, &[req(Size::Bytes(MIB))])
                .unwrap();
        assert_eq!((p.first_usable_lba, p.partitions[0].start), (6, 6));
        let p =
            plan(&disk(1 << 30, 512), Label::Gpt, Align::Minimal, false, &[req(Size::Bytes(MIB))])
                .unwrap();
        assert_eq!(p.partitions[0].start, 40);
    }

    #[test]
    fn alignment_offset_is_honoured() {
        let d = Disk { alignment_offset: 3584, ..disk(1 << 30, 512) };
        let p =
            plan(&d, Label::Mbr, Align::Minimal, false, &[req(Size::Bytes(MIB)), req(Size::Rest)])
                .unwrap();
        assert_eq!(p.partitions[0].start, 15, "LBA 7 + 8k, past the first grain");
        assert!(p.partitions.iter().all(|x| is_aligned(x.start * 512, 4096, 3584)));
    }

    #[test]
    fn mbr_logicals_each_aligned_with_their_ebr_before() {
        let reqs: Vec<Request> = (0..6).map(|_| req(Size::Bytes(4 * MIB))).collect();
        let p = plan(&disk(1 << 30, 512), Label::Mbr, Align::Optimal, false, &reqs).unwrap();
        let numbers: Vec<u32> = p.partitions.iter().map(|x| x.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5, 6, 7]);
        let ext = &p.partitions[3];
        assert_eq!(ext.role, Role::Extended);
        for l in &p.partitions[4..] {
            assert_eq!(l.role, Role::Logical);
            assert_eq!(l.start % 2048, 0);
            let ebr = l.ebr.unwrap();
            assert!(ebr < l.start && ebr >= ext.start && l.start + l.size <= ext.start + ext.size);
        }
        assert_eq!(p.partitions[4].ebr, Some(ext.start));
    }

    #[test]
    fn mbr_limits() {
        let big = disk(3 << 40, 512);
        assert!(matches!(
            plan(&big, Label::Mbr, Align::Optimal, false, &[req(Size::Rest)]),
            Err(PlanError::MbrTooLarge(..))
        ));
        let fits =
            plan(&disk(3 << 40, 4096), Label::Mbr, Align::Optimal, false, &[req(Size::Rest)]);
        assert!(fits.is_ok(), "4096-byte sectors address 16 TiB: {fits:?}");
    }

    #[test]
    fn no_room_and_bad_requests() {
        let d = disk(64 * MIB, 512);
        assert!(matches!(
            plan(&d, Label::Gpt, Align::Optimal, false, &[req(Size::Bytes(64 * MIB))]),
            Err(PlanError::NoRoom(1, ..))
        ));
        assert_eq!(plan(&d, Label::Gpt, Align::Optimal, false, &[]), Err(PlanError::Empty));
        assert_eq!(
            plan(&d, Label::Gpt, Align::Optimal, false, &[req(Size::Rest), req(Size::Bytes(1))]),
            Err(PlanError::RestNotLast)
        );
        assert_eq!(
            plan(&d, Label::Gpt, Align::Bytes(1000), false, &[req(Size::Rest)]),
            Err(PlanError::Grain(1000, 512))
        );
    }

    #[test]
    fn min_start_is_a_lower_bound_rounded_to_the_grain() {
        let r = Request { min_start: Some(5000), ..req(Size::Sectors(100)) };
        let p = plan(&disk(1 << 30, 512), Label::Gpt, Align::Optimal, false, &[r]).unwrap();
        assert_eq!((p.partitions[0].start, p.partitions[0].size), (6144, 100));
    }

    #[test]
    fn cylinder_compatible_mbr() {
        let p = plan(
            &disk(1 << 30, 512),
            Label::Mbr,
            Align::Minimal,
            true,
            &[req(Size::Bytes(MIB)), req(Size::Bytes(MIB))],
        )
        .unwrap();
        assert_eq!(p.partitions[0].start, 56);
        assert_eq!(p.partitions[1].start, CYLINDER_SECTORS);
        assert!(p.partitions.iter().all(|x| x.start % 8 == 0));
    }

    #[test]
    fn optimal_io_joins_the_grain() {
        let d = Disk { optimal_io: Some(3 * MIB), ..disk(1 << 30, 512) };
        assert_eq!(grain(&d, Align::Optimal), Ok(3 * MIB));
        let p = plan(&d, Label::Gpt, Align::Optimal, false, &[req(Size::Rest)]).unwrap();
        assert_eq!(p.partitions[0].start, 3 * MIB / 512);
    }

    #[test]
    fn types_resolve_per_label() {
        assert_eq!(resolve_type(Label::Mbr, "linux").unwrap(), "0x83");
        assert_eq!(resolve_type(Label::Mbr, "8E").unwrap(), "0x8e");
        assert_eq!(resolve_type(Label::Mbr, "0x07").unwrap(), "0x07");
        assert_eq!(
            resolve_type(Label::Gpt, "EFI").unwrap(),
            "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
        );
        let guid = "0fc63daf-8483-4772-8e79-3d69d8477de4";
        assert_eq!(resolve_type(Label::Gpt, guid).unwrap(), guid.to_ascii_uppercase());
        for (label, bad) in [
            (Label::Mbr, "bios-boot"),
            (Label::Mbr, "0"),
            (Label::Mbr, "183"),
            (Label::Gpt, "83"),
            (Label::Gpt, "00000000-0000-0000-0000-000000000000"),
        ] {
            assert!(matches!(resolve_type(label, bad), Err(PlanError::Type(..))), "{bad}");
        }
        for container in ["5", "0x0f", "85", "extended", "ee", "0xEE"] {
            let got = resolve_type(Label::Mbr, container);
            assert!(matches!(got, Err(PlanError::Container(..))), "{container}: {got:?}");
        }
    }

    #[test]
    fn names_only_on_gpt_and_short() {
        let named = |n: &str| Request { name: Some(n.into()), ..req(Size::Rest) };
        let d = disk(64 * MIB, 512);
        assert!(matches!(
            plan(&d, Label::Mbr, Align::Optimal, false, &[named("a")]),
            Err(PlanError::Name(..))
        ));
        assert!(matches!(
            plan(&d, Label::Gpt, Align::Optimal, false, &[named(&"x".repeat(37))]),
            Err(PlanError::Name(..))
        ));
        assert!(matches!(
            plan(&d, Label::Gpt, Align::Optimal, false, &[named("root\0disk")]),
            Err(PlanError::Name(..))
        ));
        let p = plan(&d, Label::Gpt, Align::Optimal, false, &[named("root")]).unwrap();
        assert_eq!(p.partitions[0].name.as_deref(), Some("root"));
        assert_eq!(p.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
    }

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

    #[test]
    fn scripts_parse() {
        let script =
            "label: dos\nunit: sectors\n\n/dev/sda1 : start=2048, size=204800, type=83, bootable\n\
            start=206848 size=1GiB type=S\ntype=5\nsize=+, type=8e\n";
        let s = parse_script(script).unwrap();
        assert_eq!(s.label, Some(Label::Mbr));
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
        assert_eq!(s.label, Some(Label::Gpt));
        assert_eq!(s.requests[0].name.as_deref(), Some("EFI system"));
        assert!(parse_script("label: sun\n").unwrap_err().contains("line 1"));
        assert!(parse_script("start=x\n").is_err());
    }

    #[test]
    fn positional_script_lines_are_refused() {
        for script in ["label: dos\n,1M,83\n", "label: gpt\n2048,4096\n", "size=1M, L\n"] {
            let err = parse_script(script).unwrap_err();
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
        assert_eq!(s.label, Some(Label::Mbr));
        let got: Vec<_> = s.requests.iter().map(|r| (r.min_start, r.size)).collect();
        assert_eq!(got, [(Some(63), Size::Sectors(200000)), (Some(204863), Size::Sectors(2000))]);
        assert_eq!(s.numbers, [Some(1), Some(5)], "the extended container is dropped");
        assert_eq!(s.sector_size, Some(512));
        assert_eq!(s.dropped, ["label-id 0x19050014", "bootable"]);

        let s = parse_script(GPT_DUMP).unwrap();
        assert_eq!(
            (s.label, s.first_lba, s.last_lba),
            (Some(Label::Gpt), Some(2048), Some(524254))
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

    /// `sfdisk -d` of an MBR whose primary 3 lies after the extended
    /// partition: sfdisk lists it before the logicals, by number.
    const PRIMARY_AFTER_EXTENDED: &str = "label: dos\nunit: sectors\n\n\
        d1 : start=2048, size=200000, type=83\n\
        d2 : start=204800, size=100000, type=5\n\
        d3 : start=329728, size=50000, type=8e\n\
        d5 : start=206848, size=20000, type=83\n\
        d6 : start=229376, size=30000, type=82\n";

    fn layout(p: &Plan) -> Vec<(u32, u64, u64, Role, Option<usize>)> {
        p.partitions.iter().map(|x| (x.number, x.start, x.size, x.role, x.request)).collect()
    }

    fn plan_mbr(script: &str) -> Result<Plan, PlanError> {
        let s = parse_script(script).unwrap();
        plan_script(&disk(256 * MIB, 512), Label::Mbr, Align::Optimal, false, &s)
    }

    /// Found by a user: the primary after the extended partition was
    /// refused, or everything renumbered and a logical made primary.
    #[test]
    fn numbered_mbr_dumps_keep_every_number_and_role() {
        use Role::{Extended, Logical, Primary};
        let want = [
            (1, 2048, 200000, Primary, Some(0)),
            (2, 204800, 100000, Extended, None),
            (3, 329728, 50000, Primary, Some(1)),
            (5, 206848, 20000, Logical, Some(2)),
            (6, 229376, 30000, Logical, Some(3)),
        ];
        assert_eq!(layout(&plan_mbr(PRIMARY_AFTER_EXTENDED).unwrap()), want);
        // Listed after the logicals, as a user may write it: the same table.
        let (head, tail) = PRIMARY_AFTER_EXTENDED.split_once("d3 :").unwrap();
        let (p3, logicals) = tail.split_once('\n').unwrap();
        let moved = format!("{head}{logicals}d3 :{p3}\n");
        let got = layout(&plan_mbr(&moved).unwrap());
        let requests = [Some(0), None, Some(3), Some(1), Some(2)];
        let want: Vec<_> =
            want.iter().zip(requests).map(|(&(n, s, z, r, _), i)| (n, s, z, r, i)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn numbered_mbr_logicals_count_from_5_in_order_and_get_a_container() {
        use Role::{Extended, Logical, Primary};
        // sfdisk makes 7 the sixth: logical numbers follow the EBR chain.
        let p = plan_mbr("d1 : size=2048\nd2 : size=100, type=5\nd5 : size=2048\nd7 : size=2048\n")
            .unwrap();
        let got: Vec<_> = p.partitions.iter().map(|x| (x.number, x.role, x.request)).collect();
        assert_eq!(
            got,
            [
                (1, Primary, Some(0)),
                (2, Extended, None),
                (5, Logical, Some(1)),
                (6, Logical, Some(2))
            ]
        );
        assert!(p.partitions[1].size >= 3 * 2048, "grown to hold its logicals");
        // No extended line: the planner's, in the first free slot.
        let p = plan_mbr("d2 : size=2048\nd5 : size=2048\nd1 : size=2048\n").unwrap();
        let got: Vec<_> = p.partitions.iter().map(|x| (x.number, x.role)).collect();
        assert_eq!(got, [(1, Primary), (2, Primary), (3, Extended), (5, Logical)]);
        let starts: Vec<_> = p.partitions.iter().map(|x| x.start).collect();
        assert_eq!(starts, [8192, 2048, 4096, 6144], "in the order listed");
        // A sized extended partition bounds a logical's rest.
        let p = plan_mbr("d1 : start=2048, size=10000, type=5\nd5 : start=4096\n").unwrap();
        assert_eq!((p.partitions[1].start, p.partitions[1].size), (4096, 12048 - 4096));
    }

    #[test]
    fn numbered_mbr_refusals() {
        for (script, want) in [
            ("d1 : size=1\nd1 : size=1\n", PlanError::Duplicate(1)),
            ("d1 : size=1\nd1 : size=10, type=5\n", PlanError::Duplicate(1)),
            ("d5 : size=10, type=5\nd6 : size=1\n", PlanError::Slot(5)),
            ("d0 : size=1\n", PlanError::Slot(0)),
            ("d1 : size=9, type=5\nd2 : size=9, type=5\nd5 : size=1\n", PlanError::Extendeds(2)),
            (
                "d1 : size=1\nd2 : size=1\nd3 : size=1\nd4 : size=1\nd5 : size=1\n",
                PlanError::NoSlot,
            ),
        ] {
            assert_eq!(plan_mbr(script), Err(want), "{script}");
        }
        // Without node names (or on GPT) the planner numbers in order.
        let s = parse_script("size=1MiB\nsize=9MiB, type=5\nsize=1MiB\n").unwrap();
        let p = plan_script(&disk(256 * MIB, 512), Label::Mbr, Align::Optimal, false, &s).unwrap();
        assert_eq!(p.partitions.iter().map(|x| x.number).collect::<Vec<_>>(), [1, 2]);
        let s = parse_script("d1 : size=2048\nd5 : size=2048\n").unwrap();
        let p = plan_script(&disk(256 * MIB, 512), Label::Gpt, Align::Optimal, false, &s).unwrap();
        assert_eq!(p.partitions.iter().map(|x| x.number).collect::<Vec<_>>(), [1, 2]);
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
            let err = parse_script(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn scripts_past_the_limit_are_refused() {
        let line = "size=1\n";
        let at_limit = line.repeat(SCRIPT_LIMIT / line.len());
        assert!(parse_script(&at_limit).is_ok());
        let over = format!("{at_limit}{}", "#".repeat(SCRIPT_LIMIT - at_limit.len() + 1));
        assert!(parse_script(&over).unwrap_err().contains("larger than 1024 KiB"));
        assert!(parse_script([b's', 0xff, b'\n']).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn bounds_hold_the_plan_and_become_its_usable_range() {
        let d = disk(64 << 20, 512);
        let mut s =
            parse_script("first-lba: 4096\nlast-lba: 100000\nsize=1MiB\nsize=1MiB\n").unwrap();
        let mut p = plan(&d, Label::Gpt, Align::Optimal, false, &s.requests).unwrap();
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
            let mut p = plan(&d, Label::Gpt, Align::Optimal, false, &s.requests).unwrap();
            let err = s.bound(&mut p).unwrap_err();
            assert!(err.contains(why), "{first:?} {last:?}: {err}");
        }
    }

    #[test]
    fn mbr_codes_parse() {
        assert_eq!(types::parse_mbr_code("83"), Some(0x83));
        assert_eq!(types::parse_mbr_code("0x0c"), Some(0x0c));
        assert_eq!(types::parse_mbr_code("0XEF"), Some(0xef));
        assert_eq!(types::parse_mbr_code("7"), Some(7));
        for bad in ["0", "0x00", "0x", "", "183", "0x183", "+8", "g1", "linux"] {
            assert_eq!(types::parse_mbr_code(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn every_plan_is_aligned_ordered_and_inside(
            sizes in proptest::collection::vec(1u64..64, 1..9),
            logical in prop_oneof![Just(512u64), Just(4096u64)],
            gpt in any::<bool>(),
            offset_sectors in 0u64..8,
        ) {
            let offset = if logical == 512 { offset_sectors * 512 } else { 0 };
            let d = Disk { size_bytes: 2 << 30, logical, physical: 4096, alignment_offset: offset, optimal_io: None };
            let reqs: Vec<Request> = sizes.iter().map(|s| req(Size::Bytes(s * MIB))).collect();
            let label = if gpt { Label::Gpt } else { Label::Mbr };
            let p = plan(&d, label, Align::Optimal, false, &reqs).unwrap();
            let data: Vec<&Planned> = p.partitions.iter().filter(|x| x.role != Role::Extended).collect();
            prop_assert_eq!(data.len(), reqs.len());
            for (x, s) in data.iter().zip(&sizes) {
                prop_assert!(is_aligned(x.start * logical, MIB, offset));
                prop_assert_eq!(x.size * logical, s * MIB);
                prop_assert!(x.start >= p.first_usable_lba && x.start + x.size - 1 <= p.last_usable_lba);
            }
            for w in data.windows(2) {
                prop_assert!(w[0].start + w[0].size <= w[1].ebr.unwrap_or(w[1].start));
            }
        }
    }
}
