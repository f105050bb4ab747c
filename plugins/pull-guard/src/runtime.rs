//! The runtime's pull progress deadline, with no I/O: which runtime has
//! `image_pull_progress_timeout`, where its config file keeps it, and the
//! edit that raises it while keeping the operator's comments and layout.

use std::time::Duration;
use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

const KEY: &str = "image_pull_progress_timeout";

/// A containerd release: (major, minor).
pub(crate) type Release = (u64, u64);

/// The first release with `image_pull_progress_timeout`.
const FIRST_WITH_SETTING: Release = (1, 7);

/// Major and minor of "1.6.20", "v1.7.13", "2.0.0-rc.1", "1.7".
pub(crate) fn release(text: &str) -> Option<Release> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let mut numbers = text.splitn(3, ['.', '-', '+']);
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next()?.parse().ok()?;
    Some((major, minor))
}

/// What the runtime's config can do for the progress deadline.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Support {
    /// A containerd that has the setting.
    Setting(Release),
    /// Why not, for the outcome.
    Unsupported(String),
}

/// Whether runtime `name` at `version` (as CRI reports them) has the setting.
pub(crate) fn support(name: &str, version: &str) -> Support {
    if name != "containerd" {
        return Support::Unsupported(format!(
            "{name} {version} is not handled (only containerd's {KEY} is): relying on pre-pulls"
        ));
    }
    match release(version) {
        Some(release) if release >= FIRST_WITH_SETTING => Support::Setting(release),
        Some(_) => Support::Unsupported(format!(
            "containerd {version} has no {KEY} setting (it came with 1.7): relying on pre-pulls"
        )),
        None => Support::Unsupported(format!(
            "containerd version {version:?} is not understood: set runtime-config.version (\"1.7\", \"2.0\")"
        )),
    }
}

/// What the config file needs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Edit {
    /// The value (as written) is already at least the wanted one, or 0 (no deadline).
    Kept(String),
    /// `text` raises it from `from` (None: unset) to `to`.
    Raised {
        from: Option<String>,
        to: String,
        text: String,
    },
}

/// Raise `image_pull_progress_timeout` to at least `wanted` in the config
/// file `text` of containerd `release`; never lower it. The table depends on
/// the file's `version`: 2 (containerd 1.7, and 2.x migrates it) keeps it in
/// `[plugins."io.containerd.grpc.v1.cri"]`, 3 (containerd 2.x) in
/// `[plugins."io.containerd.cri.v1.images"]`; an empty file gets the
/// version the release writes. Err says why the file is left alone.
pub(crate) fn raise(text: &str, release: Release, wanted: Duration) -> Result<Edit, String> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| format!("is not valid TOML: {}", e.message()))?;
    // What stays above the new settings of a file with comments only.
    let mut preamble = String::new();
    let version = match doc.get("version") {
        Some(item) => item
            .as_integer()
            .ok_or_else(|| "has a version that is not a number".to_string())?,
        None if doc.is_empty() => {
            if !text.trim().is_empty() {
                preamble = format!("{}\n", text.trim_end());
                doc.set_trailing("");
            }
            let version = if release.0 >= 2 { 3 } else { 2 };
            doc.insert("version", toml_edit::value(version));
            version
        }
        None => {
            return Err(
                "has no version key (config version 1): pull-guard edits version 2 and 3 configs only"
                    .into(),
            );
        }
    };
    let section = match version {
        2 => "io.containerd.grpc.v1.cri",
        3 if release.0 >= 2 => "io.containerd.cri.v1.images",
        3 => return Err("is config version 3, which needs containerd 2.0 or later".into()),
        other => {
            return Err(format!(
                "is config version {other}, which pull-guard does not edit"
            ));
        }
    };
    let not_a_table = |key: &str| format!("has a {key} that is not a table");
    let plugins = table_at(doc.as_item_mut(), "plugins").ok_or_else(|| not_a_table("plugins"))?;
    let section = table_at(plugins, section)
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| not_a_table(&format!("plugins.{section:?}")))?;
    let current = match section.get(KEY) {
        None => None,
        Some(item) => {
            let text = item
                .as_str()
                .ok_or_else(|| format!("has a {KEY} that is not a string"))?;
            let value = go_duration(text)
                .ok_or_else(|| format!("has {KEY} = {text:?}, which is not a duration"))?;
            if value.is_zero() || value >= wanted {
                return Ok(Edit::Kept(text.to_string()));
            }
            Some(text.to_string())
        }
    };
    let to = go_format(wanted);
    match section.get_mut(KEY) {
        // Keep the comment after the old value.
        Some(Item::Value(value)) => {
            let decor = value.decor().clone();
            *value = Value::from(to.as_str());
            *value.decor_mut() = decor;
        }
        _ => {
            // Indented like the table's other keys (the end of a key's
            // prefix, after any comment lines above it).
            let indent = section
                .iter()
                .filter(|(_, item)| item.is_value())
                .find_map(|(key, _)| {
                    let prefix = section.key(key)?.leaf_decor().prefix()?.as_str()?;
                    prefix.rsplit('\n').next().map(str::to_string)
                });
            section.insert(KEY, toml_edit::value(to.as_str()));
            if let (Some(indent), Some(mut key)) = (indent, section.key_mut(KEY)) {
                key.leaf_decor_mut().set_prefix(indent);
            }
        }
    }
    Ok(Edit::Raised {
        from: current,
        to,
        text: format!("{preamble}{doc}"),
    })
}

/// The table at `key` in `parent`, created when absent: `[parent.key]`
/// under a table, `{}` under an inline table. None when it is not a table.
fn table_at<'a>(parent: &'a mut Item, key: &str) -> Option<&'a mut Item> {
    let fresh = match &*parent {
        Item::Table(table) => {
            let mut fresh = Table::new();
            fresh.set_implicit(true);
            fresh.set_dotted(table.is_dotted());
            Item::Table(fresh)
        }
        Item::Value(Value::InlineTable(_)) => Item::Value(Value::InlineTable(InlineTable::new())),
        _ => return None,
    };
    let table = parent.as_table_like_mut()?;
    if !table.contains_key(key) {
        table.insert(key, fresh);
    }
    table.get_mut(key).filter(|item| item.is_table_like())
}

/// A Go duration, as containerd parses it: "5m0s", "1h30m", "1.5s",
/// "300ms", "0". None for anything else, negative durations included.
pub(crate) fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return None;
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut scale = unit_nanos;
        let mut fraction_nanos = 0;
        for digit in fraction.chars() {
            scale /= 10;
            fraction_nanos += u128::from(digit.to_digit(10)?) * scale;
        }
        nanos = nanos.checked_add(whole.checked_mul(unit_nanos)? + fraction_nanos)?;
        rest = after;
    }
    Some(Duration::from_nanos(u64::try_from(nanos).ok()?))
}

/// `duration` as Go writes it ("10m0s", "1h0m0s", "45s"), rounded up to
/// the second so what is written is never below what was asked.
pub(crate) fn go_format(duration: Duration) -> String {
    let secs = crate::seconds_up(duration);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
