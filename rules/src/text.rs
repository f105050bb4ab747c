//! Plugin and peer text made inert before it is shown: one rule, shared by the
//! host (its log, `/status`, terminals) and the SDK fakes (their recorded
//! actions), so both show a plugin's text alike.

use std::borrow::Cow;

/// `text` with every control character escaped (`\n`, `\u{1b}`, ...): a
/// newline cannot forge a log line, an escape sequence cannot drive a
/// terminal.
pub fn inert(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| match c {
                c if !c.is_control() => c.to_string(),
                '\n' => "\\n".to_string(),
                '\r' => "\\r".to_string(),
                '\t' => "\\t".to_string(),
                c => c.escape_unicode().to_string(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(inert("plain"), Cow::Borrowed("plain")));
        assert_eq!(
            inert("a\nINFO forged\t\u{1b}[2J"),
            "a\\nINFO forged\\t\\u{1b}[2J"
        );
    }
}
