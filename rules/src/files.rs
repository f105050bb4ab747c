//! Which granted root a plugin's path falls in: pure, so every rule is tested
//! without a filesystem.

use crate::{Refusal, shown};
use serde::{Deserialize, Deserializer, de::Error as _};
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// The longest path a plugin may name, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// The longest component of a path, in bytes (Linux's `NAME_MAX`).
pub const MAX_COMPONENT_LEN: usize = 255;

/// Why Tend's own `/proc` entries are refused: the host's refusal of
/// `/proc/<its pid>` ([`is_own_proc`]) says the same.
pub const OWN_PROC: &str = "Tend's own /proc entries (/proc/self, /proc/thread-self and /proc/<Tend's pid>: its environment, memory and file descriptors) are never granted, whatever the files grants say";

/// `{ path = "/etc/containerd/certs.d", write = true }`: a root the plugin may
/// read, and write when `write` is true.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGrant {
    #[serde(deserialize_with = "absolute_path")]
    pub path: PathBuf,
    #[serde(default)]
    pub write: bool,
}

impl FileGrant {
    /// A grant of `path`, validated as the config does: absolute, without
    /// `..`, and not inside `/proc/self` or `/proc/thread-self`.
    pub fn new(path: impl Into<PathBuf>, write: bool) -> Result<Self, String> {
        let path = path.into();
        let has_parent_ref = path.components().any(|c| c == Component::ParentDir);
        // `has_root`: what `is_absolute` means on Unix, and the same on
        // wasm32-unknown-unknown, where `is_absolute` is always false (the
        // SDK's fakes run there for other languages, `sdk/fakes`).
        if !path.has_root() || has_parent_ref {
            return Err(format!(
                "files grant path {:?} must be absolute and without `..`",
                path.display()
            ));
        }
        if proc_entry(&path).is_some_and(is_self_link) {
            return Err(format!(
                "files grant path {:?}: {OWN_PROC}; remove this grant",
                path.display()
            ));
        }
        Ok(FileGrant { path, write })
    }
}

fn absolute_path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    let path = PathBuf::deserialize(d)?;
    FileGrant::new(path, false)
        .map(|grant| grant.path)
        .map_err(D::Error::custom)
}

/// A path split into the granted root that covers it and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub root: PathBuf,
    /// Relative to `root`; empty for the root itself.
    pub rel: PathBuf,
}

/// Find the grant covering `path`: the innermost covering grant decides, for
/// reads and writes alike, so a read-only grant inside a writable one keeps
/// its subtree read-only (grants of the very same path are writable when one
/// of them is). No grant at all denies everything.
///
/// Refused whatever the grants: a relative path, `..`, NUL or any other control
/// character (U+0000..U+001F, U+007F..U+009F), a path longer than
/// [`MAX_PATH_LEN`] or with a component longer than [`MAX_COMPONENT_LEN`]
/// (invalid), and `/proc/self`, `/proc/thread-self` and anything under them
/// (denied). The host also refuses its own `/proc/<pid>` with [`is_own_proc`].
pub fn resolve(
    grants: &[FileGrant],
    plugin: &str,
    path: &str,
    write: bool,
) -> Result<Resolved, Refusal> {
    let normalized = normalize(path)?;
    if proc_entry(&normalized).is_some_and(is_self_link) {
        return Err(Refusal::Denied(format!("{path}: {OWN_PROC}")));
    }
    let covering: Vec<&FileGrant> = grants
        .iter()
        .filter(|g| normalized.starts_with(&g.path))
        .collect();
    let depth = |g: &&FileGrant| g.path.components().count();
    let Some(innermost) = covering.iter().map(depth).max() else {
        return Err(not_covered(plugin, path, &normalized, write));
    };
    let mut innermost = covering.into_iter().filter(|g| depth(g) == innermost);
    let first = innermost.next().expect("the deepest covering grant");
    let grant = innermost.find(|g| g.write).unwrap_or(first);
    if write && !grant.write {
        return Err(Refusal::Denied(format!(
            "{path} is granted read-only by {{ path = \"{}\" }}: set write = true on that grant in [plugins.{plugin}.grants] files",
            grant.path.display()
        )));
    }
    let rel = normalized
        .strip_prefix(&grant.path)
        .expect("covering grant is a prefix");
    Ok(Resolved {
        root: grant.path.clone(),
        rel: rel.to_path_buf(),
    })
}

/// Whether `path` names Tend's own `/proc` entry or anything under it:
/// `/proc/self`, `/proc/thread-self` or `/proc/<own_pid>` (read lexically,
/// with `.` and `..` applied and leading zeros ignored). The host refuses
/// these before touching the filesystem; `resolve` already refuses the first
/// two, which need no pid.
pub fn is_own_proc(path: &Path, own_pid: u32) -> bool {
    proc_entry(path).is_some_and(|entry| {
        is_self_link(entry)
            || entry.to_str().is_some_and(|e| {
                !e.is_empty()
                    && e.bytes().all(|b| b.is_ascii_digit())
                    && e.trim_start_matches('0').parse::<u32>() == Ok(own_pid)
            })
    })
}

/// The entry right under `/proc` that `path` names, if it is under `/proc`.
fn proc_entry(path: &Path) -> Option<&OsStr> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::ParentDir => {
                parts.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    match parts.as_slice() {
        [proc, entry, ..] if *proc == "proc" => Some(entry),
        _ => None,
    }
}

fn is_self_link(entry: &OsStr) -> bool {
    entry == "self" || entry == "thread-self"
}

/// An absolute path with `.` and repeated slashes dropped; `..` is refused
/// outright rather than resolved, so no string trick can climb out of a root.
fn normalize(path: &str) -> Result<PathBuf, Refusal> {
    if path.len() > MAX_PATH_LEN {
        return Err(Refusal::Invalid(format!(
            "{}: the path is {} bytes, over the limit of {MAX_PATH_LEN}; use a shorter path",
            shown(path),
            path.len()
        )));
    }
    if !path.starts_with('/') || path.contains('\0') {
        return Err(Refusal::Invalid(format!(
            "{path:?}: files are addressed by absolute path, for example \"/etc/containerd/certs.d/docker.io/hosts.toml\""
        )));
    }
    // A name with a newline or an escape sequence would forge log lines and
    // drive terminals wherever it is shown (a file watch's trigger subject):
    // such a file can be neither named nor created through a grant.
    if let Some(control) = path.chars().find(|c| c.is_control()) {
        return Err(Refusal::Invalid(format!(
            "{:?}: a path component contains the control character U+{:04X}; name files without control characters",
            shown(path),
            control as u32
        )));
    }
    let mut normalized = PathBuf::from("/");
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) if part.len() > MAX_COMPONENT_LEN => {
                return Err(Refusal::Invalid(format!(
                    "{}: a path component is {} bytes, over the limit of {MAX_COMPONENT_LEN}; use shorter names",
                    shown(path),
                    part.len()
                )));
            }
            Component::Normal(part) => normalized.push(part),
            Component::ParentDir => {
                return Err(Refusal::Invalid(format!(
                    "{path}: `..` is not allowed in paths; name the file directly"
                )));
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(normalized)
}

fn not_covered(plugin: &str, path: &str, normalized: &Path, write: bool) -> Refusal {
    let suggestion = normalized.parent().unwrap_or(normalized);
    let write = if write { ", write = true" } else { "" };
    Refusal::Denied(format!(
        "no files grant covers {path}: add {{ path = \"{}\"{write} }} to [plugins.{plugin}.grants] files",
        suggestion.display()
    ))
}

/// The mode of a write that names none.
pub const DEFAULT_MODE: u32 = 0o644;

/// The permission bits of a write ([`DEFAULT_MODE`] when it names none):
/// setuid, setgid and sticky are refused, so a plugin under a root-owned
/// Tend can never plant a setuid binary.
pub fn file_mode(path: &str, mode: Option<u32>) -> Result<u32, Refusal> {
    let mode = mode.unwrap_or(DEFAULT_MODE);
    if mode & !0o777 != 0 {
        return Err(Refusal::Invalid(format!(
            "{}: mode {mode:o} has bits beyond 0o777 (setuid, setgid, sticky or file type); plugins write plain permission bits only",
            shown(path)
        )));
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants() -> Vec<FileGrant> {
        vec![
            FileGrant {
                path: "/etc".into(),
                write: false,
            },
            FileGrant {
                path: "/etc/containerd/certs.d".into(),
                write: true,
            },
        ]
    }

    #[test]
    fn resolves_inside_the_innermost_root() {
        let r = resolve(
            &grants(),
            "p",
            "/etc/containerd/certs.d//docker.io/./hosts.toml",
            false,
        )
        .unwrap();
        assert_eq!(r.root, Path::new("/etc/containerd/certs.d"));
        assert_eq!(r.rel, Path::new("docker.io/hosts.toml"));
        let r = resolve(&grants(), "p", "/etc/hosts", false).unwrap();
        assert_eq!(
            (r.root.as_path(), r.rel.as_path()),
            (Path::new("/etc"), Path::new("hosts"))
        );
    }

    #[test]
    fn the_root_itself_resolves_to_an_empty_rest() {
        let r = resolve(&grants(), "p", "/etc/containerd/certs.d/", true).unwrap();
        assert_eq!(r.rel, Path::new(""));
    }

    #[test]
    fn parent_components_and_relative_paths_are_invalid() {
        for path in [
            "/etc/containerd/certs.d/../../shadow",
            "etc/hosts",
            "",
            "/etc/\0x",
        ] {
            let err = resolve(&grants(), "p", path, false).unwrap_err();
            assert!(matches!(err, Refusal::Invalid(_)), "{path:?}: {err}");
        }
    }

    #[test]
    fn control_characters_in_a_path_are_invalid_naming_the_character() {
        let grants = [FileGrant::new("/d", true).unwrap()];
        for (path, named) in [
            ("/d/a\nforged", "U+000A"),
            ("/d/\u{1b}]0;title\u{7}", "U+001B"),
            ("/d/x\ry", "U+000D"),
            ("/d/tab\there", "U+0009"),
            ("/d/\u{9b}31m", "U+009B"),
            ("/d/del\u{7f}", "U+007F"),
        ] {
            for write in [false, true] {
                let err = resolve(&grants, "p", path, write).unwrap_err();
                let Refusal::Invalid(message) = err else {
                    panic!("{path:?}: {err}")
                };
                assert!(message.contains(named), "{message}");
                assert!(!message.chars().any(char::is_control), "{message:?}");
            }
        }
        assert!(resolve(&grants, "p", "/d/ünïcode name", true).is_ok());
    }

    #[test]
    fn ungranted_paths_are_denied_naming_the_grant_to_add() {
        let err = resolve(&grants(), "mirror-gate", "/var/lib/x", true).unwrap_err();
        assert_eq!(
            err,
            Refusal::Denied(
                "no files grant covers /var/lib/x: add { path = \"/var/lib\", write = true } to [plugins.mirror-gate.grants] files".into()
            )
        );
        // A sibling that merely shares a prefix string is not covered.
        let err = resolve(&grants(), "p", "/etcetera/x", false).unwrap_err();
        assert!(matches!(err, Refusal::Denied(_)));
    }

    #[test]
    fn no_grant_at_all_denies_everything() {
        let err = resolve(&[], "p", "/etc/hosts", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "denied: no files grant covers /etc/hosts: add { path = \"/etc\" } to [plugins.p.grants] files"
        );
    }

    #[test]
    fn writes_under_a_read_only_grant_say_which_grant_to_change() {
        let err = resolve(&grants(), "p", "/etc/hosts", true).unwrap_err();
        let Refusal::Denied(message) = err else {
            panic!("{err}")
        };
        assert!(
            message.contains("granted read-only by { path = \"/etc\" }"),
            "{message}"
        );
        assert!(message.contains("set write = true"), "{message}");
    }

    #[test]
    fn the_innermost_grant_decides_writes_too() {
        let grants = vec![
            FileGrant::new("/etc", true).unwrap(),
            FileGrant::new("/etc/ssl", false).unwrap(),
        ];
        let err = resolve(&grants, "p", "/etc/ssl/private/key.pem", true).unwrap_err();
        assert_eq!(
            err,
            Refusal::Denied(
                "/etc/ssl/private/key.pem is granted read-only by { path = \"/etc/ssl\" }: set write = true on that grant in [plugins.p.grants] files".into()
            )
        );
        let r = resolve(&grants, "p", "/etc/ssl/private/key.pem", false).unwrap();
        assert_eq!(r.root, Path::new("/etc/ssl"));
        let r = resolve(&grants, "p", "/etc/hosts", true).unwrap();
        assert_eq!(r.root, Path::new("/etc"));
        // Two grants of one path: writable when either is.
        let twice = vec![
            FileGrant::new("/d", false).unwrap(),
            FileGrant::new("/d/", true).unwrap(),
        ];
        assert!(resolve(&twice, "p", "/d/x", true).is_ok());
    }

    #[test]
    fn overlong_paths_and_components_are_invalid_and_not_echoed() {
        let grants = [FileGrant::new("/", true).unwrap()];
        let long = format!("/{}", "a/".repeat(MAX_PATH_LEN / 2));
        let err = resolve(&grants, "p", &long, false).unwrap_err();
        let Refusal::Invalid(message) = err else {
            panic!("{err}")
        };
        assert!(message.contains("over the limit of 4096"), "{message}");
        assert!(message.len() < 200, "{message}");
        let name = format!("/d/{}", "n".repeat(MAX_COMPONENT_LEN + 1));
        let err = resolve(&grants, "p", &name, true).unwrap_err();
        let Refusal::Invalid(message) = err else {
            panic!("{err}")
        };
        assert!(
            message.contains("a path component is 256 bytes, over the limit of 255"),
            "{message}"
        );
        let fits = format!("/{}", "n".repeat(MAX_COMPONENT_LEN));
        assert!(resolve(&grants, "p", &fits, true).is_ok());
        let fits = format!("/{}", "a/".repeat(MAX_PATH_LEN / 2 - 1));
        assert!(fits.len() <= MAX_PATH_LEN);
        assert!(resolve(&grants, "p", &fits, true).is_ok());
    }

    #[test]
    fn tends_own_proc_entries_are_denied_whatever_the_grants() {
        let grants = [FileGrant::new("/proc", false).unwrap()];
        for path in [
            "/proc/self",
            "/proc/self/environ",
            "/proc//self/./mem",
            "/proc/thread-self/fd/3",
            "/proc/self/",
        ] {
            let err = resolve(&grants, "p", path, false).unwrap_err();
            let Refusal::Denied(message) = err else {
                panic!("{path}: {err}")
            };
            assert!(
                message.starts_with(&format!("{path}: Tend's own /proc entries")),
                "{message}"
            );
            assert!(
                message.contains("environment, memory and file descriptors"),
                "{message}"
            );
        }
        assert!(
            resolve(&[], "p", "/proc/self/environ", false)
                .unwrap_err()
                .message()
                .contains("never granted")
        );
        for path in [
            "/proc",
            "/proc/1/status",
            "/proc/selfish",
            "/proc/sys/kernel",
        ] {
            assert!(resolve(&grants, "p", path, false).is_ok(), "{path}");
        }
        let err = FileGrant::new("/proc/self/fd", false).unwrap_err();
        assert!(err.contains("never granted"), "{err}");
    }

    #[test]
    fn own_proc_covers_self_thread_self_and_the_pid() {
        for path in [
            "/proc/42",
            "/proc/42/environ",
            "/proc/042/mem",
            "/proc/1/../42/fd",
            "/proc/self",
            "/proc/thread-self/environ",
            "//proc/./42",
        ] {
            assert!(is_own_proc(Path::new(path), 42), "{path}");
        }
        for path in [
            "/proc",
            "/proc/4",
            "/proc/420",
            "/proc/1/task/42",
            "/42",
            "/srv/proc/42",
            "/proc/0",
        ] {
            assert!(!is_own_proc(Path::new(path), 42), "{path}");
        }
    }

    #[test]
    fn grant_paths_must_be_absolute_without_parent_components() {
        assert!(FileGrant::new("/etc", true).is_ok());
        for bad in ["etc", "/etc/../root", ""] {
            let err = FileGrant::new(bad, false).unwrap_err();
            assert!(err.contains("must be absolute and without `..`"), "{err}");
        }
    }

    #[test]
    fn grants_deserialize_with_the_same_validation() {
        let g: FileGrant = serde_json::from_str(r#"{"path": "/etc"}"#).unwrap();
        assert_eq!(g, FileGrant::new("/etc", false).unwrap());
        let err =
            serde_json::from_str::<FileGrant>(r#"{"path": "etc", "write": true}"#).unwrap_err();
        assert!(err.to_string().contains("must be absolute"), "{err}");
        assert!(serde_json::from_str::<FileGrant>(r#"{"path": "/etc", "rw": true}"#).is_err());
    }

    #[test]
    fn modes_are_plain_permission_bits() {
        assert_eq!(file_mode("/etc/a", None), Ok(0o644));
        assert_eq!(file_mode("/etc/a", Some(0o777)), Ok(0o777));
        assert_eq!(
            file_mode("/etc/a", Some(0o4755)).unwrap_err().message(),
            "/etc/a: mode 4755 has bits beyond 0o777 (setuid, setgid, sticky or file type); plugins write plain permission bits only"
        );
        assert!(file_mode("/etc/a", Some(0o1000)).is_err());
    }
}
