//! Plugin-supplied text made inert before it reaches a log line or a terminal:
//! a newline cannot forge a host log line, an escape sequence cannot drive the
//! operator's terminal.

use std::borrow::Cow;

/// `text` with every control character escaped (`\n`, `\u{1b}`, ...).
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
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(inert("plain /etc/x ü"), Cow::Borrowed(_)));
        assert_eq!(inert("a\nFORGED"), "a\\nFORGED");
        assert_eq!(inert("\u{1b}[2J"), "\\u{1b}[2J");
    }
}
