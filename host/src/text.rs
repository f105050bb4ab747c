//! Plugin-supplied text on its way out of the host. Two rules, each applied in
//! one place:
//!
//! - [`bounded`]: every piece of text a plugin hands back across the WIT
//!   boundary (outcome and error messages, its self-description) is cut to
//!   [`MAX_PLUGIN_TEXT`] bytes when it arrives, so a 4 MiB message cannot grow
//!   the log, `/status` or a report.
//! - [`inert`]: before a log line, a tracing field or a terminal, control
//!   characters are escaped, so a newline cannot forge a host log line and an
//!   escape sequence cannot drive the operator's terminal.
//! - [`peer_answer`]: what a peer (a registry, a cloud API) answered, for an
//!   error message: its first [`MAX_PEER_TEXT`] bytes, inert.

use std::borrow::Cow;

/// The most bytes the host keeps of one piece of plugin text (marker included).
pub const MAX_PLUGIN_TEXT: usize = 4096;

/// `text` cut to at most [`MAX_PLUGIN_TEXT`] bytes, on a character boundary,
/// ending with a marker naming the size the plugin sent:
/// `... … (cut: 4194304 bytes)`.
pub fn bounded(text: String) -> String {
    cut(text, MAX_PLUGIN_TEXT)
}

/// `text` cut to at most `max` bytes (at least 64), as [`bounded`] cuts it.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let marker = format!("… (cut: {} bytes)", text.len());
    let mut end = max.max(64) - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&marker);
    text
}

/// The most bytes of a peer's answer an error message shows (marker included).
pub const MAX_PEER_TEXT: usize = 512;

/// `body` (a peer's answer, or its first bytes) as an error message shows
/// it: at most [`MAX_PEER_TEXT`] bytes, control characters escaped, cut
/// with a marker when there was more. Every peer body or message shown in a
/// load error, `/status`, a log line or a capability error passes here.
pub fn peer_answer(body: &[u8]) -> String {
    let shown = &body[..body.len().min(MAX_PEER_TEXT)];
    let text = inert(&String::from_utf8_lossy(shown)).into_owned();
    if body.len() <= MAX_PEER_TEXT && text.len() <= MAX_PEER_TEXT {
        return text;
    }
    let marker = "… (cut)";
    let mut text = text;
    let mut end = MAX_PEER_TEXT - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(marker);
    text
}

pub use tend_rules::text::inert;

/// JSON text (as serde_json writes it) made safe for a terminal: serde_json
/// escapes the C0 controls inside strings but writes DEL and the C1 controls
/// (U+0080..U+009F, `\u{9b}` is a CSI) raw; those become `\u00XX` escapes,
/// which read back as the same JSON. Structural newlines stay.
pub fn inert_json(json: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n';
    if !json.chars().any(unsafe_char) {
        return Cow::Borrowed(json);
    }
    Cow::Owned(
        json.chars()
            .map(|c| match c {
                c if unsafe_char(c) => format!("\\u{:04x}", c as u32),
                c => c.to_string(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(inert("plain /etc/x ü"), Cow::Borrowed(_)));
        assert_eq!(inert("a\nFORGED"), "a\\nFORGED");
        assert_eq!(inert("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(inert("\u{9b}31m\u{7}\r"), "\\u{9b}31m\\u{7}\\r");
    }

    #[test]
    fn long_text_is_cut_on_a_char_boundary_with_a_marker() {
        let short = "ü".repeat(MAX_PLUGIN_TEXT / 2);
        assert_eq!(bounded(short.clone()), short, "exactly the limit is kept");
        let long = "ü".repeat(2 * 1024 * 1024);
        let cut = bounded(long);
        assert!(cut.len() <= MAX_PLUGIN_TEXT, "{}", cut.len());
        assert!(
            cut.ends_with("… (cut: 4194304 bytes)"),
            "{}",
            &cut[cut.len() - 40..]
        );
        assert!(cut.starts_with("üü"));
        // Odd offsets: the cut never splits a character.
        for pad in 0..4 {
            let text = format!("{}{}", "a".repeat(pad), "€".repeat(MAX_PLUGIN_TEXT));
            let cut = bounded(text);
            assert!(cut.len() <= MAX_PLUGIN_TEXT && cut.contains("(cut: "));
        }
    }

    #[test]
    fn a_peer_answer_is_cut_and_inert() {
        assert_eq!(peer_answer(b"manifest unknown"), "manifest unknown");
        let mut hostile = b"x\n2026 INFO forged\x1b[2J".to_vec();
        hostile.resize(8 << 20, b'\n');
        let shown = peer_answer(&hostile);
        assert!(shown.len() <= MAX_PEER_TEXT, "{}", shown.len());
        assert!(
            shown.starts_with("x\\n2026 INFO forged\\u{1b}[2J\\n"),
            "{shown}"
        );
        assert!(shown.ends_with("… (cut)") && !shown.chars().any(char::is_control));
        // Escaping can grow short text past the bound: still cut.
        assert!(peer_answer(&[0x1b; 300]).len() <= MAX_PEER_TEXT);
        assert!(peer_answer("é".repeat(400).as_bytes()).len() <= MAX_PEER_TEXT);
    }

    #[test]
    fn json_keeps_its_meaning_and_loses_raw_controls() {
        let value = serde_json::json!({"message": "a\u{1b}]0;x\u{7}b\u{9b}c\u{7f}"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = inert_json(&text);
        assert!(!safe.chars().any(|c| c.is_control() && c != '\n'), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
