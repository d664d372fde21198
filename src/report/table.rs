//! Tables in the manner of util-linux's libsmartcols (lsblk, partx): the
//! columns are data, so `-o` picks from them and `--output help` lists
//! them; cells are padded, wrapped at word boundaries to a width, or raw.

use std::fmt::Write;

/// One column a command can print.
pub struct Column<R> {
    /// The name `-o` takes and the header shows (UPPERCASE).
    pub name: &'static str,
    /// One line for `--output help`.
    pub about: &'static str,
    pub kind: ColumnKind,
    /// Printed without `-o`.
    pub default: bool,
    /// The cell of a row.
    pub value: fn(&R, Units) -> String,
}

impl<R> Column<R> {
    /// A column printed by default.
    pub fn new(
        name: &'static str,
        about: &'static str,
        kind: ColumnKind,
        value: fn(&R, Units) -> String,
    ) -> Column<R> {
        Column { name, about, kind, default: true, value }
    }

    /// Printed only when `-o` names it.
    pub fn on_request(self) -> Column<R> {
        Column { default: false, ..self }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ColumnKind {
    Text,
    /// Right-aligned.
    Number,
    /// A verdict word, coloured by what it says.
    Verdict,
    /// Long free text: wrapped to the width left, or under its row.
    Free,
    /// A shell command: laid out as text; raw output writes it as is, so
    /// that it runs when pasted (only control characters escaped).
    Command,
}

/// How sizes and offsets are printed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Units {
    /// Sizes in binary units (KiB, MiB, ...), positions in sectors.
    #[default]
    Human,
    /// Both in bytes (`--bytes`).
    Bytes,
}

impl Units {
    /// A size or offset of `bytes`: binary units, or the exact count.
    pub fn size(self, bytes: u64) -> String {
        match self {
            Units::Human => crate::units::human_size(bytes),
            Units::Bytes => bytes.to_string(),
        }
    }
}

/// How a table is laid out.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Style {
    pub units: Units,
    pub noheadings: bool,
    /// One space between cells, no padding or wrapping, special characters
    /// escaped as `\xHH`.
    pub raw: bool,
    /// Fit lines to this many columns; None prints every cell whole.
    pub width: Option<usize>,
    pub color: bool,
}

/// A `-o` name that no column has.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown column {name:?}; the columns are: {valid}")]
pub struct UnknownColumn {
    pub name: String,
    pub valid: String,
}

/// The columns `spec` names (comma-separated, any case; a leading `+`
/// adds them to the default set), or the default set when None. Added
/// columns go before the free text that ends the default set: it stays
/// last, unpadded on a pipe and wrapped or under its row on a terminal.
pub fn select<'c, R>(
    columns: &'c [Column<R>],
    spec: Option<&str>,
) -> Result<Vec<&'c Column<R>>, UnknownColumn> {
    let defaults = || columns.iter().filter(|c| c.default).collect::<Vec<_>>();
    let Some(spec) = spec else { return Ok(defaults()) };
    let (mut chosen, names) = match spec.strip_prefix('+') {
        Some(more) => (defaults(), more),
        None => (Vec::new(), spec),
    };
    let adding = spec.starts_with('+');
    let mut at = chosen.iter().rposition(|c| c.kind != ColumnKind::Free).map_or(0, |i| i + 1);
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let column = columns.iter().find(|c| c.name.eq_ignore_ascii_case(name));
        let column = column.ok_or_else(|| UnknownColumn {
            name: name.to_string(),
            valid: columns.iter().map(|c| c.name).collect::<Vec<_>>().join(", "),
        })?;
        // Added free text goes last, after the default set's.
        if adding && column.kind != ColumnKind::Free {
            chosen.insert(at, column);
            at += 1;
        } else {
            chosen.push(column);
        }
    }
    Ok(chosen)
}

/// `--output help`: every column with its description, defaults marked.
pub fn help<R>(columns: &[Column<R>]) -> String {
    let wide = columns.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::from("Available output columns (* printed by default):\n");
    for c in columns {
        let mark = if c.default { '*' } else { ' ' };
        let _ = writeln!(out, " {mark} {:<wide$}  {}", c.name, c.about);
    }
    out
}

/// Free text narrower than this goes under its row instead.
const MIN_FREE: usize = 40;
/// How far text put under its row is indented.
const UNDER: usize = 4;

/// The table of `rows`, each line starting with `indent` spaces, where a
/// row that `marked` picks has a `*` instead of the first one.
pub fn render<R>(
    columns: &[&Column<R>],
    rows: &[R],
    style: &Style,
    indent: usize,
    marked: fn(&R) -> bool,
) -> String {
    let cells: Vec<Vec<String>> =
        rows.iter().map(|r| columns.iter().map(|c| (c.value)(r, style.units)).collect()).collect();
    if style.raw {
        return raw(columns, &cells, style);
    }
    let mut widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let header = if style.noheadings { 0 } else { c.name.len() };
            cells.iter().map(|row| width(&row[i])).fold(header, usize::max)
        })
        .collect();
    let under = fit(columns, &mut widths, style.width, indent);
    let shown = if under { columns.len() - 1 } else { columns.len() };
    let mut out = String::new();
    if !style.noheadings {
        let names: Vec<String> = columns.iter().map(|c| c.name.to_string()).collect();
        line(&mut out, &pad_row(columns, &names[..shown], &widths, false), indent, false);
    }
    for (row, values) in rows.iter().zip(&cells) {
        let wrapped: Vec<Vec<String>> = (0..shown)
            .map(|i| match columns[i].kind {
                ColumnKind::Free => wrap(&values[i], widths[i]),
                _ => vec![values[i].clone()],
            })
            .collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(1).max(1);
        for n in 0..height {
            let part: Vec<String> =
                wrapped.iter().map(|w| w.get(n).cloned().unwrap_or_default()).collect();
            let text = pad_row(columns, &part, &widths, style.color);
            line(&mut out, &text, indent, n == 0 && marked(row));
        }
        if under && !values[shown].is_empty() {
            let room = style.width.unwrap_or(0).saturating_sub(indent + UNDER);
            for text in wrap(&values[shown], room) {
                line(&mut out, &text, indent + UNDER, false);
            }
        }
    }
    out
}

/// Shrink the free-text columns to fit `width`; true when the last column
/// is free text with too little room, and goes under its row instead.
fn fit<R>(
    columns: &[&Column<R>],
    widths: &mut [usize],
    width: Option<usize>,
    indent: usize,
) -> bool {
    let Some(width) = width else { return false };
    let total = indent + widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    let free: Vec<usize> =
        (0..columns.len()).filter(|&i| columns[i].kind == ColumnKind::Free).collect();
    if total <= width || free.is_empty() {
        return false;
    }
    let fixed = total - free.iter().map(|&i| widths[i]).sum::<usize>();
    let room = width.saturating_sub(fixed) / free.len();
    if room < MIN_FREE && free == [columns.len() - 1] {
        return true;
    }
    for i in free {
        widths[i] = widths[i].min(room.max(MIN_FREE));
    }
    false
}

/// Cells padded to their widths (numbers to the right), verdicts
/// coloured when `color`, joined by two spaces.
fn pad_row<R>(columns: &[&Column<R>], cells: &[String], widths: &[usize], color: bool) -> String {
    let mut out = String::new();
    for (i, text) in cells.iter().enumerate() {
        if i > 0 {
            out.push_str("  ");
        }
        let gap = " ".repeat(widths[i].saturating_sub(width(text)));
        let shown = match columns[i].kind {
            ColumnKind::Verdict if color => paint(text),
            _ => text.clone(),
        };
        if columns[i].kind == ColumnKind::Number {
            out.push_str(&gap);
            out.push_str(&shown);
        } else {
            out.push_str(&shown);
            out.push_str(&gap);
        }
    }
    out
}

fn line(out: &mut String, text: &str, indent: usize, marked: bool) {
    let mut margin = " ".repeat(indent);
    if marked && indent > 0 {
        margin.replace_range(0..1, "*");
    }
    let _ = writeln!(out, "{margin}{}", text.trim_end());
}

/// lsblk's raw output: one space between cells, nothing padded.
fn raw<R>(columns: &[&Column<R>], cells: &[Vec<String>], style: &Style) -> String {
    let mut out = String::new();
    if !style.noheadings {
        let names: Vec<&str> = columns.iter().map(|c| c.name).collect();
        let _ = writeln!(out, "{}", names.join(" "));
    }
    for row in cells {
        let shown: Vec<String> = row
            .iter()
            .zip(columns)
            .map(|(text, c)| match c.kind {
                ColumnKind::Verdict if style.color => paint(&escape(text)),
                ColumnKind::Command => escape_control(text),
                _ => escape(text),
            })
            .collect();
        let _ = writeln!(out, "{}", shown.join(" "));
    }
    out
}

/// Blanks, backslashes and control characters as `\xHH`, as lsblk -r
/// writes them, so that every cell is one word.
pub fn escape(text: &str) -> String {
    escape_if(text, |c| c.is_whitespace() || c.is_control() || c == '\\')
}

/// Control characters alone as `\xHH`: one row stays one line.
fn escape_control(text: &str) -> String {
    escape_if(text, char::is_control)
}

fn escape_if(text: &str, special: impl Fn(char) -> bool) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if special(c) {
            let mut bytes = [0u8; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                let _ = write!(out, "\\x{b:02x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Green, yellow or red by what the verdict says.
fn paint(text: &str) -> String {
    let code = match text {
        "aligned" => "32",
        "suboptimal" => "33",
        "misaligned" => "31",
        _ => return text.to_string(),
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Columns a text takes on a terminal.
fn width(text: &str) -> usize {
    text.chars().count()
}

/// `text` in lines of at most `room` columns, broken at spaces (runs of
/// spaces within a line are kept); a word longer than that has a line of
/// its own, whole.
pub fn wrap(text: &str, room: usize) -> Vec<String> {
    hang(text, room, room)
}

/// [`wrap`] with room for `first` columns on the first line, `rest` after.
fn hang(text: &str, first: usize, rest: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let room = if lines.is_empty() { first } else { rest };
        if !current.is_empty() && width(&current) + 1 + width(word) > room {
            lines.push(std::mem::take(&mut current).trim_end().to_string());
        }
        if !current.is_empty() {
            current.push(' ');
        } else if word.is_empty() {
            continue;
        }
        current.push_str(word);
    }
    if !current.is_empty() || lines.is_empty() {
        lines.push(current);
    }
    lines
}

/// A paragraph: `first` before its first line, `rest` columns of spaces
/// before the others, within `limit` columns when there is a limit.
pub fn fill(first: &str, rest: usize, text: &str, limit: Option<usize>) -> String {
    let Some(limit) = limit else { return format!("{first}{text}\n") };
    let lines = hang(text, limit.saturating_sub(width(first)), limit.saturating_sub(rest));
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        let margin = if i == 0 { first.to_string() } else { " ".repeat(rest) };
        let _ = writeln!(out, "{margin}{l}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Row(&'static str, u64, &'static str);

    fn columns() -> Vec<Column<Row>> {
        vec![
            Column {
                name: "NAME",
                about: "a name",
                kind: ColumnKind::Text,
                default: true,
                value: |r, _| r.0.into(),
            },
            Column {
                name: "SIZE",
                about: "a size",
                kind: ColumnKind::Number,
                default: true,
                value: |r, u| u.size(r.1),
            },
            Column {
                name: "NOTE",
                about: "words",
                kind: ColumnKind::Free,
                default: false,
                value: |r, _| r.2.into(),
            },
        ]
    }

    #[test]
    fn selection() {
        let all = columns();
        let names = |spec| select(&all, spec).map(|c| c.iter().map(|c| c.name).collect::<Vec<_>>());
        assert_eq!(names(None), Ok(vec!["NAME", "SIZE"]));
        assert_eq!(names(Some("note,Name")), Ok(vec!["NOTE", "NAME"]));
        assert_eq!(names(Some("+NOTE")), Ok(vec!["NAME", "SIZE", "NOTE"]));
        let err = names(Some("NAME,BOGUS")).unwrap_err();
        assert_eq!((err.name.as_str(), err.valid.as_str()), ("BOGUS", "NAME, SIZE, NOTE"));
    }

    /// Found by a user: `-o +NR,END,SECTORS` put the added columns after
    /// DETAIL, past column 80 on a terminal and near column 430 on a pipe.
    #[test]
    fn added_columns_go_before_the_free_text_that_ends_the_defaults() {
        let mut all = columns();
        all[2].default = true;
        let names = |spec| select(&all, spec).map(|c| c.iter().map(|c| c.name).collect::<Vec<_>>());
        assert_eq!(names(Some("+SIZE,name")), Ok(vec!["NAME", "SIZE", "SIZE", "NAME", "NOTE"]));
        assert_eq!(names(Some("NOTE,SIZE")), Ok(vec!["NOTE", "SIZE"]), "as asked without +");
        let rows = [Row("sda1", 1 << 20, "one two three four five six seven eight nine ten")];
        let cols = select(&all, Some("+SIZE")).expect("columns");
        let piped = render(&cols, &rows, &Style::default(), 0, |_| false);
        let widest = piped.lines().map(width).max();
        assert_eq!(widest, Some(width(piped.lines().nth(1).expect("row"))), "{piped}");
        assert!(piped.lines().all(|l| l == l.trim_end()), "nothing padded: {piped}");
        let fitted = Style { width: Some(30), ..Style::default() };
        let text = render(&cols, &rows, &fitted, 2, |_| false);
        assert!(text.lines().all(|l| width(l) <= 30), "{text}");
    }

    #[test]
    fn wrapping_keeps_words_whole() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefgh ij", 4), ["abcdefgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
        assert_eq!(wrap("a  b   c", 4), ["a  b", "c"]);
        assert_eq!(fill("> ", 1, "aa bb cc dd", Some(6)), "> aa\n bb cc\n dd\n");
        assert_eq!(fill("> ", 1, "aa bb", None), "> aa bb\n");
    }

    #[test]
    fn layouts() {
        let all = columns();
        let cols = select(&all, Some("NAME,SIZE,NOTE")).expect("columns");
        let rows = [Row("sda1", 1 << 20, "one two three four five six seven eight nine ten")];
        let style = Style::default();
        assert_eq!(
            render(&cols, &rows, &style, 0, |_| false),
            "NAME   SIZE  NOTE\nsda1  1 MiB  one two three four five six seven eight nine ten\n"
        );
        let raw = Style { raw: true, units: Units::Bytes, ..style };
        assert_eq!(
            render(&cols, &rows, &raw, 0, |_| false),
            "NAME SIZE NOTE\nsda1 1048576 one\\x20two\\x20three\\x20four\\x20five\\x20six\\x20seven\\x20eight\\x20nine\\x20ten\n"
        );
        let narrow = Style { width: Some(60), noheadings: true, ..style };
        assert_eq!(
            render(&cols, &rows, &narrow, 2, |_| true),
            "* sda1  1 MiB  one two three four five six seven eight nine\n               ten\n"
        );
        let tiny = Style { width: Some(24), ..narrow };
        assert_eq!(
            render(&cols, &rows, &tiny, 0, |_| false),
            "sda1  1 MiB\n    one two three four\n    five six seven eight\n    nine ten\n"
        );
    }
}
