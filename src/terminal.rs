//! Text on its way to an operator's terminal: provider-controlled strings escaped, and the
//! plain aligned tables the inspection commands print.
//!
//! Invariant: every cell of a [`Table`] goes through [`escape`], so no byte a provider chose
//! can move the cursor, clear the screen, set a window title, or reorder what is shown
//! (Trojan Source, CVE-2021-42574). Commands escape the other provider strings they print
//! themselves. JSON goes through [`write_json`]: serde_json escapes C0 controls but writes
//! DEL, C1 controls and bidi characters raw, and `--json` output is read on terminals too.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

/// The widest a table cell is printed, in characters; longer text ends in `…`. Wide enough
/// for a UUID event id or a short error, narrow enough that a row fits a wide terminal.
pub const MAX_CELL: usize = 60;

/// Spaces between table columns.
const GAP: &str = "  ";

/// `s` with every character that could act on a terminal written out as visible text:
///
/// - `\t`, `\n`, `\r` as themselves, other C0 controls and DEL as `\x1b`-style escapes;
/// - C1 controls (U+0080–U+009F, which some terminals obey like `ESC [`) as `\u{9b}`;
/// - bidi embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069, and the marks
///   U+200E, U+200F, U+061C), which reorder what is shown, as `\u{202e}`;
/// - zero-width and invisible characters (U+200B–U+200D, U+2060, U+FEFF), which hide text
///   inside text, and the line and paragraph separators U+2028/U+2029.
///
/// A backslash is left alone, so `\n` written by the provider and an escaped newline look
/// the same: the escaping is for safety, not a reversible encoding (JSON output is that),
/// and doubling backslashes would make every JSON body unreadable.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_where(s, needs_escape)
}

/// Like [`escape`], but keeps line feeds and tabs, for multi-line text shown as a block (a
/// body). Carriage returns are still escaped: `\r` alone rewrites the line it ends.
pub fn escape_block(s: &str) -> Cow<'_, str> {
    escape_where(s, |c| needs_escape(c) && c != '\n' && c != '\t')
}

/// Only control characters (C0, DEL, C1) written out, in the same way: for text that is
/// not shown on a terminal but cannot hold them, such as a command's environment (no NUL
/// can be in one). Invisible and bidi characters stay as they are.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    escape_where(s, char::is_control)
}

/// `s` with every character for which `unsafe_char` holds written out as visible text.
fn escape_where(s: &str, unsafe_char: impl Fn(char) -> bool) -> Cow<'_, str> {
    let Some(first) = s.find(&unsafe_char) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 16);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        // Writing to a String cannot fail.
        let _ = match c {
            '\t' => write!(out, "\\t"),
            '\n' => write!(out, "\\n"),
            '\r' => write!(out, "\\r"),
            '\0'..='\x1f' | '\x7f' => write!(out, "\\x{:02x}", c as u32),
            _ => write!(out, "\\u{{{:x}}}", c as u32),
        };
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() // C0, DEL and C1
        || matches!(
            c,
            '\u{061c}'                  // Arabic letter mark (bidi)
            | '\u{200b}'..='\u{200f}'   // zero-width space/joiners, LRM, RLM
            | '\u{2028}'..='\u{2029}'   // line and paragraph separators
            | '\u{202a}'..='\u{202e}'   // bidi embeddings and overrides
            | '\u{2060}'                // word joiner
            | '\u{2066}'..='\u{2069}'   // bidi isolates
            | '\u{feff}' // zero-width no-break space (BOM)
        )
}

/// Writes `value` as pretty JSON and a newline, with DEL, C1 controls, bidi and invisible
/// characters (the ones [`escape`] touches that serde_json leaves raw) written as `\uXXXX`.
/// The JSON means the same: such characters can only occur inside strings, where `\uXXXX`
/// is the same character, so a program reading it gets the provider's exact text while a
/// terminal showing it stays safe.
pub fn write_json(out: &mut impl Write, value: &impl serde::Serialize) -> io::Result<()> {
    out.write_all(json_safe(&serde_json::to_string_pretty(value)?).as_bytes())
}

/// [`write_json`] on one line: compact JSON and a newline, for a stream of objects (NDJSON,
/// `events --follow --json`), escaped the same way.
pub fn write_json_line(out: &mut impl Write, value: &impl serde::Serialize) -> io::Result<()> {
    out.write_all(json_safe(&serde_json::to_string(value)?).as_bytes())
}

/// serde_json's `text` with what it leaves raw written as `\uXXXX`, and a newline.
fn json_safe(text: &str) -> String {
    let mut safe = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        // C0 controls are left alone: inside strings serde_json has escaped them already,
        // so any left are the pretty-printer's own newlines.
        if needs_escape(c) && c > '\x1f' {
            // Everything escaped here is in the BMP: one `\uXXXX` each, no surrogates.
            let _ = write!(safe, "\\u{:04x}", c as u32);
        } else {
            safe.push(c);
        }
    }
    safe.push('\n');
    safe
}

/// `s` escaped and cut to [`MAX_CELL`] characters, the last one `…` when cut.
pub fn cell(s: &str) -> String {
    let escaped = escape(s);
    if escaped.chars().count() <= MAX_CELL {
        return escaped.into_owned();
    }
    let mut cut: String = escaped.chars().take(MAX_CELL - 1).collect();
    cut.push('…');
    cut
}

/// A table of plain columns padded with spaces, the header row in capitals. No colour and no
/// borders, so that it reads the same in a terminal, a pipe, or a log.
///
/// Widths count characters, not terminal columns: a wide (CJK) or combining character can
/// misalign a row. Doing better needs a Unicode width table (a dependency) for a cosmetic
/// gain; every value is escaped regardless.
#[derive(Debug)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|h| h.to_uppercase()).collect()],
        }
    }

    /// Adds a row; each value is escaped and capped by [`cell`].
    pub fn row<S: AsRef<str>>(&mut self, values: impl IntoIterator<Item = S>) {
        self.rows
            .push(values.into_iter().map(|v| cell(v.as_ref())).collect());
    }

    /// Rows added after the header.
    pub fn len(&self) -> usize {
        self.rows.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes every row, columns aligned; the last column is not padded.
    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (w, v) in widths.iter_mut().zip(row) {
                *w = (*w).max(v.chars().count());
            }
        }
        for row in &self.rows {
            let mut line = String::new();
            for (i, v) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(v);
                } else {
                    let pad = widths[i] - v.chars().count();
                    line.push_str(v);
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(GAP);
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in [
            "",
            "evt_123",
            "invoice.paid",
            "café ünïcödé 日本",
            r"C:\path \n",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(t) if t == s), "{s:?}");
        }
    }

    #[test]
    fn controls_are_written_out() {
        assert_eq!(escape("a\x1b[2Jb"), r"a\x1b[2Jb");
        assert_eq!(escape("a\tb\nc\rd"), r"a\tb\nc\rd");
        assert_eq!(escape("\0\x07\x7f"), r"\x00\x07\x7f");
        // C1: U+009B is a one-character CSI on some terminals.
        assert_eq!(escape("x\u{9b}31m\u{85}"), r"x\u{9b}31m\u{85}");
        // An OSC 8 hyperlink or window title loses its ESC and BEL.
        assert_eq!(escape("\x1b]0;pwned\x07"), r"\x1b]0;pwned\x07");
    }

    #[test]
    fn bidi_and_invisible_characters_are_written_out() {
        assert_eq!(escape("abc\u{202e}fed"), r"abc\u{202e}fed");
        for c in ('\u{202a}'..='\u{202e}')
            .chain('\u{2066}'..='\u{2069}')
            .chain('\u{200b}'..='\u{200f}')
            .chain(['\u{feff}', '\u{2060}', '\u{061c}', '\u{2028}', '\u{2029}'])
        {
            let s = format!("a{c}b");
            let e = escape(&s);
            assert_eq!(e, format!("a\\u{{{:x}}}b", c as u32));
            assert!(!e.contains(c));
        }
    }

    #[test]
    fn nothing_escaped_contains_a_control_or_bidi_character() {
        let all: String = ('\0'..='\u{3000}').collect();
        let e = escape(&all);
        assert!(!e.chars().any(needs_escape), "{e}");
        let b = escape_block(&all);
        assert!(
            !b.chars().any(|c| needs_escape(c) && c != '\n' && c != '\t'),
            "{b}"
        );
    }

    #[test]
    fn json_escapes_what_serde_json_leaves_raw_and_means_the_same() {
        let value = serde_json::json!({"type": "a\x1b[2J\u{202e}b\u{9b}\x7f\u{feff}", "n": 1});
        let mut out = Vec::new();
        write_json(&mut out, &value).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text
                .chars()
                .any(|c| needs_escape(c) && c != '\n' && c != ' '),
            "{text}"
        );
        assert!(
            text.contains(r"a\u001b[2J\u202eb\u009b\u007f\ufeff"),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);

        let mut line = Vec::new();
        write_json_line(&mut line, &value).unwrap();
        let line = String::from_utf8(line).unwrap();
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert!(
            line.ends_with('\n') && line.contains(r"\u202eb\u009b"),
            "{line}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&line).unwrap(),
            value
        );
    }

    #[test]
    fn block_escaping_keeps_lines() {
        assert_eq!(
            escape_block("{\n\t\"a\": 1\r\n}\x1b[0m"),
            "{\n\t\"a\": 1\\r\n}\\x1b[0m"
        );
    }

    #[test]
    fn long_cells_are_cut_with_an_ellipsis() {
        let long = "x".repeat(100);
        let c = cell(&long);
        assert_eq!(c.chars().count(), MAX_CELL);
        assert!(c.ends_with('…'));
        assert_eq!(cell("short"), "short");
        // Cut after escaping, so an escape is never half its marker.
        assert!(!cell(&"\x1b".repeat(40)).contains('\x1b'));
    }

    #[test]
    fn tables_align_columns_and_escape_cells() {
        let mut t = Table::new(&["id", "event id", "status"]);
        t.row(["1", "evt_a", "delivered"]);
        t.row(["12", "evil\x1b[2J\u{202e}", "dead"]);
        assert_eq!(t.len(), 2);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "ID  EVENT ID             STATUS\n\
             1   evt_a                delivered\n\
             12  evil\\x1b[2J\\u{202e}  dead\n"
        );
    }
}

/// How often a [`Progress`] line is redrawn at most: often enough to look alive, rarely
/// enough that drawing never costs more than the work.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A one-line report of long work (`prune`, `backup`, `replay`) on stderr, redrawn in place.
/// Only on a terminal: piped or under systemd, stderr stays quiet, and stdout (what a
/// script reads) is never touched.
#[derive(Debug)]
pub struct Progress {
    on: bool,
    what: &'static str,
    total: Option<u64>,
    drawn: Option<std::time::Instant>,
}

impl Progress {
    /// `what` names the work ("pruning payloads"); `total`, where known, gives a percentage.
    pub fn new(what: &'static str, total: Option<u64>) -> Progress {
        use std::io::IsTerminal as _;
        Progress {
            on: io::stderr().is_terminal(),
            what,
            total,
            drawn: None,
        }
    }

    /// Reports `done` units so far; drawn only every [`PROGRESS_EVERY`].
    pub fn set(&mut self, done: u64) {
        if !self.on || self.drawn.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
            return;
        }
        self.drawn = Some(std::time::Instant::now());
        let line = match self.total {
            Some(total) if total > 0 => {
                format!("{}: {done} of {total} ({}%)", self.what, done * 100 / total)
            }
            _ => format!("{}: {done}", self.what),
        };
        // `\r` and erase-line: the next draw, or the final output, starts on a clean line.
        eprint!("\r\x1b[K{line}");
    }

    /// Clears the line, so what the command prints next starts at the margin.
    pub fn finish(self) {
        if self.on && self.drawn.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}
