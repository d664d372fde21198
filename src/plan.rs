//! Planning aligned partition tables: where each partition of a request
//! goes, before anything is written.

use crate::align::{align_down, align_up, lcm, MIB};
use crate::table::gpt::{Guid, ENTRY_SIZE};
use crate::table::write::{self, GptBytes, Ids, MbrBytes, TableBytes, WriteError};
use crate::table::{self, types};
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
    #[error("partition name {0:?}: {1}")]
    Name(String, &'static str),
    #[error("a GPT holds at most 128 partitions, not {0}")]
    TooMany(usize),
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
    let partitions = match label {
        Label::Gpt => layout.gpt(requests)?,
        Label::Mbr => layout.mbr(requests)?,
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
            let size = self.size_at(i, r.size, start)?;
            self.cursor = start + size;
            out.push(planned(i as u32 + 1, start, size, Role::Gpt, r, None));
        }
        Ok(out)
    }

    fn mbr(&mut self, requests: &[Request]) -> Result<Vec<Planned>, PlanError> {
        // Leave the first grain for the MBR and a boot loader.
        self.cursor = self.cursor.max(self.grain / self.disk.logical);
        let primaries = if requests.len() > 4 { 3 } else { requests.len() };
        let mut out = Vec::new();
        for (i, r) in requests.iter().take(primaries).enumerate() {
            let start = match self.first.take() {
                Some(fixed) if i == 0 => fixed,
                _ => self.next_start(self.cursor.max(r.min_start.unwrap_or(0))),
            };
            let size = self.size_at(i, r.size, start)?;
            self.cursor = start + size;
            out.push(planned(i as u32 + 1, start, size, Role::Primary, r, None));
        }
        if requests.len() > 4 {
            self.logicals(&requests[3..], &mut out)?;
        }
        Ok(out)
    }

    /// An extended partition holding one EBR and one logical per request,
    /// each logical on the grain, its EBR in the sector run before it.
    fn logicals(&mut self, requests: &[Request], out: &mut Vec<Planned>) -> Result<(), PlanError> {
        let ext_start = self.next_start(self.cursor);
        let ext_index = out.len();
        let mut ebr = ext_start;
        for (i, r) in requests.iter().enumerate() {
            let start = self.next_start((ebr + 1).max(r.min_start.unwrap_or(0)));
            let size = self.size_at(ext_index + 1 + i, r.size, start)?;
            out.push(planned(5 + i as u32, start, size, Role::Logical, r, Some(ebr)));
            self.cursor = start + size;
            ebr = self.cursor;
        }
        let ext = Request { min_start: None, size: Size::Rest, type_id: "0x05".into(), name: None };
        out.insert(
            ext_index,
            planned(4, ext_start, self.cursor - ext_start, Role::Extended, &ext, None),
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

    /// Sectors for request `index` starting at `start`: fixed sizes exact,
    /// `rest` to the last usable LBA, ends kept before the last usable.
    fn size_at(&self, index: usize, size: Size, start: u64) -> Result<u64, PlanError> {
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
        end.map(|_| wanted).ok_or(PlanError::NoRoom(index + 1, wanted, start, self.last))
    }
}

/// `r` with its type as the table stores it and its name checked.
fn resolve(label: Label, r: &Request) -> Result<Request, PlanError> {
    if let Some(name) = &r.name {
        if label == Label::Mbr {
            return Err(PlanError::Name(name.clone(), "only GPT partitions have names"));
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

/// A TYPE as typed, as its table stores it: "0x83" on MBR, an upper-case
/// GUID on GPT. Names, MBR hex codes ("83", "0x83") and GUIDs are accepted.
pub fn resolve_type(label: Label, text: &str) -> Result<String, PlanError> {
    let bad = || PlanError::Type(text.to_string(), label);
    let t = text.trim().to_ascii_lowercase();
    match (label, types::by_name(&t)) {
        (Label::Mbr, Some((code, _))) => code.map(|c| format!("0x{c:02x}")).ok_or_else(bad),
        (Label::Gpt, Some((_, guid))) => guid.map(str::to_string).ok_or_else(bad),
        (Label::Mbr, None) => {
            types::parse_mbr_code(&t).map(|c| format!("0x{c:02x}")).ok_or_else(bad)
        }
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
    Planned { number, start, size, role, type_id: r.type_id.clone(), name: r.name.clone(), ebr }
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
        format!("bad size {text:?} (use bytes, KiB, MiB, GiB, TiB, sectors as 2048s, N%, or rest)")
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

/// Parse an sfdisk-style script: `label: gpt|dos` and one partition per
/// line as `start=, size=, type=, name=` (other named fields, `bootable`
/// and headers are ignored; positional fields are refused). Extended
/// partitions are dropped: the planner makes its own.
pub fn parse_script(text: &str) -> Result<(Option<Label>, Vec<Request>), String> {
    let mut label = None;
    let mut requests = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |e: String| format!("script line {n}: {e}");
        if let Some((key, value)) = header(line) {
            if key == "label" {
                label = Some(script_label(value).map_err(at)?);
            }
            continue;
        }
        if let Some(r) = script_part(line).map_err(at)? {
            requests.push(r);
        }
    }
    Ok((label, requests))
}

/// `key: value` header lines; partition lines have `=` before any colon.
fn header(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let key = key.trim();
    (!key.contains('=') && !key.starts_with('/')).then_some((key, value.trim()))
}

fn script_label(value: &str) -> Result<Label, String> {
    match value {
        "gpt" => Ok(Label::Gpt),
        "dos" | "mbr" => Ok(Label::Mbr),
        other => Err(format!("unsupported label {other:?} (use gpt or dos)")),
    }
}

/// One partition line, None for an extended container.
fn script_part(line: &str) -> Result<Option<Request>, String> {
    // "/dev/sda1 : start=..." names the node first; the fields follow.
    let fields = line.split_once(" : ").map_or(line, |(_, f)| f);
    let mut r = Request { min_start: None, size: Size::Rest, type_id: "linux".into(), name: None };
    for field in split_fields(fields) {
        let Some((key, value)) = field.split_once('=') else {
            // The one bare word sfdisk dumps; anything else is positional
            // (`,1M,83`), and skipping it would change what is planned.
            if field == "bootable" {
                continue;
            }
            return Err(format!(
                "{line:?}: positional sfdisk fields are not supported; \
                 use start=, size=, type="
            ));
        };
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "start" => {
                r.min_start = Some(value.parse().map_err(|_| format!("bad start {value:?}"))?)
            }
            "size" => r.size = script_size(value)?,
            "type" | "Id" => r.type_id = script_type(value).to_string(),
            "name" => r.name = Some(value.to_string()),
            _ => {}
        }
    }
    let extended =
        ["5", "05", "f", "0f", "85", "extended"].contains(&r.type_id.to_ascii_lowercase().as_str());
    Ok((!extended).then_some(r))
}

/// Fields split on commas and blanks, except inside double quotes.
fn split_fields(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' | ' ' | '\t' if !quoted => out.push(String::new()),
            _ => {}
        }
        if let Some(last) = out.last_mut().filter(|_| quoted || !matches!(c, ',' | ' ' | '\t')) {
            last.push(c);
        }
    }
    out.retain(|f| !f.is_empty());
    out
}

/// sfdisk sizes: a bare number counts sectors, `+` means the rest.
fn script_size(value: &str) -> Result<Size, String> {
    let v = value.trim_start_matches('+');
    if v.is_empty() {
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
        let (label, reqs) = parse_script(script).unwrap();
        assert_eq!(label, Some(Label::Mbr));
        let got: Vec<_> = reqs.iter().map(|r| (r.min_start, r.size, r.type_id.as_str())).collect();
        assert_eq!(
            got,
            [
                (Some(2048), Size::Sectors(204800), "83"),
                (Some(206848), Size::Bytes(1 << 30), "swap"),
                (None, Size::Rest, "8e"),
            ]
        );
        let (label, reqs) =
            parse_script("label: gpt\nsize=1MiB, type=U, name=\"EFI system\"\n").unwrap();
        assert_eq!(label, Some(Label::Gpt));
        assert_eq!(reqs[0].name.as_deref(), Some("EFI system"));
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
        let (_, reqs) = parse_script("start=2048, size=100, type=83, bootable\n").unwrap();
        assert_eq!(reqs.len(), 1, "bootable is a flag, not a positional field");
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
