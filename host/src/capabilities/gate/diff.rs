//! What a planned content change looks like to an operator: a unified diff,
//! bounded so a plan of a large file stays readable (and small).

/// Lines of diff shown at most; the rest is counted.
const MAX_LINES: usize = 60;
/// Bytes of diff shown at most.
const MAX_BYTES: usize = 8 * 1024;

/// A unified diff of `old` (None: no file) to `new`, labelled with `path`.
pub fn unified(path: &str, old: Option<&[u8]>, new: &[u8]) -> String {
    let (Ok(old_text), Ok(new_text)) = (
        std::str::from_utf8(old.unwrap_or_default()),
        std::str::from_utf8(new),
    ) else {
        return format!(
            "binary content: {} -> {} bytes",
            old.map_or(0, <[u8]>::len),
            new.len()
        );
    };
    let from = if old.is_some() { path } else { "/dev/null" };
    let diff = similar::TextDiff::from_lines(old_text, new_text);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(from, path)
        .to_string();
    bound(&text)
}

fn bound(text: &str) -> String {
    let mut out = String::new();
    let total = text.lines().count();
    for (shown, line) in text.lines().enumerate() {
        if shown == MAX_LINES || out.len() + line.len() > MAX_BYTES {
            out.push_str(&format!("... ({} more diff lines)\n", total - shown));
            break;
        }
        // Control characters in file content must not drive the operator's terminal.
        out.extend(
            line.chars()
                .map(|c| if c.is_control() && c != '\t' { '?' } else { c }),
        );
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_changed_lines_with_context() {
        let diff = unified("/etc/x.toml", Some(b"a\nb\nc\n"), b"a\nB\nc\n");
        assert!(
            diff.starts_with("--- /etc/x.toml\n+++ /etc/x.toml\n"),
            "{diff}"
        );
        assert!(diff.contains("-b\n+B\n"), "{diff}");
        let new = unified("/etc/y", None, b"hello\n");
        assert!(new.starts_with("--- /dev/null\n+++ /etc/y\n"), "{new}");
        assert!(new.contains("+hello"), "{new}");
    }

    #[test]
    fn large_binary_and_hostile_content_stays_bounded_and_inert() {
        let big: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
        let diff = unified("/f", None, big.as_bytes());
        assert!(diff.lines().count() <= MAX_LINES + 1 && diff.len() <= MAX_BYTES + 100);
        assert!(diff.contains("more diff lines"), "{diff}");
        assert_eq!(
            unified("/f", Some(b"\xff"), b"x"),
            "binary content: 1 -> 1 bytes"
        );
        assert!(!unified("/f", None, b"\x1b[2Jgone\n").contains('\x1b'));
    }
}
