//! A stored body, shown to a person: JSON laid out one value per line, other text as it is,
//! bytes that are not UTF-8 written out. What is shown is for reading; the exact bytes are
//! the download next to it.

use crate::terminal::escape_block;

/// The most of a body the event page shows inline; the download has all of it. Enough for
/// any webhook a person reads on screen, and a page stays quick to render and to scroll.
pub const SHOWN_BYTES: usize = 256 * 1024;

/// The deepest indentation a laid-out body gets. serde_json accepts 128 levels; indented
/// in full, a deeply nested 256 KiB body would become tens of megabytes of spaces. Deeper
/// values stay at this level, still one per line.
const MAX_INDENT: usize = 16;

/// How the body is shown: which form, and the text (still to be HTML-escaped by the page).
#[derive(Debug, PartialEq, Eq)]
pub struct Shown {
    pub form: BodyForm,
    pub text: String,
    /// True when only the first [`SHOWN_BYTES`] are shown.
    pub cut: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyForm {
    Json,
    Text,
    /// Not UTF-8: ASCII as itself, every other byte as `\xNN`.
    Bytes,
}

impl BodyForm {
    pub fn describe(self) -> &'static str {
        match self {
            BodyForm::Json => "JSON, laid out one value per line",
            BodyForm::Text => "text",
            BodyForm::Bytes => "not UTF-8: bytes outside ASCII written as \\xNN",
        }
    }
}

/// `body` for the page. Invisible and direction-changing characters are written out
/// ([`escape_block`]) so that what the page shows is what the bytes say.
pub fn show(body: &[u8]) -> Shown {
    let cut = body.len() > SHOWN_BYTES;
    let head = &body[..body.len().min(SHOWN_BYTES)];
    let parses = !cut && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    let (form, text) = match std::str::from_utf8(head) {
        Ok(text) if parses => (BodyForm::Json, reindent(text)),
        Ok(text) => (BodyForm::Text, text.to_owned()),
        // A cut can split a character: the part before it is still text.
        Err(e) if cut && e.error_len().is_none() => (
            BodyForm::Text,
            String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned(),
        ),
        // Line by line, so that the line breaks stay line breaks.
        Err(_) => (
            BodyForm::Bytes,
            head.split(|b| *b == b'\n')
                .map(|line| line.escape_ascii().to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    };
    Shown {
        form,
        text: escape_block(&text).into_owned(),
        cut,
    }
}

/// `json` (known to parse) with each member and element on a line of its own, indented
/// two spaces a level. Only whitespace between tokens changes: every string and number is
/// the provider's text as sent, where a parse and re-print would sort keys, re-encode
/// escapes and round large numbers.
pub fn reindent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 2);
    let mut depth = 0usize;
    let mut chars = json.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth.min(MAX_INDENT) {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push(c);
                while let Some(c) = chars.next() {
                    out.push(c);
                    match c {
                        '\\' => out.extend(chars.next()),
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
                // An empty object or array stays `{}` or `[]`.
                if let Some(close) = chars.next_if(|&n| n == '}' || n == ']') {
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            // JSON allows only ASCII whitespace between tokens, which the layout replaces.
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reindent_keeps_every_token_and_only_moves_whitespace() {
        let json = r#"{"b":1,"a":[1.10, 2e400 ,{}, [] ,"x\"y, {z}"],"c":{"d":null}}"#;
        let laid = reindent(json);
        assert_eq!(
            laid,
            "{\n  \"b\": 1,\n  \"a\": [\n    1.10,\n    2e400,\n    {},\n    [],\n    \
             \"x\\\"y, {z}\"\n  ],\n  \"c\": {\n    \"d\": null\n  }\n}"
        );
        // The same document, token for token.
        let a: serde_json::Value = serde_json::from_str(&json.replace("2e400", "2")).unwrap();
        let b: serde_json::Value = serde_json::from_str(&laid.replace("2e400", "2")).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bodies_are_shown_in_the_form_they_have() {
        assert_eq!(show(br#"{"a":1}"#).form, BodyForm::Json);
        assert_eq!(show(b"a=1&b=2").form, BodyForm::Text);
        let bytes = show(b"\xff\x00ok\nnext");
        assert_eq!(bytes.form, BodyForm::Bytes);
        assert_eq!(bytes.text, "\\xff\\x00ok\nnext");
        // Deep nesting is indented only so far.
        let deep = format!("{}0{}", "[".repeat(100), "]".repeat(100));
        let laid = show(deep.as_bytes());
        assert_eq!(laid.form, BodyForm::Json);
        assert!(laid.text.lines().all(|l| l.len() <= 2 * MAX_INDENT + 1));
        // A right-to-left override would reorder what the page shows.
        assert!(show("a\u{202e}b".as_bytes()).text.contains("\\u{202e}"));
        let big = vec![b'a'; SHOWN_BYTES + 10];
        let shown = show(&big);
        assert!(shown.cut);
        assert_eq!(shown.text.len(), SHOWN_BYTES);
    }
}
