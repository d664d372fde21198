//! What every subcommand shares: exit codes, printing (`emit`,
//! `emit_json`), error text (`describe`, `restore_hint`) and the geometry
//! options. A leaf: `mod.rs` dispatches to the subcommands, which import
//! this instead of it.

/// Exit status: everything checked is fine.
pub const EXIT_OK: u8 = 0;
/// Exit status: a problem was found (e.g. a misaligned partition).
pub const EXIT_PROBLEM: u8 = 1;
/// Exit status: something could not be checked (bad input, I/O error).
pub const EXIT_ERROR: u8 = 2;

/// How to judge a target's geometry, shared by the commands that do.
#[derive(clap::Args)]
pub struct GeometryArgs {
    /// Believe a reported physical sector below 4096 instead of assuming 4096.
    #[arg(long)]
    pub trust_kernel: bool,

    /// Treat the target as having this logical sector size (bytes).
    #[arg(long, value_name = "BYTES")]
    pub logical_sector_size: Option<u64>,

    /// Treat the target as having this physical sector size (bytes).
    #[arg(long, value_name = "BYTES")]
    pub physical_sector_size: Option<u64>,

    /// Treat the target as having this alignment offset (bytes).
    #[arg(long, value_name = "BYTES")]
    pub alignment_offset: Option<u64>,
}

impl GeometryArgs {
    pub fn overrides(&self) -> blkalign::device::Overrides {
        blkalign::device::Overrides {
            logical_sector_size: self.logical_sector_size,
            physical_sector_size: self.physical_sector_size,
            alignment_offset: self.alignment_offset,
        }
    }
}

/// Write `text` to stdout. A reader that went away (`| head`) is not an
/// error: the output was simply not wanted.
pub fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Where a commit saved what it overwrote, and the way back.
pub fn saved_line(saved: &blkalign::backup::Saved) -> String {
    let bin = saved.bin.display();
    format!("saved the sectors to be overwritten to {bin} (restore: blkalign restore {bin})")
}

/// A failed commit, with the way back where a backup was saved before it.
pub fn restore_hint(e: blkalign::commit::CommitError) -> anyhow::Error {
    use blkalign::commit::CommitError::{ReadBack, Table, Write};
    let backup = match &e {
        Write { backup, .. } | ReadBack { backup, .. } | Table { backup, .. } => {
            Some(backup.display().to_string())
        }
        _ => None,
    };
    let err = anyhow::Error::new(e);
    match backup {
        Some(bin) => anyhow::anyhow!(
            "{}; `blkalign restore {bin} --yes` puts back what was there",
            describe(&err)
        ),
        None => err,
    }
}

/// The version of every `--json` document; fields may be added, none renamed.
pub const JSON_VERSION: u32 = 1;

/// Print a `--json` document: `"version"` first, pretty-printed as every
/// other one is, ending in a newline. `body` must serialize as an object.
pub fn emit_json<T: serde::Serialize>(body: &T) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Versioned<'a, T> {
        version: u32,
        #[serde(flatten)]
        body: &'a T,
    }
    let doc = Versioned { version: JSON_VERSION, body };
    emit(&(serde_json::to_string_pretty(&doc)? + "\n"))?;
    Ok(())
}

/// The error and its causes, each said once: many of our errors already
/// include their source in their own message.
pub(crate) fn describe(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}
