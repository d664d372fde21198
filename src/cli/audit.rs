//! `blkalign audit`: report the alignment of every partition.

use super::output::OutputArgs;
use super::{GeometryArgs, EXIT_ERROR, EXIT_OK, EXIT_PROBLEM};
use blkalign::align::Class;
use blkalign::audit::{self, AuditOptions, DiskAudit};
use blkalign::device::{libvirt, SysRoot};
use blkalign::report;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Prometheus,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign audit                            every disk on this machine
  blkalign audit /dev/sda disk.img          a disk and a disk image
  blkalign audit /dev/sda2                  its disk, partition 2 marked *
  blkalign audit -o NAME,START,VERDICT /dev/sda
  blkalign audit -o +END,SECTORS,PARTLABEL /dev/sda
  blkalign audit -rn -o NAME,VERDICT        one line per partition, for scripts
  blkalign audit --output help              the columns
  blkalign audit --all-domains --json       every libvirt guest's disks
  blkalign audit --json | jq '.targets[].partitions[] | [.number, .verdict]'")]
pub struct Args {
    /// Whole disks (/dev/sda), partitions (audits their disk, highlights the
    /// partition) or disk-image files. Default: every disk on this machine.
    targets: Vec<PathBuf>,

    /// Output format: table, json (the contract in docs/output.md) or
    /// prometheus (node_exporter's textfile format).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,

    /// Shorthand for --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,

    #[command(flatten)]
    output: OutputArgs,

    /// Exit 1 for suboptimal starts too (off the optimal I/O size or 1 MiB),
    /// and for compensated ones (off a physical boundary, data inside on one).
    #[arg(long)]
    strict: bool,

    /// Measure each disk's physical sector and alignment offset by timing
    /// writes, and judge by the measurement. Each write puts back the bytes
    /// it found; mounted or held disks are refused. Writes, so needs --yes.
    #[arg(long)]
    probe: bool,

    /// Allow --probe to write.
    #[arg(long, requires = "probe")]
    yes: bool,

    /// Audit the disks of this libvirt guest (repeatable), read-only; a
    /// running guest's images are read past its lock.
    #[arg(long, value_name = "NAME")]
    domain: Vec<String>,

    /// Audit the disks of every libvirt guest, running or not.
    #[arg(long)]
    all_domains: bool,

    /// The libvirt URI whose guests to audit (default: virsh's own, as
    /// LIBVIRT_DEFAULT_URI sets it).
    #[arg(long, value_name = "URI")]
    connect: Option<String>,

    #[command(flatten)]
    geometry: GeometryArgs,
}

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    if args.probe && !args.yes {
        anyhow::bail!(
            "--probe writes to each disk (putting back the bytes it read): add --yes to allow it"
        );
    }
    let format = if args.json { Format::Json } else { args.format };
    if format != Format::Table && args.output.given() {
        anyhow::bail!("only --format table takes -o, -n, -b, -r, -w, --wide and --color");
    }
    let all = report::audit_columns();
    let Some(columns) = args.output.columns(&all)? else {
        return Ok(EXIT_OK);
    };
    let opts = AuditOptions {
        overrides: args.geometry.overrides(),
        trust_kernel: args.geometry.trust_kernel,
        probe: args.probe,
        store: Default::default(),
    };
    let guests = !args.domain.is_empty() || args.all_domains;
    let mut audits: Vec<DiskAudit> = if args.targets.is_empty() && !guests {
        audit::audit_machine(&root, &opts)?
    } else {
        args.targets.iter().map(|t| audit::audit_path(&root, t, &opts)).collect()
    };
    if guests {
        let uri = args.connect.as_deref();
        let names = if args.all_domains { libvirt::domains(uri)? } else { args.domain.clone() };
        for name in &names {
            let disks = libvirt::disks(uri, name)?;
            audits.extend(disks.iter().map(|d| audit::audit_domain_disk(&root, d, &opts)));
        }
    }
    let text = match format {
        // A target never found is nothing but its error, said once below.
        Format::Table => {
            let found: Vec<DiskAudit> =
                audits.iter().filter(|a| a.kind.is_some()).cloned().collect();
            report::human(&found, &columns, &args.output.style())
        }
        Format::Json => report::json(&audits),
        Format::Prometheus => report::prometheus(&audits, now()),
    };
    super::emit(&text)?;
    for a in audits.iter().filter(|a| a.error.is_some()) {
        let error = a.error.as_deref().unwrap_or_default();
        // Errors finding or opening the target already name it.
        let path = format!("{}: ", a.path.display());
        eprintln!("blkalign: {}{error}", if error.starts_with(&path) { "" } else { &path });
    }
    Ok(exit_code(&audits, args.strict))
}

/// 2 if anything could not be checked, else 1 if anything is misaligned
/// (or, with --strict, suboptimal or compensated) or a table problem puts data out of
/// reach, else 0.
fn exit_code(audits: &[DiskAudit], strict: bool) -> u8 {
    if audits.iter().any(|a| a.error.is_some()) {
        return EXIT_ERROR;
    }
    if audits.iter().any(DiskAudit::has_errors) {
        return EXIT_PROBLEM;
    }
    let worst = audits.iter().filter_map(DiskAudit::worst).max();
    match worst {
        Some(Class::Misaligned) => EXIT_PROBLEM,
        Some(Class::Suboptimal | Class::Compensated) if strict => EXIT_PROBLEM,
        _ => EXIT_OK,
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
