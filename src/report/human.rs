//! The human report: a heading per disk, a row per partition in the style
//! of fdisk and lsblk, and a summary line.

use super::human_size;
use crate::align::Class;
use crate::audit::{DiskAudit, PartitionAudit};
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
    let misaligned = a.worst() == Some(Class::Misaligned);
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
    table.set_header(["", "#", "START", "END", "SECTORS", "SIZE", "TYPE", "VERDICT", "DETAIL"]);
    let sector = a.topology.as_ref().map_or(512, |t| t.logical_sector_size.value);
    for p in &a.partitions {
        table.add_row(row(p, sector, color));
    }
    for column in 1..=5 {
        if let Some(c) = table.column_mut(column) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
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
    let mut verdict = Cell::new(p.verdict.verdict.as_str());
    if color {
        verdict = verdict.fg(match p.verdict.verdict {
            Class::Aligned => Color::Green,
            Class::Suboptimal => Color::Yellow,
            Class::Misaligned => Color::Red,
        });
    }
    vec![
        Cell::new(if p.selected { "*" } else { "" }),
        Cell::new(part.number),
        Cell::new(part.start),
        Cell::new(end.map_or("-".to_string(), |e| e.to_string())),
        Cell::new(part.size),
        Cell::new(human_size(bytes)),
        Cell::new(kind),
        verdict,
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
    format!(
        "summary: {verdict}: {} partition{}, {} aligned, {} suboptimal, {} misaligned{assumed}",
        data.len(),
        if data.len() == 1 { "" } else { "s" },
        count(Class::Aligned),
        count(Class::Suboptimal),
        count(Class::Misaligned)
    )
}
