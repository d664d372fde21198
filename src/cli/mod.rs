//! The command line: one file per subcommand, each a thin layer over the
//! library.

mod audit;
mod bench;
mod emulate;
mod probe;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status: everything checked is fine.
pub const EXIT_OK: u8 = 0;
/// Exit status: a problem was found (e.g. a misaligned partition).
pub const EXIT_PROBLEM: u8 = 1;
/// Exit status: something could not be checked (bad input, I/O error).
pub const EXIT_ERROR: u8 = 2;

#[derive(Parser)]
#[command(name = "blkalign", version, about, propagate_version = true)]
struct Cli {
    /// Read topology from this directory instead of /sys; block-device nodes
    /// are then looked up in its sibling `dev/`. For tests and fixtures.
    #[arg(long, global = true, hide = true, env = "BLKALIGN_SYSFS_ROOT")]
    sysfs_root: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report the alignment of every partition on disks and disk images.
    Audit(audit::Args),
    /// Start, list and stop emulated Advanced Format drives.
    #[command(subcommand)]
    Emulate(emulate::Command),
    /// Time writes by size and offset: random, phybs or stride workloads.
    Bench(bench::Args),
    /// Measure the physical sector size and alignment offset of a drive.
    Probe(probe::Args),
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { EXIT_ERROR } else { EXIT_OK });
        }
    };
    let result = match cli.command {
        Command::Audit(args) => audit::run(args, cli.sysfs_root),
        Command::Emulate(cmd) => emulate::run(cmd),
        Command::Bench(args) => bench::run(args, cli.sysfs_root),
        Command::Probe(args) => probe::run(args, cli.sysfs_root),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("blkalign: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
