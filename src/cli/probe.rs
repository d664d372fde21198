//! `blkalign probe`: measure the physical sector size and alignment offset.

use super::{EXIT_OK, EXIT_PROBLEM};
use anyhow::Context;
use blkalign::device::SysRoot;
use blkalign::probe::{probe, ProbeOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A disk, partition or image. It is written to, each write putting back
    /// the bytes read there; a mounted or held device is refused.
    target: PathBuf,

    /// Print the result as JSON.
    #[arg(long)]
    json: bool,

    /// Seed the random positions and order, to reproduce a run.
    #[arg(long)]
    seed: Option<u64>,
}

/// Exit 1 when the kernel is wrong about the drive.
pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let target = &args.target;
    let file = std::fs::File::open(target).with_context(|| format!("{}", target.display()))?;
    let opts = ProbeOptions { seed: args.seed, sys: root.sys };
    let result = probe(&file, &opts).with_context(|| format!("probing {}", target.display()))?;
    let text = if args.json {
        serde_json::to_string(&result)? + "\n"
    } else {
        format!(
            "{}\nconfidence {:.2}, {} writes in {:.1} s\n",
            result.sentence(target),
            result.confidence,
            result.writes,
            result.elapsed_s
        )
    };
    super::emit(&text)?;
    Ok(if result.agrees_with_kernel { EXIT_OK } else { EXIT_PROBLEM })
}
