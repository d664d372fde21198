//! Planning aligned partition tables: where each partition of a request
//! goes, before anything is written. sfdisk scripts are read in `script`;
//! the topology planned on is found in `target`; a plan's bytes are made
//! by [`crate::table::write`].

mod script;
mod target;

pub use script::{parse_script, BoundError, Container, Reason, Script, ScriptError, SCRIPT_LIMIT};
pub use target::{topology, TargetError};

use crate::align::{align_down, align_up, lcm, Geometry, MIB};
use crate::table::gpt::Guid;
use crate::table::write::{self, Ids, TableBytes, WriteError};
use crate::table::{self, mbr, types, PartKind};
use script::Slots;
use serde::Serialize;

/// Sectors per cylinder in the 224-head, 56-sector geometry: cylinder (and
/// track) boundaries then fall on 4 KiB, pleasing old operating systems and
/// Advanced Format drives alike.
pub const CYLINDER_SECTORS: u64 = 224 * 56;
const TRACK_SECTORS: u64 = 56;

/// MBR fields are 32-bit sector counts.
const MBR_LIMIT: u64 = u32::MAX as u64;

/// GPT entry array: 128 entries of 128 bytes, as every tool writes it.
pub const GPT_ENTRIES_BYTES: u64 = table::gpt::NEW_ARRAY_BYTES;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Gpt,
    Mbr,
}

impl Label {
    /// Its name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Label::Gpt => "gpt",
            Label::Mbr => "mbr",
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
pub struct Request {
    /// The lowest LBA it may start at (an sfdisk script's `start=`); the
    /// start is still rounded up to the grain.
    pub min_start: Option<u64>,
    pub size: Size,
    pub type_id: String,
    pub name: Option<String>,
}

/// The disk a plan is made for: its geometry and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Disk {
    size_bytes: u64,
    logical: u64,
    /// The effective physical sector.
    physical: u64,
    alignment_offset: u64,
    optimal_io: Option<u64>,
}

impl Disk {
    fn of(g: &Geometry, size_bytes: u64) -> Disk {
        Disk {
            size_bytes,
            logical: g.logical,
            physical: g.physical,
            alignment_offset: g.alignment_offset,
            optimal_io: g.optimal_io,
        }
    }
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

impl Role {
    /// Its name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Extended => "extended",
            Role::Logical => "logical",
            Role::Gpt => "gpt",
        }
    }
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
    #[error("partition {0} does not fit: it needs {1} sectors from LBA {2}, and the last usable LBA is {3}{room}", room = room(*.1, *.2, *.3))]
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
    #[error("the script's grain {0} and {1} have no common multiple")]
    NoCommonGrain(u64, u64),
}

/// What would fit of `wanted` sectors from `start` up to `last`: the size
/// to reduce a partition to.
fn room(wanted: u64, start: u64, last: u64) -> String {
    match last.checked_add(1).and_then(|end| end.checked_sub(start)).filter(|&n| n > 0) {
        Some(fits) => format!(
            ": at most {fits} sectors fit there (reduce its size by {})",
            wanted.saturating_sub(fits)
        ),
        None => String::new(),
    }
}

/// The grain in bytes for `align` on a disk of geometry `g`.
pub fn grain(g: &Geometry, align: Align) -> Result<u64, PlanError> {
    grain_on(&Disk::of(g, 0), align)
}

fn grain_on(disk: &Disk, align: Align) -> Result<u64, PlanError> {
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

/// Lay out `requests` on a disk of geometry `g` and `size_bytes`: every
/// start on the grain (counted from the alignment offset), in request
/// order, without gaps beyond alignment.
pub fn plan(
    g: &Geometry,
    size_bytes: u64,
    label: Label,
    align: Align,
    cylinder_compatible: bool,
    requests: &[Request],
) -> Result<Plan, PlanError> {
    plan_with(&Disk::of(g, size_bytes), label, align, cylinder_compatible, requests, None)
}

/// Lay out `script` on `disk` as [`plan`] does, except that an MBR script
/// numbering every partition (an `sfdisk -d` dump) keeps its numbers, as
/// sfdisk does: 1-4 primary, 5 on logical, its extended partition where
/// the script puts it, and the partitions in the order of their starts.
pub fn plan_script(
    g: &Geometry,
    size_bytes: u64,
    label: Label,
    align: Align,
    cylinder_compatible: bool,
    script: &Script,
) -> Result<Plan, PlanError> {
    let slots = match label {
        Label::Mbr => script.slots()?,
        Label::Gpt => None,
    };
    let disk = Disk::of(g, size_bytes);
    plan_with(&disk, label, align, cylinder_compatible, &script.requests, slots.as_ref())
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
    let mut grain_bytes = grain_on(disk, align)?;
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
    /// logicals need more, or it no longer fits from the aligned start
    /// (then it holds just its logicals), and bounds a logical's `rest`.
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
            size => match self.size_at(number, size, ext_start) {
                Ok(sectors) => Some(ext_start + sectors),
                // An old dump's container, to the disk's end from LBA 63,
                // overruns it from an aligned start; only its logicals count.
                Err(PlanError::NoRoom(..)) if !logicals.is_empty() => None,
                Err(e) => return Err(e),
            },
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
pub fn parse_part(text: &str) -> Result<Request, SizeError> {
    let mut fields = text.splitn(3, ':');
    let size = parse_size(fields.next().unwrap_or_default())?;
    let type_id = fields.next().filter(|t| !t.is_empty()).unwrap_or("linux").to_string();
    let name = fields.next().map(str::to_string);
    Ok(Request { min_start: None, size, type_id, name })
}

impl Plan {
    /// The bytes of this plan's table, with `ids` for its GUIDs and MBR
    /// signature.
    pub fn table(&self, ids: &Ids) -> Result<TableBytes, WriteError> {
        let parts: Vec<table::Partition> = self.partitions.iter().map(Planned::partition).collect();
        let (ss, total) = (self.sector_size, self.total_sectors);
        match self.label {
            Label::Gpt => {
                let usable = (self.first_usable_lba, self.last_usable_lba);
                write::new_gpt(ss, total, usable, &parts, ids).map(TableBytes::Gpt)
            }
            Label::Mbr => write::new_mbr(ss, total, &parts, ids).map(TableBytes::Mbr),
        }
    }
}

impl Planned {
    /// As the table writer takes it.
    fn partition(&self) -> table::Partition {
        let kind = match self.role {
            Role::Primary => PartKind::Primary,
            Role::Extended => PartKind::Extended,
            Role::Logical => PartKind::Logical,
            Role::Gpt => PartKind::Gpt,
        };
        table::Partition {
            number: self.number,
            start: self.start,
            size: self.size,
            kind,
            type_id: self.type_id.clone(),
            name: self.name.clone(),
            ebr: self.ebr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::is_aligned;
    use crate::table::write::encode;
    use crate::units::SIZE_SYNTAX;
    use proptest::prelude::*;

    fn plan_on(
        disk: &Disk,
        label: Label,
        align: Align,
        cylinders: bool,
        requests: &[Request],
    ) -> Result<Plan, PlanError> {
        plan_with(disk, label, align, cylinders, requests, None)
    }

    fn script_on(
        disk: &Disk,
        label: Label,
        align: Align,
        cylinders: bool,
        script: &Script,
    ) -> Result<Plan, PlanError> {
        let slots = if label == Label::Mbr { script.slots()? } else { None };
        plan_with(disk, label, align, cylinders, &script.requests, slots.as_ref())
    }

    fn disk(size: u64, logical: u64) -> Disk {
        Disk { size_bytes: size, logical, physical: 4096, alignment_offset: 0, optimal_io: None }
    }

    fn req(size: Size) -> Request {
        Request { min_start: None, size, type_id: "linux".into(), name: None }
    }

    #[test]
    fn names_are_the_json_ones() {
        for label in [Label::Gpt, Label::Mbr] {
            assert_eq!(serde_json::to_value(label).unwrap(), label.name());
        }
        for role in [Role::Primary, Role::Extended, Role::Logical, Role::Gpt] {
            assert_eq!(serde_json::to_value(role).unwrap(), role.name());
        }
    }

    #[test]
    fn gpt_first_partition_at_1mib() {
        let p = plan_on(
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
        let p = plan_on(
            &disk(1 << 30, 4096),
            Label::Gpt,
            Align::Minimal,
            false,
            &[req(Size::Bytes(MIB))],
        )
        .unwrap();
        assert_eq!((p.first_usable_lba, p.partitions[0].start), (6, 6));
        let p = plan_on(
            &disk(1 << 30, 512),
            Label::Gpt,
            Align::Minimal,
            false,
            &[req(Size::Bytes(MIB))],
        )
        .unwrap();
        assert_eq!(p.partitions[0].start, 40);
    }

    #[test]
    fn alignment_offset_is_honoured() {
        let d = Disk { alignment_offset: 3584, ..disk(1 << 30, 512) };
        let p = plan_on(
            &d,
            Label::Mbr,
            Align::Minimal,
            false,
            &[req(Size::Bytes(MIB)), req(Size::Rest)],
        )
        .unwrap();
        assert_eq!(p.partitions[0].start, 15, "LBA 7 + 8k, past the first grain");
        assert!(p.partitions.iter().all(|x| is_aligned(x.start * 512, 4096, 3584)));
    }

    #[test]
    fn mbr_logicals_each_aligned_with_their_ebr_before() {
        let reqs: Vec<Request> = (0..6).map(|_| req(Size::Bytes(4 * MIB))).collect();
        let p = plan_on(&disk(1 << 30, 512), Label::Mbr, Align::Optimal, false, &reqs).unwrap();
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
            plan_on(&big, Label::Mbr, Align::Optimal, false, &[req(Size::Rest)]),
            Err(PlanError::MbrTooLarge(..))
        ));
        let fits =
            plan_on(&disk(3 << 40, 4096), Label::Mbr, Align::Optimal, false, &[req(Size::Rest)]);
        assert!(fits.is_ok(), "4096-byte sectors address 16 TiB: {fits:?}");
    }

    #[test]
    fn no_room_and_bad_requests() {
        let d = disk(64 * MIB, 512);
        assert!(matches!(
            plan_on(&d, Label::Gpt, Align::Optimal, false, &[req(Size::Bytes(64 * MIB))]),
            Err(PlanError::NoRoom(1, ..))
        ));
        assert_eq!(plan_on(&d, Label::Gpt, Align::Optimal, false, &[]), Err(PlanError::Empty));
        assert_eq!(
            plan_on(&d, Label::Gpt, Align::Optimal, false, &[req(Size::Rest), req(Size::Bytes(1))]),
            Err(PlanError::RestNotLast)
        );
        assert_eq!(
            plan_on(&d, Label::Gpt, Align::Bytes(1000), false, &[req(Size::Rest)]),
            Err(PlanError::Grain(1000, 512))
        );
    }

    #[test]
    fn min_start_is_a_lower_bound_rounded_to_the_grain() {
        let r = Request { min_start: Some(5000), ..req(Size::Sectors(100)) };
        let p = plan_on(&disk(1 << 30, 512), Label::Gpt, Align::Optimal, false, &[r]).unwrap();
        assert_eq!((p.partitions[0].start, p.partitions[0].size), (6144, 100));
    }

    #[test]
    fn cylinder_compatible_mbr() {
        let p = plan_on(
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
        assert_eq!(grain_on(&d, Align::Optimal), Ok(3 * MIB));
        let p = plan_on(&d, Label::Gpt, Align::Optimal, false, &[req(Size::Rest)]).unwrap();
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
            plan_on(&d, Label::Mbr, Align::Optimal, false, &[named("a")]),
            Err(PlanError::Name(..))
        ));
        assert!(matches!(
            plan_on(&d, Label::Gpt, Align::Optimal, false, &[named(&"x".repeat(37))]),
            Err(PlanError::Name(..))
        ));
        assert!(matches!(
            plan_on(&d, Label::Gpt, Align::Optimal, false, &[named("root\0disk")]),
            Err(PlanError::Name(..))
        ));
        let p = plan_on(&d, Label::Gpt, Align::Optimal, false, &[named("root")]).unwrap();
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
        script_on(&disk(256 * MIB, 512), Label::Mbr, Align::Optimal, false, &s)
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
        let p = script_on(&disk(256 * MIB, 512), Label::Mbr, Align::Optimal, false, &s).unwrap();
        assert_eq!(p.partitions.iter().map(|x| x.number).collect::<Vec<_>>(), [1, 2]);
        let s = parse_script("d1 : size=2048\nd5 : size=2048\n").unwrap();
        let p = script_on(&disk(256 * MIB, 512), Label::Gpt, Align::Optimal, false, &s).unwrap();
        assert_eq!(p.partitions.iter().map(|x| x.number).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn bounds_hold_the_plan_and_become_its_usable_range() {
        let d = disk(64 << 20, 512);
        let mut s =
            parse_script("first-lba: 4096\nlast-lba: 100000\nsize=1MiB\nsize=1MiB\n").unwrap();
        let mut p = plan_on(&d, Label::Gpt, Align::Optimal, false, &s.requests).unwrap();
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
            let mut p = plan_on(&d, Label::Gpt, Align::Optimal, false, &s.requests).unwrap();
            let err = s.bound(&mut p).unwrap_err().to_string();
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
            let p = plan_on(&d, label, Align::Optimal, false, &reqs).unwrap();
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

    fn ids(n: usize) -> Ids {
        Ids {
            disk_guid: [7; 16],
            partition_guids: (1..=n as u8).map(|i| [i; 16]).collect(),
            mbr_signature: 0xCAFE,
        }
    }

    fn make(label: Label, logical: u64, sizes: &[Size]) -> (Plan, Vec<u8>) {
        let disk = Disk {
            size_bytes: 64 * MIB,
            logical,
            physical: 4096,
            alignment_offset: 0,
            optimal_io: None,
        };
        let reqs: Vec<Request> = sizes
            .iter()
            .map(|&size| Request {
                min_start: None,
                size,
                type_id: "linux".into(),
                name: Some("p".into()),
            })
            .collect();
        let reqs: Vec<Request> = if label == Label::Mbr {
            reqs.into_iter().map(|r| Request { name: None, ..r }).collect()
        } else {
            reqs
        };
        let p = plan_on(&disk, label, Align::Optimal, false, &reqs).unwrap();
        let mut img = vec![0xA5u8; (64 * MIB) as usize];
        for c in encode(&p.table(&ids(p.partitions.len())).unwrap()) {
            img[c.offset as usize..c.offset as usize + c.bytes.len()].copy_from_slice(&c.bytes);
        }
        (p, img)
    }

    // `&Vec`: ReadAt is implemented for Vec, not for the unsized slice.
    #[allow(clippy::ptr_arg)]
    fn read_back(p: &Plan, img: &Vec<u8>) -> table::Layout {
        let layout = table::read(img, p.sector_size, img.len() as u64).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<(u32, u64, u64)> =
            layout.partitions.iter().map(|x| (x.number, x.start, x.size)).collect();
        let want: Vec<(u32, u64, u64)> =
            p.partitions.iter().map(|x| (x.number, x.start, x.size)).collect();
        assert_eq!(got, want);
        layout
    }

    #[test]
    fn gpt_reads_back_at_512_and_4096() {
        for ss in [512, 4096] {
            let (p, img) = make(Label::Gpt, ss, &[Size::Bytes(MIB), Size::Rest]);
            let layout = read_back(&p, &img);
            assert_eq!(layout.label, table::Label::Gpt);
            assert_eq!(layout.partitions[0].name.as_deref(), Some("p"));
            assert_eq!(layout.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
            assert!(layout.mbr.unwrap().protective);
        }
    }

    #[test]
    fn gpt_order_is_backup_then_primary_then_mbr() {
        let (p, _) = make(Label::Gpt, 512, &[Size::Rest]);
        let order: Vec<&str> = encode(&p.table(&ids(1)).unwrap()).iter().map(|c| c.what).collect();
        assert_eq!(
            order,
            [
                "gpt backup entries",
                "gpt backup header",
                "gpt primary entries",
                "gpt primary header",
                "protective mbr"
            ]
        );
    }

    #[test]
    fn mbr_with_logicals_reads_back() {
        let sizes = [Size::Bytes(4 * MIB); 6];
        let (p, img) = make(Label::Mbr, 512, &sizes);
        let layout = read_back(&p, &img);
        assert_eq!(layout.label, table::Label::Mbr);
        assert_eq!(layout.partitions.iter().filter(|x| x.kind == PartKind::Logical).count(), 3);
        let ebrs: Vec<u64> = p.partitions.iter().filter_map(|x| x.ebr).collect();
        assert_eq!(layout.mbr.unwrap().ebrs, ebrs);
        assert_eq!(table::mbr::Mbr::parse(&img).unwrap().disk_signature, 0xCAFE);
    }

    #[test]
    fn mbr_wipes_stale_gpt_headers() {
        let (p, img) = make(Label::Mbr, 512, &[Size::Bytes(MIB)]);
        assert!(img[512..4096 + 512].iter().all(|&b| b == 0));
        assert!(img[img.len() - 4096..].iter().all(|&b| b == 0));
        read_back(&p, &img);
    }
}
