//! The operator's `[plugins.unit-applier.config]` and the declaration it holds
//! or names, resolved to a [`Desired`] (with every check that needs no host).

use crate::diff::{Desired, DesiredFile, DesiredUnit, Kind, digest};
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, BTreeSet};
use tend_sdk::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Files to write (inline declaration).
    #[serde(default)]
    pub files: Vec<FileDecl>,
    /// Units to write, enable and start (inline declaration).
    #[serde(default)]
    pub units: Vec<UnitDecl>,
    /// Where unit files and drop-in directories go.
    #[serde(default = "default_unit_dir")]
    pub unit_dir: String,
    /// A JSON (or, for a `.toml` path, TOML) file holding the declaration
    /// (`files` and `units`) instead of this table; read through the files
    /// capability. Add it to the plugin's `watch` list to apply it on change.
    pub declaration_file: Option<String>,
    /// Spread restarts of some units over a window, by node name.
    pub jitter: Option<Jitter>,
}

/// The declaration, inline in [`Config`] or in its `declaration-file`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Declaration {
    #[serde(default)]
    pub files: Vec<FileDecl>,
    #[serde(default)]
    pub units: Vec<UnitDecl>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileDecl {
    /// Absolute path, inside a writable files grant.
    pub path: String,
    /// The whole content (UTF-8 text).
    pub content: String,
    /// Permission bits: an integer (TOML `0o640`) or an octal string ("0640").
    #[serde(default = "default_mode", deserialize_with = "mode")]
    pub mode: u32,
    /// The intended owner ("root", "kubelet:kubelet"). Recorded in `state`
    /// but not applied: the files capability cannot chown yet, so a written
    /// file belongs to the user `tend` runs as (a warning is logged when a
    /// file with an owner is written). A change of owner alone restarts nothing.
    pub owner: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UnitDecl {
    /// "app.service", "app.timer".
    pub name: String,
    /// The unit file; required unless `own = false`.
    pub content: Option<String>,
    /// Drop-ins, written to `<unit-dir>/<name>.d/<drop-in name>`.
    #[serde(default)]
    pub drop_ins: Vec<DropInDecl>,
    /// Enable and start the unit (default true); not allowed with `own = false`.
    pub enable: Option<bool>,
    /// Paths of declared files whose change restarts the unit.
    #[serde(default)]
    pub files: Vec<String>,
    /// false: the unit exists already (a distribution's kubelet.service) and
    /// unit-applier manages only its drop-ins: it writes and removes them and
    /// restarts the unit when they or its files change, but never writes the
    /// unit file, enables, starts, stops or disables the unit.
    #[serde(default = "yes")]
    pub own: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DropInDecl {
    /// "10-env.conf".
    pub name: String,
    pub content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Jitter {
    /// Restarts of `units` wait between 0 and this long, a fixed offset per
    /// node (a hash of its name), so a fleet does not restart them at once.
    pub window_ms: u64,
    pub units: Vec<String>,
}

fn default_unit_dir() -> String {
    "/etc/systemd/system".into()
}
fn default_mode() -> u32 {
    0o644
}
fn yes() -> bool {
    true
}

fn mode<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Mode {
        Bits(u32),
        Octal(String),
    }
    let bits = match Mode::deserialize(d)? {
        Mode::Bits(bits) => bits,
        Mode::Octal(text) => {
            let digits = text.trim_start_matches("0o");
            u32::from_str_radix(digits, 8).map_err(|_| {
                serde::de::Error::custom(format!(
                    "mode {text:?} is not an octal number such as \"0640\""
                ))
            })?
        }
    };
    if bits > 0o7777 {
        return Err(serde::de::Error::custom(format!(
            "mode {bits:o} (octal) has bits beyond 0o7777"
        )));
    }
    Ok(bits)
}

impl Config {
    /// The inline declaration, unless a declaration file is named (then none).
    pub fn inline(&mut self, plugin: &str) -> Result<Option<Declaration>> {
        if self.declaration_file.is_some() {
            if !self.files.is_empty() || !self.units.is_empty() {
                return Err(Error::Invalid(format!(
                    "[plugins.{plugin}.config]: set either declaration-file or files and units, not both"
                )));
            }
            return Ok(None);
        }
        Ok(Some(Declaration {
            files: std::mem::take(&mut self.files),
            units: std::mem::take(&mut self.units),
        }))
    }
}

/// Parse a declaration file: TOML for a `.toml` path, else JSON.
pub fn parse_declaration(path: &str, text: &str) -> Result<Declaration> {
    let parsed = if path.ends_with(".toml") {
        toml::from_str(text).map_err(|e| e.to_string())
    } else {
        serde_json::from_str(text).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| Error::Invalid(format!("declaration file {path}: {e}")))
}

fn invalid(message: String) -> Error {
    Error::Invalid(format!("unit-applier declaration: {message}"))
}

fn check_path(what: &str, path: &str) -> Result<()> {
    if !path.starts_with('/') || path.split('/').any(|p| p == ".." || p == ".") {
        return Err(invalid(format!(
            "{what} {path:?} must be an absolute path without . or .. components"
        )));
    }
    Ok(())
}

/// A file name inside the unit directory: no separators, not hidden.
fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '.' | '\\' | '@' | '-'));
    if !ok {
        return Err(invalid(format!(
            "{what} {name:?} must be a file name (letters, digits, \":_.\\@-\")"
        )));
    }
    Ok(())
}

/// The declaration resolved to paths, checked.
pub fn desired(config: &Config, declaration: Declaration) -> Result<Desired> {
    check_path("unit-dir", &config.unit_dir)?;
    let unit_dir = config.unit_dir.trim_end_matches('/');
    let mut files = BTreeMap::new();
    let mut add = |path: String, content: String, mode: u32, owner, kind: Kind| -> Result<()> {
        let file = DesiredFile {
            digest: digest(&content),
            content,
            mode,
            owner,
            kind,
        };
        match files.insert(path.clone(), file) {
            Some(_) => Err(invalid(format!("{path} is declared twice"))),
            None => Ok(()),
        }
    };
    let mut plain = BTreeSet::new();
    for f in declaration.files {
        check_path("file path", &f.path)?;
        if f.path.ends_with('/') {
            return Err(invalid(format!("file path {:?} names a directory", f.path)));
        }
        plain.insert(f.path.clone());
        add(f.path, f.content, f.mode, f.owner, Kind::Plain)?;
    }
    let mut units = BTreeMap::new();
    for u in declaration.units {
        check_name("unit name", &u.name)?;
        if !u.name.contains('.') {
            return Err(invalid(format!(
                "unit name {:?} needs a type suffix such as .service",
                u.name
            )));
        }
        let name = &u.name;
        match (&u.content, u.own) {
            (None, true) => {
                return Err(invalid(format!(
                    "unit {name} needs content (or own = false to manage only its drop-ins)"
                )));
            }
            (Some(_), false) => {
                return Err(invalid(format!(
                    "unit {name} has own = false: it cannot have content (unit-applier does not write its unit file)"
                )));
            }
            _ => {}
        }
        if !u.own && u.enable.is_some() {
            return Err(invalid(format!(
                "unit {name} has own = false: enable is not allowed (unit-applier does not enable, start, stop or disable it)"
            )));
        }
        if let Some(content) = u.content {
            add(
                format!("{unit_dir}/{name}"),
                content,
                0o644,
                None,
                Kind::UnitFile(name.clone()),
            )?;
        }
        for d in u.drop_ins {
            check_name("drop-in name", &d.name)?;
            if !d.name.ends_with(".conf") {
                return Err(invalid(format!(
                    "drop-in {:?} of {name} must end in .conf (systemd ignores other names)",
                    d.name
                )));
            }
            add(
                format!("{unit_dir}/{name}.d/{}", d.name),
                d.content,
                0o644,
                None,
                Kind::DropIn(name.clone()),
            )?;
        }
        for path in &u.files {
            if !plain.contains(path) {
                return Err(invalid(format!(
                    "unit {name} depends on {path}, which is not a declared file"
                )));
            }
        }
        let unit = DesiredUnit {
            own: u.own,
            enable: u.own && u.enable.unwrap_or(true),
            files: u.files.into_iter().collect(),
        };
        if units.insert(u.name.clone(), unit).is_some() {
            return Err(invalid(format!("unit {} is declared twice", u.name)));
        }
    }
    let jittered = config
        .jitter
        .as_ref()
        .map(|j| j.units.iter().cloned().collect())
        .unwrap_or_default();
    Ok(Desired {
        files,
        units,
        jittered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> Config {
        serde_json::from_str(json).unwrap()
    }

    fn resolve(json: &str) -> Result<Desired> {
        let mut config = config(json);
        let declaration = config.inline("unit-applier")?.unwrap();
        desired(&config, declaration)
    }

    #[test]
    fn defaults_and_paths() {
        let d = resolve(
            r#"{"files": [{"path": "/etc/app/a.conf", "content": "x"}],
                "units": [{"name": "app.service", "content": "[Service]\n", "files": ["/etc/app/a.conf"],
                           "drop-ins": [{"name": "10-env.conf", "content": "[Service]\nEnvironment=A=1\n"}]}]}"#,
        )
        .unwrap();
        let paths: Vec<&str> = d.files.keys().map(|p| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/etc/app/a.conf",
                "/etc/systemd/system/app.service",
                "/etc/systemd/system/app.service.d/10-env.conf"
            ]
        );
        assert_eq!(d.files["/etc/app/a.conf"].mode, 0o644);
        let unit = &d.units["app.service"];
        assert!(unit.own && unit.enable);
        assert!(unit.files.contains("/etc/app/a.conf"));
    }

    #[test]
    fn modes_are_integers_or_octal_strings() {
        let d = resolve(
            r#"{"files": [{"path": "/a", "content": "", "mode": 384}, {"path": "/b", "content": "", "mode": "0640"}]}"#,
        )
        .unwrap();
        assert_eq!(d.files["/a"].mode, 0o600);
        assert_eq!(d.files["/b"].mode, 0o640);
        let err = serde_json::from_str::<Config>(
            r#"{"files": [{"path": "/a", "content": "", "mode": "rw"}]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("octal"), "{err}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<Config>(r#"{"unit": []}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `unit`"), "{err}");
        let err = serde_json::from_str::<Config>(
            r#"{"units": [{"name": "a.service", "content": "", "enabled": true}]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("enabled"), "{err}");
    }

    #[test]
    fn bad_declarations_are_invalid_and_say_why() {
        for (json, why) in [
            (
                r#"{"files": [{"path": "etc/a", "content": ""}]}"#,
                "absolute",
            ),
            (
                r#"{"files": [{"path": "/etc/../a", "content": ""}]}"#,
                "absolute",
            ),
            (
                r#"{"files": [{"path": "/a", "content": ""}, {"path": "/a", "content": "x"}]}"#,
                "declared twice",
            ),
            (r#"{"units": [{"name": "a.service"}]}"#, "needs content"),
            (
                r#"{"units": [{"name": "a", "content": ""}]}"#,
                "type suffix",
            ),
            (
                r#"{"units": [{"name": "../a.service", "content": ""}]}"#,
                "file name",
            ),
            (
                r#"{"units": [{"name": "a.service", "content": "", "files": ["/nope"]}]}"#,
                "not a declared file",
            ),
            (
                r#"{"units": [{"name": "a.service", "own": false, "content": ""}]}"#,
                "cannot have content",
            ),
            (
                r#"{"units": [{"name": "a.service", "own": false, "enable": true}]}"#,
                "enable is not allowed",
            ),
            (
                r#"{"units": [{"name": "a.service", "content": "", "drop-ins": [{"name": "x", "content": ""}]}]}"#,
                "must end in .conf",
            ),
            (
                r#"{"units": [{"name": "a.service", "content": ""}, {"name": "a.service", "content": ""}]}"#,
                "declared twice",
            ),
            (
                r#"{"files": [{"path": "/etc/systemd/system/a.service", "content": ""}], "units": [{"name": "a.service", "content": ""}]}"#,
                "declared twice",
            ),
        ] {
            let err = resolve(json).unwrap_err();
            assert!(
                matches!(&err, Error::Invalid(m) if m.contains(why)),
                "{json}: {err}"
            );
        }
    }

    #[test]
    fn a_declaration_file_excludes_inline_entries() {
        let mut c = config(r#"{"declaration-file": "/etc/tend/units.json"}"#);
        assert!(c.inline("unit-applier").unwrap().is_none());
        let mut c = config(
            r#"{"declaration-file": "/etc/tend/units.json", "files": [{"path": "/a", "content": ""}]}"#,
        );
        assert!(
            c.inline("unit-applier")
                .unwrap_err()
                .message()
                .contains("not both")
        );
    }

    #[test]
    fn declaration_files_are_json_or_toml() {
        let toml = "[[files]]\npath = \"/a\"\ncontent = \"x\"\nmode = 0o600\n\n[[units]]\nname = \"a.service\"\ncontent = \"[Service]\\n\"\nfiles = [\"/a\"]\n";
        let d = parse_declaration("/etc/tend/units.toml", toml).unwrap();
        assert_eq!(d.files[0].mode, 0o600);
        assert_eq!(d.units[0].files, ["/a"]);
        let d = parse_declaration("/etc/tend/units.json", r#"{"units": []}"#).unwrap();
        assert!(d.units.is_empty());
        let err = parse_declaration("/etc/tend/units.json", r#"{"unitz": []}"#).unwrap_err();
        assert!(err.message().contains("/etc/tend/units.json"), "{err}");
        assert!(err.message().contains("unitz"), "{err}");
    }
}
