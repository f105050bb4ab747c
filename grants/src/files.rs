//! Which granted root a plugin's path falls in: pure, so every rule is tested
//! without a filesystem.

use crate::Refusal;
use serde::{Deserialize, Deserializer, de::Error as _};
use std::path::{Component, Path, PathBuf};

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
    /// A grant of `path`, validated as the config does: absolute and without `..`.
    pub fn new(path: impl Into<PathBuf>, write: bool) -> Result<Self, String> {
        let path = path.into();
        let has_parent_ref = path.components().any(|c| c == Component::ParentDir);
        if !path.is_absolute() || has_parent_ref {
            return Err(format!(
                "files grant path {:?} must be absolute and without `..`",
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

/// Find the grant covering `path`. Reads take the innermost covering root; a
/// write needs a covering grant with `write = true` (the innermost such one).
/// No grant at all denies everything.
pub fn resolve(
    grants: &[FileGrant],
    plugin: &str,
    path: &str,
    write: bool,
) -> Result<Resolved, Refusal> {
    let normalized = normalize(path)?;
    let covering = |g: &&FileGrant| normalized.starts_with(&g.path);
    let innermost = |a: &&FileGrant, b: &&FileGrant| {
        a.path
            .components()
            .count()
            .cmp(&b.path.components().count())
    };
    let grant = match grants
        .iter()
        .filter(covering)
        .filter(|g| g.write || !write)
        .max_by(innermost)
    {
        Some(grant) => grant,
        None => return Err(denied(grants, plugin, path, &normalized, write)),
    };
    let rel = normalized
        .strip_prefix(&grant.path)
        .expect("covering grant is a prefix");
    Ok(Resolved {
        root: grant.path.clone(),
        rel: rel.to_path_buf(),
    })
}

/// An absolute path with `.` and repeated slashes dropped; `..` is refused
/// outright rather than resolved, so no string trick can climb out of a root.
fn normalize(path: &str) -> Result<PathBuf, Refusal> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(Refusal::Invalid(format!(
            "{path:?}: files are addressed by absolute path, for example \"/etc/containerd/certs.d/docker.io/hosts.toml\""
        )));
    }
    let mut normalized = PathBuf::from("/");
    for component in Path::new(path).components() {
        match component {
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

fn denied(
    grants: &[FileGrant],
    plugin: &str,
    path: &str,
    normalized: &Path,
    write: bool,
) -> Refusal {
    let table = format!("[plugins.{plugin}.grants] files");
    if write && let Some(read_only) = grants.iter().find(|g| normalized.starts_with(&g.path)) {
        return Refusal::Denied(format!(
            "{path} is granted read-only by {{ path = \"{}\" }}: set write = true on that grant in {table}",
            read_only.path.display()
        ));
    }
    let suggestion = normalized.parent().unwrap_or(normalized);
    let write = if write { ", write = true" } else { "" };
    Refusal::Denied(format!(
        "no files grant covers {path}: add {{ path = \"{}\"{write} }} to {table}",
        suggestion.display()
    ))
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
}
