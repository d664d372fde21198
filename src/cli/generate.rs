//! `blkalign man` and `blkalign completions`: the manual pages and shell
//! completions, generated from the same clap definitions as `--help`, so
//! they cannot drift from it. Visible subcommands, as in rustup and
//! starship, because `cargo install` users must run them by hand.

use super::EXIT_OK;
use anyhow::Context;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign man | man -l -
  blkalign man --dir /usr/local/share/man/man1 && mandb -q")]
pub struct ManArgs {
    /// Write blkalign.1 and one page per subcommand (blkalign-audit.1,
    /// blkalign-emulate-start.1, ...) into this directory instead of
    /// printing blkalign.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign completions bash > /etc/bash_completion.d/blkalign
  blkalign completions zsh > \"${fpath[1]}/_blkalign\"
  blkalign completions fish > ~/.config/fish/completions/blkalign.fish")]
pub struct CompletionsArgs {
    /// The shell to write the completion script for (printed to stdout).
    shell: clap_complete::Shell,
}

/// The top page's DESCRIPTION: why, and where to start.
const DESCRIPTION: &str =
    "blkalign finds, measures, prevents and repairs misaligned partitions on \
Advanced Format disks. Most disks store 4096-byte physical sectors but present 512-byte \
logical ones; a partition that starts on a sector not divisible by 8 (LBA 63 from old fdisk, \
LBA 34 right after a GPT) makes every 4 KiB write straddle two physical sectors, which the \
drive must read, modify and rewrite. First-generation drives even report 512-byte physical \
sectors, so blkalign judges every start against 4096 bytes unless told to trust the kernel.

Start with blkalign audit (every disk, read-only); blkalign realign moves a misaligned \
partition in place, blkalign plan and blkalign partition make aligned tables, blkalign advise \
keeps file systems, LVM, LUKS and ZFS aligned on top, blkalign probe and blkalign bench measure \
what a drive really does. Each subcommand has its own page, e.g. blkalign-audit(1).";

/// What every page says about exit codes: the contract of src/cli/mod.rs.
const EXIT_STATUS: [(&str, &str); 3] = [
    ("0", "Success: everything checked is fine, or the requested action was done."),
    (
        "1",
        "A problem was found: a misaligned partition or layer, a table error that puts data \
         out of reach, a drive whose kernel-reported geometry is wrong, an unfinished move.",
    ),
    (
        "2",
        "An error: bad arguments, a target missing or unreadable, a refusal. \
         An error wins over a finding: the check was incomplete.",
    ),
];

const SEE_ALSO: [(&str, &str); 4] =
    [("lsblk", "8"), ("sfdisk", "8"), ("parted", "8"), ("fio", "1")];

/// `cli` is the whole parser, which `mod.rs` holds.
pub fn man(args: ManArgs, cli: clap::Command) -> anyhow::Result<u8> {
    let top = command(cli);
    match args.dir {
        None => super::emit(&page(&top, true)?)?,
        Some(dir) => write_pages(&top, &dir, true)?,
    }
    Ok(EXIT_OK)
}

pub fn completions(args: CompletionsArgs, cli: clap::Command) -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command(cli), "blkalign", &mut out);
    super::emit(&String::from_utf8(out)?)?;
    Ok(EXIT_OK)
}

/// The full command tree, built so that subcommands know their display
/// names (`blkalign-audit`) and usage (`blkalign audit`).
fn command(cli: clap::Command) -> clap::Command {
    let mut cmd = cli.disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The page date: SOURCE_DATE_EPOCH when set (reproducible packages), else today.
fn date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
    civil_date(secs / 86_400)
}

/// YYYY-MM-DD of a day count since 1970-01-01 (Howard Hinnant's
/// civil_from_days, unsigned as days are never negative here).
fn civil_date(days: u64) -> String {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn write_pages(cmd: &clap::Command, dir: &Path, top: bool) -> anyhow::Result<()> {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page(cmd, top)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, false)?;
    }
    Ok(())
}

/// clap_mangen's page, with the `after_help` examples as a preformatted
/// EXAMPLES section (its own EXTRA section would fill them into one
/// paragraph), then EXIT STATUS and SEE ALSO.
fn page(cmd: &clap::Command, top: bool) -> anyhow::Result<String> {
    let examples = cmd.get_after_help().map(|text| text.to_string());
    let mut cmd = cmd.clone().after_help(None);
    if top {
        cmd = cmd.long_about(DESCRIPTION);
    }
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name()).to_uppercase();
    let man = Man::new(cmd)
        .title(name)
        .date(date())
        .source(concat!("blkalign ", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");
    let mut out = Vec::new();
    man.render(&mut out)?;
    let standard = String::from_utf8(out)?;

    // A command's own "Exit status:" paragraph goes under EXIT STATUS.
    let text = examples.unwrap_or_default();
    let (own, rest): (Vec<&str>, Vec<&str>) =
        text.split("\n\n").partition(|p| p.starts_with("Exit status:"));
    let mut extra = Roff::new();
    if !rest.concat().trim().is_empty() {
        examples_section(&mut extra, &rest.join("\n\n"));
    }
    exit_status_section(&mut extra, own.first().copied());
    see_also_section(&mut extra, top);
    // Both renderings open with the same preamble (the apostrophe string):
    // keep the first only.
    let preamble = Roff::new().render();
    let extra = extra.render();
    let extra = extra.strip_prefix(&preamble).unwrap_or(&extra);

    // Before clap_mangen's closing VERSION section, where man-pages(7) puts them.
    Ok(match standard.find(".SH VERSION\n") {
        Some(at) => format!("{}{extra}{}", &standard[..at], &standard[at..]),
        None => standard + extra,
    })
}

/// The example lines, preformatted; a paragraph after them (what a
/// command guarantees) goes under NOTES rather than among the commands.
fn examples_section(roff: &mut Roff, text: &str) {
    let body = text.strip_prefix("Examples:").unwrap_or(text).trim_matches('\n');
    let (examples, notes) = body.split_once("\n\n").unwrap_or((body, ""));
    roff.control("SH", ["EXAMPLES"]);
    roff.control("RS", ["4"]);
    roff.control("nf", []);
    for line in examples.lines() {
        roff.text([roman(line.strip_prefix("  ").unwrap_or(line))]);
    }
    roff.control("fi", []);
    roff.control("RE", []);
    if !notes.trim().is_empty() {
        roff.control("SH", ["NOTES"]);
        roff.text([roman(notes.trim().replace('\n', " "))]);
    }
}

fn exit_status_section(roff: &mut Roff, own: Option<&str>) {
    roff.control("SH", ["EXIT STATUS"]);
    if let Some(own) = own {
        roff.text([roman(own.trim().replace('\n', " "))]);
    }
    for (code, meaning) in EXIT_STATUS {
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(meaning)]);
    }
}

fn see_also_section(roff: &mut Roff, top: bool) {
    roff.control("SH", ["SEE ALSO"]);
    let mut refs: Vec<(&str, &str)> = Vec::new();
    if !top {
        refs.push(("blkalign", "1"));
    }
    refs.extend(SEE_ALSO);
    let mut line = Vec::new();
    for (i, (name, section)) in refs.iter().enumerate() {
        let sep = if i + 1 < refs.len() { ", " } else { "" };
        line.push(bold(*name));
        line.push(roman(format!("({section}){sep}")));
    }
    roff.text(line);
}

#[cfg(test)]
mod tests {
    use super::{civil_date, command, page};
    use clap::CommandFactory;

    /// Found by a user: probe's "inconclusive" exit 2 was on no page.
    #[test]
    fn a_command_says_its_own_exit_statuses_under_exit_status() {
        let top = command(crate::cli::Cli::command());
        let probe = top.find_subcommand("probe").expect("probe");
        let page = page(probe, false).expect("page");
        let status = page.split(".SH \"EXIT STATUS\"").nth(1).expect("EXIT STATUS");
        let status = status.split(".SH \"SEE ALSO\"").next().expect("section");
        assert!(status.contains("inconclusive"), "{status}");
        assert!(status.contains("kernel is wrong"), "{status}");
        let notes = page.split(".SH NOTES").nth(1).expect("NOTES");
        assert!(!notes.split(".SH \"EXIT").next().expect("notes").contains("Exit status"));
    }

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(19_782), "2024-02-29");
        assert_eq!(civil_date(20_454), "2026-01-01");
    }
}
