//! Planning a layout from the arguments `plan` and `partition` share, and
//! printing it.

use super::output::OutputArgs;
use anyhow::{bail, Context};
use blkalign::align::Geometry;
use blkalign::device::{self, SysRoot, Target, TargetKind};
use blkalign::plan::{self, Align, NewLabel, Plan, PlannedPartition, Script};
use blkalign::report::table::{self, Column, ColumnKind, Units};
use blkalign::report::{partition_name, PARTITION_NAME_ABOUT};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LabelArg {
    Gpt,
    Mbr,
    Dos,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign plan /dev/sdb --part 512MiB:efi:boot --part rest:linux:root
  blkalign plan disk.img --label mbr --part 1GiB:swap --part rest
  sfdisk -d /dev/sda | blkalign plan /dev/sdb --script -
  blkalign plan /dev/sdb --part rest -b -o NAME,START,SIZE
  blkalign plan /dev/sdb --part rest --json")]
pub struct Args {
    /// Whole disk (/dev/sdb) or disk-image file.
    #[arg(required_unless_present = "columns")]
    pub target: Option<PathBuf>,

    /// Table type (default gpt, or the script's `label:`).
    #[arg(long, value_enum)]
    label: Option<LabelArg>,

    /// A partition: SIZE (KiB, MiB, GiB, TiB, NNs sectors, N%, rest), TYPE
    /// (linux, swap, efi, lvm, raid, ..., an MBR hex code or a GPT GUID), NAME.
    #[arg(long = "part", value_name = "SIZE[:TYPE[:NAME]]")]
    parts: Vec<String>,

    /// Start grain: optimal (lcm of 1 MiB, optimal I/O and physical sector),
    /// minimal (the physical sector) or a size such as 4MiB.
    #[arg(long, default_value = "optimal", value_name = "optimal|minimal|SIZE")]
    align: String,

    /// Starts also on 224x56 cylinder boundaries, for old operating systems.
    #[arg(long)]
    cylinder_compatible: bool,

    /// Read the label and partitions from an sfdisk-style script (- for stdin).
    #[arg(long, value_name = "FILE|-", conflicts_with = "parts")]
    script: Option<PathBuf>,

    /// Print JSON instead of a table (docs/schema/plan.schema.json).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub geometry: super::GeometryArgs,
}

/// What `plan --json` prints.
#[derive(Serialize)]
pub struct Output<'a> {
    pub target: &'a std::path::Path,
    #[serde(flatten)]
    pub plan: &'a Plan,
}

/// Resolve the target, read its topology and plan the request.
pub fn make(args: &Args, root: &SysRoot) -> anyhow::Result<(Target, Plan)> {
    let script = script(args)?;
    let label = match (args.label, script.label) {
        (Some(LabelArg::Gpt), _) => NewLabel::Gpt,
        (Some(LabelArg::Mbr | LabelArg::Dos), _) => NewLabel::Mbr,
        (None, label) => label.unwrap_or(NewLabel::Gpt),
    };
    let path = args.target.as_deref().context("name the disk or image to plan")?;
    let target = device::resolve(root, path)?;
    if let Some(n) = target.selected_partition {
        bail!("{} is partition {n}; name the whole disk {}", path.display(), target.path.display());
    }
    let topology = plan::topology(root, &target, &args.geometry.overrides())?;
    // The effective physical sector, as audit judges it.
    let g = topology.geometry(args.geometry.trust_kernel);
    let cannot = || format!("cannot plan {}", target.path.display());
    check_sector_size(&script, &g, &target)?;
    let align = script.align(args.align.parse::<Align>()?, &g)?;
    let cylinders = args.cylinder_compatible;
    let mut plan = plan::plan_script(&g, topology.size_bytes, label, align, cylinders, &script)
        .with_context(cannot)?;
    script.bound(&mut plan).map_err(anyhow::Error::msg).with_context(cannot)?;
    tell_dropped(args, &script, &plan);
    Ok((target, plan))
}

/// The `--part` options, or the `--script` read (at most
/// [`plan::SCRIPT_LIMIT`] bytes) and parsed.
fn script(args: &Args) -> anyhow::Result<Script> {
    let Some(path) = &args.script else {
        let parts = args.parts.iter().map(|p| plan::parse_part(p).map_err(anyhow::Error::msg));
        return Ok(Script { requests: parts.collect::<anyhow::Result<_>>()?, ..Script::default() });
    };
    let name = script_name(path);
    let input: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("reading the script {name}"))?)
    };
    let mut bytes = Vec::new();
    // One byte past the limit tells a script at the limit from a larger one.
    input
        .take(plan::SCRIPT_LIMIT as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading the script {name}"))?;
    plan::parse_script(&bytes).map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

fn script_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".into()
    } else {
        path.display().to_string()
    }
}

/// The script's starts and sizes count its sectors: on other sectors they
/// would land elsewhere.
fn check_sector_size(script: &Script, g: &Geometry, target: &Target) -> anyhow::Result<()> {
    match script.sector_size {
        Some(size) if size != g.logical => bail!(
            "the script counts {size}-byte sectors and {} has {}-byte sectors{}",
            target.path.display(),
            g.logical,
            match target.kind {
                TargetKind::Image =>
                    format!(" (--logical-sector-size {size} plans the image for such a disk)"),
                TargetKind::Disk => String::new(),
            }
        ),
        _ => Ok(()),
    }
}

/// Say what of the script the plan does not keep: identifiers, flags,
/// and partition numbers it gives otherwise.
fn tell_dropped(args: &Args, script: &Script, plan: &Plan) {
    let name = args.script.as_deref().map_or("the script".into(), script_name);
    if !script.dropped.is_empty() {
        eprintln!(
            "blkalign: note: {name}: the plan does not keep {}: `partition` writes new random \
             identifiers and no flags",
            script.dropped.join(", ")
        );
    }
    let renumbered: Vec<String> = script
        .renumbered(plan)
        .iter()
        .map(|(theirs, ours)| format!("{theirs} as {ours}"))
        .collect();
    if !renumbered.is_empty() {
        eprintln!(
            "blkalign: note: {name}: the plan numbers partitions in order (logical ones from \
             5, as their chain of EBRs does; without node names, all of them, making its own \
             extended partition): {}",
            renumbered.join(", ")
        );
    }
}

/// Print `plan` as `args` ask: `plan` itself and `partition`'s dry run.
pub fn print(target: &Target, plan: &Plan, args: &Args) -> anyhow::Result<()> {
    let all = columns();
    let columns = table::select(&all, args.output.columns.as_deref())?;
    show(target, plan, args.json, &columns, &args.output)
}

/// Whether `--output help` was asked for, and printed.
pub fn printed_output_help(args: &Args) -> anyhow::Result<bool> {
    Ok(args.output.columns(&columns())?.is_none())
}

fn show<'a>(
    target: &'a Target,
    plan: &'a Plan,
    json: bool,
    columns: &[&Column<Row<'a>>],
    output: &OutputArgs,
) -> anyhow::Result<()> {
    if json {
        return super::emit_json(&Output { target: &target.path, plan });
    }
    let style = output.style();
    let rows: Vec<Row> = plan.partitions.iter().map(|p| Row { target, plan, p }).collect();
    let mut text = if style.raw { String::new() } else { heading(target, plan, style.units) };
    text += &table::render(columns, &rows, &style, 0, |_| false);
    Ok(super::emit(&text)?)
}

fn heading(target: &Target, plan: &Plan, units: Units) -> String {
    let ss = plan.sector_size;
    format!(
        "{}: {} label, {ss}-byte sectors, {} sectors ({}), grain {}\n",
        target.path.display(),
        plan.label.name(),
        plan.total_sectors,
        units.size(plan.total_sectors.saturating_mul(ss)),
        units.size(plan.grain_bytes),
    )
}

/// A planned partition, with what its cells need.
struct Row<'a> {
    target: &'a Target,
    plan: &'a Plan,
    p: &'a PlannedPartition,
}

impl Row<'_> {
    fn bytes(&self, sectors: u64) -> u64 {
        sectors.saturating_mul(self.plan.sector_size)
    }

    /// A sector, or with --bytes its first byte.
    fn offset(&self, sector: u64, units: Units) -> u64 {
        match units {
            Units::Human => sector,
            Units::Bytes => self.bytes(sector),
        }
    }
}

/// The columns `plan` can print (`-o`).
fn columns<'a>() -> Vec<Column<Row<'a>>> {
    use ColumnKind::{Number, Text};
    let column = Column::<Row<'a>>::new;
    vec![
        column("NAME", PARTITION_NAME_ABOUT, Text, |r, _| {
            partition_name(r.target.name.as_deref(), &r.target.path, r.p.number)
        }),
        column("NR", "partition number", Number, |r, _| r.p.number.to_string()).on_request(),
        column("START", "first sector (with --bytes: byte offset)", Number, |r, u| {
            r.offset(r.p.start, u).to_string()
        }),
        column("END", "last sector (with --bytes: offset of the last byte)", Number, |r, u| {
            r.offset(r.p.start.saturating_add(r.p.size), u).saturating_sub(1).to_string()
        }),
        column("SECTORS", "size in logical sectors", Number, |r, _| r.p.size.to_string()),
        column("SIZE", "size (with --bytes: in bytes)", Number, |r, u| u.size(r.bytes(r.p.size))),
        column("ROLE", "primary, extended, logical (MBR) or gpt", Text, |r, _| {
            r.p.role.name().to_string()
        }),
        column("TYPE", "partition type, by name where it has one", Text, |r, _| {
            blkalign::table::types::name_of(&r.p.type_id).unwrap_or(&r.p.type_id).to_string()
        }),
        column("PARTTYPE", "partition type code (MBR) or GUID (GPT)", Text, |r, _| {
            r.p.type_id.clone()
        })
        .on_request(),
        column("PARTLABEL", "partition name (GPT)", Text, |r, _| {
            r.p.name.clone().unwrap_or_default()
        }),
        column(
            "EBR",
            "LBA of a logical partition's EBR (with --bytes: byte offset)",
            Number,
            |r, u| r.p.ebr.map_or(String::new(), |e| r.offset(e, u).to_string()),
        )
        .on_request(),
    ]
}
