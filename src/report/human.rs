//! The human report: a heading per disk, a row per partition in the style
//! of fdisk and lsblk, and a summary line.

use super::human_size;
use crate::align::Class;
use crate::audit::{DiskAudit, LayerAudit, PartitionAudit};
use crate::device::{Source, Sourced, Topology};
use crate::table::{types, PartKind, Severity};
use comfy_table::{presets, Cell, CellAlignment, Color, Table};
use std::fmt::Write;

/// Render every audit; `color` when writing to a terminal.
pub fn render(audits: &[DiskAudit], color: bool) -> String {
    let mut out = String::new();
    for (i, audit) in audits.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        disk(&mut out, audit, color);
    }
    out
}

fn disk(out: &mut String, a: &DiskAudit, color: bool) {
    let _ = writeln!(out, "{}", heading(a));
    if let Some(t) = &a.topology {
        let _ = writeln!(out, "  {}", geometry_line(a, t));
        for note in &t.notes {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    if let Some(err) = &a.error {
        let _ = writeln!(out, "  error: {err}");
    }
    if let Some(c) = &a.contents {
        let label = c.label.as_deref().map(|l| format!(" labelled {l:?}")).unwrap_or_default();
        let _ = writeln!(out, "  holds: {}{label} from byte 0, with no partition table", c.name);
    }
    if shows_layers(&a.layers) {
        for l in &a.layers {
            let cells: Vec<String> =
                layer_row(l, false).iter().skip(7).map(|c| c.content()).collect();
            let _ = writeln!(out, "  {}", cells.join("  "));
        }
    }
    for p in &a.problems {
        let word = match p.severity {
            Severity::Error => "problem",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let _ = writeln!(out, "  {word}: {}", p.message);
    }
    if !a.partitions.is_empty() {
        for line in partition_table(a, color).lines() {
            let _ = writeln!(out, "  {}", line.trim_end());
        }
    }
    for s in a.structures.iter().filter(|s| !s.aligned_physical && s.what == "ebr") {
        let _ = writeln!(
            out,
            "  info: EBR at LBA {} is not on a physical boundary (harmless: it is read once)",
            s.lba
        );
    }
    let _ = writeln!(out, "  {}", summary(a));
    let misaligned = a
        .partitions
        .iter()
        .any(|p| p.partition.kind != PartKind::Extended && p.verdict.verdict == Class::Misaligned);
    if misaligned && a.error.is_none() {
        let _ = writeln!(
            out,
            "  hint: `blkalign realign {}` shows how to move the misaligned partitions to aligned \
             starts, keeping their data (add --yes to move)",
            a.path.display()
        );
    } else if a.partitions.iter().any(|p| p.partition.kind != PartKind::Extended)
        && a.error.is_none()
    {
        let _ = writeln!(
            out,
            "  hint: `blkalign advise {}` prints the mkfs/LVM/LUKS/ZFS options that keep each partition's contents aligned",
            a.path.display()
        );
    }
}

fn heading(a: &DiskAudit) -> String {
    let mut parts = vec![a.path.display().to_string()];
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

fn sourced(v: &Sourced<u64>) -> String {
    format!("{} ({})", v.value, v.source.as_str())
}

fn partition_table(a: &DiskAudit, color: bool) -> String {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING);
    if color {
        table.enforce_styling();
    } else {
        table.force_no_tty();
    }
    table.set_header([
        "", "#", "START", "END", "SECTORS", "SIZE", "TYPE", "FSTYPE", "VERDICT", "DETAIL",
    ]);
    let sector = a.topology.as_ref().map_or(512, |t| t.logical_sector_size.value);
    for p in &a.partitions {
        table.add_row(row(p, sector, color));
        if shows_layers(&p.layers) {
            for layer in &p.layers {
                table.add_row(layer_row(layer, color));
            }
        }
    }
    for column in 1..=5 {
        if let Some(c) = table.column_mut(column) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
}

/// Layers get lines of their own when there is more than one, or one
/// that is not aligned; a lone aligned one is said by FSTYPE.
fn shows_layers(layers: &[LayerAudit]) -> bool {
    layers.len() > 1 || layers.iter().any(|l| l.verdict.verdict != Class::Aligned)
}

fn verdict_cell(class: Class, color: bool) -> Cell {
    let cell = Cell::new(class.as_str());
    if !color {
        return cell;
    }
    cell.fg(match class {
        Class::Aligned => Color::Green,
        Class::Suboptimal => Color::Yellow,
        Class::Misaligned => Color::Red,
    })
}

/// An indented line for one layer under its partition.
fn layer_row(l: &LayerAudit, color: bool) -> Vec<Cell> {
    let layer = &l.layer;
    let indent = "  ".repeat(usize::try_from(layer.depth).unwrap_or(0));
    let label = layer.label.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
    let mut detail = format!(
        "data at byte {} of the disk ({} into its container)",
        layer.absolute_offset_bytes, layer.offset_bytes
    );
    if let Some(unit) = layer.unit_bytes {
        let _ = write!(detail, ", {unit}-byte units");
    }
    for more in [&l.verdict.cost, &l.verdict.finding].into_iter().flatten() {
        let _ = write!(detail, "; {more}");
    }
    let mut cells = vec![Cell::new(""); 7];
    cells.push(Cell::new(format!("{indent}└ {}{label}", layer.name)));
    cells.push(verdict_cell(l.verdict.verdict, color));
    cells.push(Cell::new(detail));
    cells
}

fn row(p: &PartitionAudit, sector: u64, color: bool) -> Vec<Cell> {
    let part = &p.partition;
    let end = part.start.checked_add(part.size).and_then(|e| e.checked_sub(1));
    let bytes = part.size.saturating_mul(sector);
    // The names are those of MBR and GPT types; other schemes' codes overlap them.
    let named = matches!(
        part.kind,
        PartKind::Primary | PartKind::Extended | PartKind::Logical | PartKind::Gpt
    );
    let name = types::name_of(&part.type_id).filter(|_| named);
    let kind = name.map_or(part.type_id.clone(), str::to_string);
    let fstype = p.layers.first().map_or("", |l| l.layer.name);
    vec![
        Cell::new(if p.selected { "*" } else { "" }),
        Cell::new(part.number),
        Cell::new(part.start),
        Cell::new(end.map_or("-".to_string(), |e| e.to_string())),
        Cell::new(part.size),
        Cell::new(human_size(bytes)),
        Cell::new(kind),
        Cell::new(fstype),
        verdict_cell(p.verdict.verdict, color),
        Cell::new(detail(p)),
    ]
}

fn detail(p: &PartitionAudit) -> String {
    let v = &p.verdict;
    if p.partition.kind == PartKind::Extended {
        return "extended container: only its logical partitions matter".to_string();
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
        Class::Aligned => String::new(),
    }
}

fn summary(a: &DiskAudit) -> String {
    let data: Vec<&PartitionAudit> =
        a.partitions.iter().filter(|p| p.partition.kind != PartKind::Extended).collect();
    let count = |c: Class| data.iter().filter(|p| p.verdict.verdict == c).count();
    let verdict = match a.worst() {
        _ if a.error.is_some() && a.partitions.is_empty() => "NOT CHECKED",
        Some(Class::Misaligned) => "MISALIGNED",
        Some(Class::Suboptimal) => "aligned to physical sectors, some starts suboptimal",
        Some(Class::Aligned) => "all aligned",
        None => "no partitions",
    };
    let assumed = match &a.geometry {
        Some(g) if g.physical_assumed => " (judged against 4096-byte physical sectors, assumed: pass --trust-kernel to believe the drive)",
        _ => "",
    };
    let layers = data.iter().flat_map(|p| &p.layers).chain(&a.layers);
    let bad = layers.filter(|l| l.verdict.verdict == Class::Misaligned).count();
    let bad = match bad {
        0 => String::new(),
        1 => ", 1 layer inside misaligned".to_string(),
        n => format!(", {n} layers inside misaligned"),
    };
    format!(
        "summary: {verdict}: {} partition{}, {} aligned, {} suboptimal, {} misaligned{bad}{assumed}",
        data.len(),
        if data.len() == 1 { "" } else { "s" },
        count(Class::Aligned),
        count(Class::Suboptimal),
        count(Class::Misaligned)
    )
}
