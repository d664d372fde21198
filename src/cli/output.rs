//! The output options of the commands that print tables (`audit`, `plan`,
//! `advise`, `bench`), as lsblk has them: `-o/--output`, `-n`, `-b`, `-r`,
//! `-w/--width`, `--wide`, `--color`.
//!
//! How a command uses them:
//! 1. Flatten them into its arguments, beside a `--json` flag whose id is
//!    `json` (these options conflict with it):
//!    `#[command(flatten)] output: super::output::OutputArgs`.
//! 2. Describe its columns once, as data: a list of
//!    `blkalign::report::table::Column<Row>` (name, description, kind,
//!    printed by default or not, the cell of a row in human units or bytes).
//! 3. `let Some(columns) = args.output.columns(&list)? else { return Ok(EXIT_OK) };`
//!    (None: `--output help` was printed), then
//!    `super::emit(&args.output.table(&columns, &rows))?`, or
//!    `args.output.style()` for a report that prints more than one table.
//!
//! Also the progress bars on stderr that long runs (`bench`, `probe`,
//! `realign`) share: [`bar`], and [`with_progress`] for a [`Progress`].

use blkalign::bench::{stats, BenchPhase, Progress};
use blkalign::report::table::{self, Column, Style, Units};
use indicatif::{HumanDuration, ProgressBar};
use std::io::IsTerminal;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Options for human-readable tables.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OutputArgs {
    /// Columns to print, comma-separated, in any case (e.g. NAME,START,VERDICT);
    /// +COLUMNS adds them to the default set; `--output help` lists them.
    #[arg(short = 'o', long = "output", value_name = "COLUMNS", conflicts_with = "json")]
    pub columns: Option<String>,

    /// Do not print the column headings.
    #[arg(short = 'n', long, conflicts_with = "json")]
    pub noheadings: bool,

    /// Print sizes and offsets in bytes rather than in human units (KiB, MiB, ...).
    #[arg(short = 'b', long, conflicts_with = "json")]
    pub bytes: bool,

    /// Raw output: the table alone, cells separated by one space, nothing
    /// padded or wrapped, blanks and special characters escaped as \xHH
    /// (commands stay runnable: only control characters escaped).
    #[arg(short = 'r', long, conflicts_with_all = ["json", "wide", "width"])]
    pub raw: bool,

    /// Never wrap: full text on one line, even on a terminal.
    #[arg(long, conflicts_with_all = ["json", "width"])]
    pub wide: bool,

    /// Fit the output to this many columns, even when not writing to a
    /// terminal (as lsblk --width) [default: the terminal's width].
    #[arg(short = 'w', long, value_name = "NUMBER", conflicts_with = "json",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub width: Option<u16>,

    /// Colour the verdicts: auto (when stdout is a terminal, NO_COLOR is
    /// unset or empty and TERM is not "dumb"), always or never.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto,
          conflicts_with = "json")]
    pub color: ColorChoice,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

impl OutputArgs {
    /// The columns asked for, or None after printing them for `--output help`.
    pub fn columns<'c, R>(
        &self,
        all: &'c [Column<R>],
    ) -> anyhow::Result<Option<Vec<&'c Column<R>>>> {
        if self.columns.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("help")) {
            super::emit(&table::help(all))?;
            return Ok(None);
        }
        Ok(Some(table::select(all, self.columns.as_deref())?))
    }

    /// Whether any option was given that only a table honours.
    pub fn given(&self) -> bool {
        self.columns.is_some()
            || self.noheadings
            || self.bytes
            || self.raw
            || self.wide
            || self.width.is_some()
            || self.color != ColorChoice::Auto
    }

    /// The layout the options ask for on this stdout.
    pub fn style(&self) -> Style {
        let terminal = std::io::stdout().is_terminal();
        let width = match self.width {
            Some(w) => Some(usize::from(w)),
            None if terminal && !self.wide && !self.raw => Some(terminal_width()),
            None => None,
        };
        let color = match self.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && !no_color() && !dumb_terminal(),
        };
        Style {
            units: if self.bytes { Units::Bytes } else { Units::Human },
            noheadings: self.noheadings,
            raw: self.raw,
            width,
            color,
        }
    }

    /// `rows` as a table of `columns`, laid out as asked.
    pub fn table<R>(&self, columns: &[&Column<R>], rows: &[R]) -> String {
        table::render(columns, rows, &self.style(), 0, |_| false)
    }
}

/// NO_COLOR set to anything but the empty string (no-color.org).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

fn dumb_terminal() -> bool {
    std::env::var_os("TERM").is_some_and(|t| t == "dumb")
}

/// The terminal's width as the kernel has it, else $COLUMNS, else 80: what
/// util-linux's get_terminal_width does.
fn terminal_width() -> usize {
    let env = || std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).filter(|&c| c > 0);
    window_columns().or_else(env).unwrap_or(80)
}

fn window_columns() -> Option<usize> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    Some(usize::from(size.ws_col)).filter(|&c| c > 0)
}

/// A progress bar on stderr drawn with `template`, hidden when stderr is
/// not a terminal (a pipe or a log gets no bar).
pub fn bar(total: u64, template: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// How often the bar is redrawn and progress sampled.
const TICK: Duration = Duration::from_millis(200);

/// Runs `work` while a bar on stderr shows `progress` counted in `unit`,
/// when stderr is a terminal (nothing otherwise: a pipe or a log gets no
/// bar). The ETA is [`stats::eta`]'s, from progress sampled every TICK.
pub fn with_progress<T>(progress: &Progress, unit: &str, work: impl FnOnce() -> T) -> T {
    if !std::io::stderr().is_terminal() {
        return work();
    }
    let template = format!("{{prefix}} {{wide_bar}} {{pos}}/{{len}} {unit}, {{msg}}");
    let bar = bar(0, &template);
    let (stop, stopped) = mpsc::channel::<()>();
    let out = std::thread::scope(|scope| {
        let shown = bar.clone();
        scope.spawn(move || watch(progress, &shown, &stopped));
        let out = work();
        drop(stop);
        out
    });
    bar.finish_and_clear();
    out
}

/// Redraws `bar` every TICK until `stopped` says the work is over.
fn watch(progress: &Progress, bar: &ProgressBar, stopped: &mpsc::Receiver<()>) {
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let (done, total) = progress.counts();
        samples.push((start.elapsed().as_secs_f64(), done));
        // Drawn once there is a plan: an empty one would show as complete.
        if total > 0 {
            let eta = stats::eta(&samples, total).map_or_else(
                || "ETA once requests complete".to_string(),
                |s| format!("ETA {}", HumanDuration(Duration::from_secs_f64(s.clamp(0.0, 1e9)))),
            );
            bar.set_prefix(phase_label(progress.phase()));
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(eta);
        }
        if stopped.recv_timeout(TICK) != Err(RecvTimeoutError::Timeout) {
            return;
        }
    }
}

fn phase_label(phase: BenchPhase) -> &'static str {
    match phase {
        BenchPhase::Backup => "backup read (untimed)",
        BenchPhase::Timed => "timing",
        BenchPhase::Locate => "probe: finding fast offsets",
        BenchPhase::Knee => "probe: finding the smallest fast size",
        BenchPhase::Sweep => "probe: sweeping the offsets",
    }
}
