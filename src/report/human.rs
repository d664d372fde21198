//! The human report: a heading per disk, a row per partition in the style
//! of fdisk and lsblk, and a summary line.

use super::table::{self, fill, Column, ColumnKind, Style, Units};
use super::{partition_name, PARTITION_NAME_ABOUT};
use crate::align::Class;
use crate::audit::{DiskAudit, LayerAudit, OriginAudit, PartitionAudit};
use crate::device::drive::{Answer, Drive};
use crate::device::{Source, Sourced, Topology};
use crate::table::{types, PartKind, Severity};
use crate::units::human_size;
use std::fmt::Write;

/// A line of the partition table: a partition, or a layer inside one.
pub enum Row<'a> {
    Partition(&'a DiskAudit, &'a PartitionAudit),
    Layer(&'a LayerAudit),
}

/// The columns `audit` can print (`-o`), the default ones first.
pub fn columns<'a>() -> Vec<Column<Row<'a>>> {
    use ColumnKind::{Free, Number, Text, Verdict};
    let column = Column::<Row<'a>>::new;
    vec![
        column("NAME", PARTITION_NAME_ABOUT, Text, |r, _| {
            part(r, |d, p| partition_name(d.name.as_deref(), &d.path, p.partition.number))
        }),
        column("NR", "partition number", Number, |r, _| {
            part(r, |_, p| p.partition.number.to_string())
        })
        .on_request(),
        column("START", "first sector (with --bytes: byte offset)", Number, |r, u| {
            part(r, |_, p| match u {
                Units::Human => p.partition.start.to_string(),
                Units::Bytes => p.verdict.start_bytes.to_string(),
            })
        }),
        column("END", "last sector (with --bytes: offset of the last byte)", Number, |r, u| {
            part(r, |d, p| {
                let last = match u {
                    Units::Human => p.partition.start.checked_add(p.partition.size),
                    Units::Bytes => p.verdict.start_bytes.checked_add(bytes(d, p)),
                };
                last.and_then(|e| e.checked_sub(1)).map_or("-".into(), |e| e.to_string())
            })
        })
        .on_request(),
        column("SECTORS", "size in logical sectors", Number, |r, _| {
            part(r, |_, p| p.partition.size.to_string())
        })
        .on_request(),
        column("SIZE", "size (with --bytes: in bytes)", Number, |r, u| {
            part(r, |d, p| u.size(bytes(d, p)))
        }),
        column("TYPE", "partition type, by name where it has one", Text, |r, _| {
            part(r, |_, p| type_name(p))
        }),
        column("PARTTYPE", "partition type code (MBR) or GUID (GPT)", Text, |r, _| {
            part(r, |_, p| p.partition.type_id.clone())
        })
        .on_request(),
        column("PARTLABEL", "partition name (GPT)", Text, |r, _| {
            part(r, |_, p| p.partition.name.clone().unwrap_or_default())
        })
        .on_request(),
        column(
            "FSTYPE",
            "what it holds (libblkid's TYPE); layers inside get lines of their own",
            Text,
            |r, _| match r {
                Row::Partition(_, p) => p.layers.first().map_or("", |l| l.layer.name).to_string(),
                Row::Layer(l) => layer_name(l),
            },
        ),
        column("MOUNTPOINTS", "where it is mounted, [SWAP] for swap (as lsblk)", Text, |r, _| {
            part(r, |_, p| p.mountpoints.join(","))
        })
        .on_request(),
        column(
            "VERDICT",
            "aligned, compensated, suboptimal or misaligned",
            Verdict,
            |r, _| match r {
                Row::Partition(_, p) if !p.holds_data() => "-".to_string(),
                Row::Partition(_, p) => p.verdict.verdict.as_str().to_string(),
                Row::Layer(l) => l.verdict.verdict.as_str().to_string(),
            },
        ),
        column(
            "MISALIGN",
            "bytes past the last physical sector boundary (0 when aligned)",
            Number,
            |r, _| match r {
                Row::Partition(_, p) => p.verdict.misalignment_bytes.to_string(),
                Row::Layer(l) => l.verdict.misalignment_bytes.to_string(),
            },
        )
        .on_request(),
        column("DETAIL", "what the verdict costs, and the nearest aligned starts", Free, |r, _| {
            match r {
                Row::Partition(_, p) => detail(p),
                Row::Layer(l) => layer_detail(l, "the disk"),
            }
        }),
    ]
}

/// A partition row's cell; empty on a layer's row.
fn part(row: &Row, cell: impl Fn(&DiskAudit, &PartitionAudit) -> String) -> String {
    match row {
        Row::Partition(d, p) => cell(d, p),
        Row::Layer(_) => String::new(),
    }
}

fn bytes(d: &DiskAudit, p: &PartitionAudit) -> u64 {
    let sector = d.topology.as_ref().map_or(512, |t| t.logical_sector_size.value);
    p.partition.size.saturating_mul(sector)
}

/// Render every audit with `columns`, laid out as `style` says: raw output
/// is the partition table alone, one for all disks.
pub fn render<'a>(audits: &'a [DiskAudit], columns: &[&Column<Row<'a>>], style: &Style) -> String {
    if style.raw {
        let rows: Vec<Row> = audits.iter().flat_map(|a| rows(a, columns)).collect();
        return table::render(columns, &rows, style, 0, selected);
    }
    let mut out = String::new();
    for (i, audit) in audits.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        disk(&mut out, audit, columns, style);
    }
    out
}

fn selected(row: &Row) -> bool {
    matches!(row, Row::Partition(_, p) if p.selected)
}

/// The rows of a disk: its partitions, each followed by the layers inside
/// when FSTYPE is shown and they are worth lines of their own.
fn rows<'a>(a: &'a DiskAudit, columns: &[&Column<Row<'a>>]) -> Vec<Row<'a>> {
    let layered = columns.iter().any(|c| c.name == "FSTYPE");
    let mut rows = Vec::new();
    for p in &a.partitions {
        rows.push(Row::Partition(a, p));
        // A compensated start is explained by the layers that make up for it.
        let compensated = p.verdict.verdict == Class::Compensated;
        if layered && (compensated || shows_layers(&p.layers)) {
            rows.extend(p.layers.iter().map(Row::Layer));
        }
    }
    rows
}

fn disk<'a>(out: &mut String, a: &'a DiskAudit, columns: &[&Column<Row<'a>>], style: &Style) {
    let say = |out: &mut String, first: &str, text: &str| {
        out.push_str(&fill(first, 4, text, style.width));
    };
    say(out, "", &heading(a));
    if let Some(t) = &a.topology {
        say(out, "  ", &geometry_line(a, t));
        for line in t.drive.iter().flat_map(drive_lines) {
            say(out, "  ", &line);
        }
        for note in &t.notes {
            say(out, "  note: ", note);
        }
    }
    if let Some(err) = &a.error {
        say(out, "  error: ", err);
    }
    if let Some(c) = &a.contents {
        let label = c.label.as_deref().map(|l| format!(" labelled {l:?}")).unwrap_or_default();
        say(out, "  holds: ", &format!("{}{label} from byte 0, with no partition table", c.name));
    }
    for o in &a.stack {
        say(out, "  stack: ", &origin_line(o));
    }
    // A stacked device's layers count from its own byte 0.
    let whole = if a.stack.is_empty() { "the disk" } else { "the device" };
    if shows_layers(&a.layers) {
        for l in &a.layers {
            let text = format!(
                "{}  {}  {}",
                layer_name(l),
                l.verdict.verdict.as_str(),
                layer_detail(l, whole)
            );
            say(out, "  ", &text);
        }
    }
    for p in &a.problems {
        let word = match p.severity {
            Severity::Error => "  problem: ",
            Severity::Warning => "  warning: ",
            Severity::Info => "  info: ",
        };
        say(out, word, &p.message);
    }
    if !a.partitions.is_empty() {
        out.push_str(&table::render(columns, &rows(a, columns), style, 2, selected));
    }
    let held = a.data_partitions().flat_map(|p| p.holders.iter().map(move |o| (Some(p), o)));
    for (p, o) in a.holders.iter().map(|o| (None, o)).chain(held) {
        let what = p.map_or(String::new(), |p| format!("partition {}: ", p.partition.number));
        say(out, "  held: ", &format!("{what}{}", origin_line(o)));
    }
    for s in a.structures.iter().filter(|s| !s.aligned_physical && s.what == "ebr") {
        let text = format!(
            "EBR at LBA {} is not on a physical boundary (harmless: it is read once)",
            s.lba
        );
        say(out, "  info: ", &text);
    }
    say(out, "  summary: ", &summary(a));
    if let Some(hint) = hint(a) {
        say(out, "  hint: ", &hint);
    }
}

/// Where a stacked device's way down puts its bytes on a disk.
fn origin_line(o: &OriginAudit) -> String {
    let via = o.origin.via.join(" → ");
    let (disk, from) = (&o.origin.disk, o.origin.device_offset_bytes);
    let what = if from == 0 { format!("{via}: byte 0") } else { format!("{via}: byte {from}") };
    match (o.origin.disk_offset_bytes, o.misalignment_bytes) {
        (Some(at), Some(0)) => format!("{what} at byte {at} of {disk}, aligned"),
        (Some(at), Some(off)) => format!(
            "{what} at byte {at} of {disk}, misaligned: {off} bytes past a {}-byte physical \
             boundary",
            o.physical_sector_size
        ),
        _ => format!("{what}: where it lies on {disk} is not known (the mapping is unreadable)"),
    }
}

/// What to run next: realign for a misaligned partition, else advise.
fn hint(a: &DiskAudit) -> Option<String> {
    if a.error.is_some() {
        return None;
    }
    let path = a.path.display();
    if let Some(m) = &a.unfinished_move {
        let finish = format!("blkalign realign {} {} --yes", a.path.display(), m.partition);
        return Some(format!(
            "`{finish}` finishes the move; `{finish} --undo` puts the partition back as it was"
        ));
    }
    if a.problems.iter().any(|p| p.code == "realign_at_boot") {
        return Some("`blkalign realign --at-boot` says where the move at boot stands".into());
    }
    let data = || a.data_partitions();
    let misaligned = data().any(|p| p.verdict.verdict == Class::Misaligned);
    // realign moves a VM image's partitions through QEMU; advise wants raw.
    let vm_image = a.image_format.filter(|_| !misaligned && data().next().is_some());
    if let Some(format) = vm_image {
        let raw = crate::advise::shell_word(&a.path.with_extension("raw"));
        let image = crate::advise::shell_word(&a.path);
        // qemu-img's name for VHD.
        let format = if format == "vhd" { "vpc" } else { format };
        return Some(format!(
            "`blkalign advise` reads raw images only: `qemu-img convert -f {format} -O raw \
             {image} {raw}`, then `blkalign advise {raw}`"
        ));
    }
    let resized = a.problems.iter().any(|p| p.code == "table_sector_size");
    if let Some(fix) = table_fix(a).filter(|_| misaligned || resized) {
        return Some(fix);
    }
    if misaligned {
        Some(format!(
            "`blkalign realign {path}` shows how to move the misaligned partitions to aligned \
             starts, keeping their data (add --yes to move)"
        ))
    } else if data().next().is_some() {
        Some(format!(
            "`blkalign advise {path}` prints the mkfs/LVM/LUKS/ZFS options that keep each \
             partition's contents aligned"
        ))
    } else {
        None
    }
}

/// realign moves nothing on a table with problems: what mends the table
/// comes first. The audit's own findings are not the table's.
fn table_fix(a: &DiskAudit) -> Option<String> {
    const AUDIT_OWN: [&str; 3] = ["kernel_differs", "realign_unfinished", "selected_not_in_table"];
    let table: Vec<&str> =
        a.problems.iter().map(|p| p.code).filter(|c| !AUDIT_OWN.contains(c)).collect();
    if table.is_empty() || a.problems.iter().any(|p| p.code == "realign_unfinished") {
        return None;
    }
    let path = crate::advise::shell_word(&a.path);
    let gpt_copy = |c: &&str| c.starts_with("gpt_") && *c != "gpt_entry_inverted";
    let logical = a.geometry.as_ref().map_or(512, |g| g.logical);
    let fix = if table.contains(&"table_sector_size") {
        let other = if logical == 512 { 4096 } else { 512 };
        format!("`blkalign rescale {path} --from {other}` rewrites it for this device's sectors")
    } else if table.iter().all(gpt_copy) {
        format!("`sgdisk -e {path}` rewrites both GPT copies from the valid one")
    } else {
        format!(
            "`sfdisk -d {path} > table.txt` dumps it; correct the entries named above and write \
             it back (`sfdisk {path} < table.txt`)"
        )
    };
    Some(format!(
        "`blkalign realign` moves nothing on a table with problems ({}): mend the table first \
         ({fix}), then audit again",
        table.join(", ")
    ))
}

fn heading(a: &DiskAudit) -> String {
    let mut parts = vec![a.path.display().to_string()];
    if let (Some(domain), Some(disk)) = (&a.domain, &a.domain_disk) {
        parts.push(format!("(guest {domain}, {disk})"));
    }
    if let Some(t) = &a.topology {
        if let Some(model) = &t.model {
            parts.push(model.clone());
        }
        parts.push(human_size(t.size_bytes));
    }
    match a.scheme {
        Some(scheme) => parts.push(format!("table: {} ({scheme})", a.table.as_str())),
        None => parts.push(format!("table: {}", a.table.as_str())),
    }
    parts.join("  ")
}

fn geometry_line(a: &DiskAudit, t: &Topology) -> String {
    let physical = match &a.geometry {
        Some(g) if g.physical_assumed && t.physical_sector_size.source == Source::Assumed => {
            format!("physical {} (assumed)", g.physical)
        }
        Some(g) if g.physical_assumed => format!(
            "physical {} (assumed; {} says {})",
            g.physical,
            t.physical_sector_size.source.as_str(),
            t.physical_sector_size.value
        ),
        _ => format!("physical {}", sourced(&t.physical_sector_size)),
    };
    let optimal = t.optimal_io_size.map_or("-".to_string(), |o| sourced(&o));
    format!(
        "logical {}  {physical}  alignment offset {}  optimal I/O {optimal}",
        sourced(&t.logical_sector_size),
        sourced(&t.alignment_offset)
    )
}

/// What the drive said, when it said anything: its sizes with the command
/// each came in, who it is, and an NVMe namespace's other formats.
fn drive_lines(d: &Drive) -> Vec<String> {
    if d.protocol.is_none() {
        return Vec::new();
    }
    let answer =
        |name: &str, a: &Option<Answer>| a.map(|a| format!("{name} {} ({})", a.value, a.via));
    let mut parts: Vec<String> = [
        answer("logical", &d.logical_sector_size),
        answer("physical", &d.physical_sector_size),
        answer("alignment offset", &d.alignment_offset),
        answer("optimal I/O", &d.optimal_io_size),
    ]
    .into_iter()
    .flatten()
    .collect();
    let who: Vec<&str> =
        [&d.vendor, &d.model, &d.firmware].into_iter().flatten().map(String::as_str).collect();
    if !who.is_empty() {
        parts.push(who.join(" "));
    }
    match d.rpm {
        Some(0) => parts.push("solid state".into()),
        Some(rpm) => parts.push(format!("{rpm} rpm")),
        None => {}
    }
    if let Some(b) = &d.usb_bridge {
        let name: Vec<&str> =
            [&b.manufacturer, &b.product].into_iter().flatten().map(String::as_str).collect();
        parts.push(format!("behind USB bridge {} {}", b.id, name.join(" ")).trim_end().into());
    }
    let mut lines = vec![format!("drive says: {}", parts.join("  "))];
    if d.lba_formats.len() > 1 {
        let formats: Vec<String> = d
            .lba_formats
            .iter()
            .map(|f| {
                let meta = if f.metadata_size > 0 {
                    format!("+{}", f.metadata_size)
                } else {
                    String::new()
                };
                let used = if f.in_use { ", in use" } else { "" };
                format!("#{} {}{meta} ({}{used})", f.index, f.data_size, f.relative_performance)
            })
            .collect();
        lines.push(format!("LBA formats: {}", formats.join(", ")));
    }
    lines
}

fn sourced(v: &Sourced<u64>) -> String {
    format!("{} ({})", v.value, v.source.as_str())
}

/// Layers get lines of their own when there is more than one, or one
/// that is not aligned; a lone aligned one is said by FSTYPE.
fn shows_layers(layers: &[LayerAudit]) -> bool {
    layers.len() > 1 || layers.iter().any(|l| l.verdict.verdict != Class::Aligned)
}

/// An indented name for a layer under its partition.
fn layer_name(l: &LayerAudit) -> String {
    let layer = &l.layer;
    let indent = "  ".repeat(usize::try_from(layer.depth).unwrap_or(0));
    let label = layer.label.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
    format!("{indent}└ {}{label}", layer.name)
}

/// `whole`: what the absolute offset counts from.
fn layer_detail(l: &LayerAudit, whole: &str) -> String {
    let layer = &l.layer;
    let mut detail = format!(
        "data at byte {} of {whole} ({} into its container)",
        layer.absolute_offset_bytes, layer.offset_bytes
    );
    if let Some(unit) = layer.unit_bytes {
        let _ = write!(detail, ", {unit}-byte units");
    }
    for more in [&l.verdict.cost, &l.verdict.finding].into_iter().flatten() {
        let _ = write!(detail, "; {more}");
    }
    detail
}

/// The type's name for MBR and GPT types (other schemes' codes overlap
/// them), else its code.
fn type_name(p: &PartitionAudit) -> String {
    let part = &p.partition;
    let named = matches!(
        part.kind,
        PartKind::Primary | PartKind::Extended | PartKind::Logical | PartKind::Gpt
    );
    let name = types::name_of(&part.type_id).filter(|_| named);
    name.map_or(part.type_id.clone(), str::to_string)
}

fn detail(p: &PartitionAudit) -> String {
    let v = &p.verdict;
    if p.partition.kind == PartKind::Extended {
        return "extended container: only its logical partitions matter".to_string();
    }
    if !p.holds_data() {
        return "holds no data (the label's own entry or free space): not judged".to_string();
    }
    match v.verdict {
        Class::Misaligned => {
            let near = match (v.nearest_aligned_before, v.nearest_aligned_after) {
                (Some(b), Some(a)) => format!("; nearest aligned starts: {b} or {a}"),
                (None, Some(a)) => format!("; nearest aligned start: {a}"),
                _ => String::new(),
            };
            format!("{}{near}", v.cost.as_deref().unwrap_or_default())
        }
        Class::Suboptimal if v.aligned_optimal == Some(false) => {
            "not on the optimal I/O size".to_string()
        }
        Class::Suboptimal => {
            "not on a 1 MiB boundary (the fdisk/parted/Windows convention)".to_string()
        }
        Class::Compensated => compensated_detail(p),
        Class::Aligned => String::new(),
    }
}

/// Why a start off a boundary costs next to nothing here, and what is off.
fn compensated_detail(p: &PartitionAudit) -> String {
    let off = p.verdict.misalignment_bytes;
    let Some(outer) = p.layers.first() else { return String::new() };
    format!(
        "starts {off} bytes past a physical boundary, but its {} puts every data area on one \
         (data at byte {}): only its {off}-byte-off header's writes straddle, which are rare. \
         Not a misalignment to repair: moving it would misalign the data",
        outer.layer.name, outer.layer.absolute_offset_bytes
    )
}

/// The problems that make data unreachable or misplaced lead the summary,
/// whatever the starts' verdicts.
fn errors(a: &DiskAudit) -> String {
    let codes: Vec<&str> =
        a.problems.iter().filter(|p| p.severity == Severity::Error).map(|p| p.code).collect();
    match codes.len() {
        0 => String::new(),
        1 => format!("1 PROBLEM ({}); ", codes[0]),
        n => format!("{n} PROBLEMS ({}); ", codes.join(", ")),
    }
}

fn summary(a: &DiskAudit) -> String {
    let data: Vec<&PartitionAudit> = a.data_partitions().collect();
    let count = |c: Class| data.iter().filter(|p| p.verdict.verdict == c).count();
    let layers: Vec<Class> =
        data.iter().flat_map(|p| &p.layers).chain(&a.layers).map(|l| l.verdict.verdict).collect();
    let held = data.iter().flat_map(|p| &p.holders).chain(&a.holders).chain(&a.stack);
    let mappings: Vec<Class> = held.filter_map(|o| o.verdict).collect();
    // Say what is off: a partition's start, or only what lies inside.
    let starts = |c: Class| data.iter().any(|p| p.verdict.verdict == c);
    let verdict = match a.worst() {
        _ if a.error.is_some() && a.partitions.is_empty() => "NOT CHECKED",
        Some(Class::Misaligned) => "MISALIGNED",
        Some(Class::Compensated) => {
            "data aligned, some partition starts compensated by their contents"
        }
        Some(Class::Suboptimal) if starts(Class::Suboptimal) => {
            "aligned to physical sectors, some starts suboptimal"
        }
        Some(Class::Suboptimal) => "aligned to physical sectors, some layers inside suboptimal",
        Some(Class::Aligned) => "all aligned",
        None => "no partitions",
    };
    let assumed = match &a.geometry {
        Some(g) if g.physical_assumed => " (judged against 4096-byte physical sectors, assumed: pass --trust-kernel to believe the drive)",
        _ => "",
    };
    let mut off = String::new();
    let kinds = [
        (&layers, "layer inside", "layers inside"),
        (&mappings, "stacked mapping", "stacked mappings"),
    ];
    for (found, one, many) in kinds {
        for class in [Class::Suboptimal, Class::Misaligned] {
            off += &match found.iter().filter(|&&c| c == class).count() {
                0 => String::new(),
                1 => format!(", 1 {one} {}", class.as_str()),
                n => format!(", {n} {many} {}", class.as_str()),
            };
        }
    }
    let compensated = match count(Class::Compensated) {
        0 => String::new(),
        n => format!(", {n} compensated"),
    };
    format!(
        "{}{verdict}: {} partition{}, {} aligned{compensated}, {} suboptimal, {} \
         misaligned{off}{assumed}",
        errors(a),
        data.len(),
        if data.len() == 1 { "" } else { "s" },
        count(Class::Aligned),
        count(Class::Suboptimal),
        count(Class::Misaligned)
    )
}
