//! The command line: one file per subcommand, each a thin layer over the
//! library.

mod advise;
mod audit;
mod bench;
mod common;
mod demo;
mod emulate;
mod generate;
mod output;
mod partition;
mod plan;
mod planning;
mod probe;
mod realign;
mod rescale;
mod restore;

pub(crate) use common::describe;
pub use common::{emit, emit_json, restore_hint, saved_line, GeometryArgs};
pub use common::{EXIT_ERROR, EXIT_OK, EXIT_PROBLEM};

use blkalign::device::SysRoot;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "blkalign",
    version,
    about,
    propagate_version = true,
    term_width = 80,
    after_help = "Examples:
  blkalign audit                         # every disk, read-only
  blkalign audit /dev/sdb --json
  blkalign realign /dev/sdb              # the plan; add --yes to move
  blkalign plan /dev/sdc --part 512MiB:efi --part rest
  blkalign probe /dev/sdb                # the true physical sector, from timing
  blkalign demo                          # the whole story on an image it makes

Exit status: 0 all good, 1 a problem found (e.g. misaligned), 2 an error."
)]
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
    /// Build a disk partitioned the old way (LBA 63), find it misaligned,
    /// move it, and check the data: no root needed (with root and nbdkit,
    /// also an emulated WD Green with the write penalty timed).
    Demo(demo::Args),
    /// Report the alignment of every partition on disks and disk images.
    Audit(audit::Args),
    /// Print the aligned layout a partitioning request would get; writes nothing.
    Plan(planning::Args),
    /// Write an aligned partition table (prints the plan unless --yes).
    Partition(partition::Args),
    /// Put back the sectors a `partition` run saved, on the disk they came
    /// from (prints what it would do unless --yes).
    Restore(restore::Args),
    /// Rewrite an MBR or GPT for another logical sector size (4096 <-> 512),
    /// every partition keeping its bytes (prints the change unless --yes).
    Rescale(rescale::Args),
    /// Print mkfs, LVM, LUKS and ZFS options that keep each partition's contents aligned.
    Advise(advise::Args),
    /// Start, list, stop and power-cut emulated Advanced Format drives.
    #[command(subcommand)]
    Emulate(emulate::Command),
    /// Time writes by size and offset: random, phybs or stride workloads.
    Bench(bench::Args),
    /// Measure the physical sector size and alignment offset of a drive.
    Probe(probe::Args),
    /// Move misaligned partitions to aligned starts in place, crash-safe and
    /// resumable (prints the plan unless --yes).
    Realign(realign::Args),
    /// Print the manual page, or write one per subcommand into a directory.
    ///
    /// Generated from the definitions behind --help, so they match this
    /// binary. The Debian package installs them; this is for other installs.
    Man(generate::ManArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// Generated from the definitions behind --help. The Debian package
    /// installs the bash, zsh and fish ones; this is for other installs.
    Completions(generate::CompletionsArgs),
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { EXIT_ERROR } else { EXIT_OK });
        }
    };
    let root = cli.sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Audit(args) => audit::run(args, root),
        Command::Plan(args) => plan::run(args, root),
        Command::Partition(args) => partition::run(args, root),
        Command::Restore(args) => restore::run(args, root),
        Command::Rescale(args) => rescale::run(args, root),
        Command::Advise(args) => advise::run(args, root),
        Command::Emulate(cmd) => emulate::run(cmd),
        Command::Bench(args) => bench::run(args, root),
        Command::Probe(args) => probe::run(args, root),
        Command::Realign(args) => realign::run(args, root),
        Command::Man(args) => generate::man(args, Cli::command()),
        Command::Completions(args) => generate::completions(args, Cli::command()),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("blkalign: {}{}", describe(&err), vm_image_hint(&err));
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Where a command refused a VM image: the two that read one as it is.
fn vm_image_hint(err: &anyhow::Error) -> &'static str {
    let vm_image = err
        .chain()
        .any(|c| matches!(c.downcast_ref(), Some(blkalign::device::DeviceError::VmImage { .. })));
    match vm_image {
        true => "; `blkalign audit` and `blkalign realign` read it as it is, through QEMU",
        false => "",
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand shows examples, and every subcommand and option
    /// says what it is for: `--help` and the man pages come from these.
    #[test]
    fn every_command_and_option_is_described() {
        fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() {
                missing.push(format!("{path}: no description"));
            }
            let runnable = !cmd.has_subcommands();
            let examples =
                cmd.get_after_help().is_some_and(|h| h.to_string().contains("Examples:"));
            if runnable && !examples {
                missing.push(format!("{path}: no examples"));
            }
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if arg.get_help().is_none() && !builtin {
                    missing.push(format!("{path} {}: no description", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                check(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        check(&super::Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
