//! `tend-author new NAME --lang LANG`: a plugin project to start from, in any language
//! with a Tend SDK. The templates (`templates/LANG/`, compiled into the binary)
//! are one starter plugin each, so every language's project builds, has a
//! passing unit test against its SDK's fakes, a sample config with the
//! narrowest grants and a README (templates/README.md says what they hold).
//! What every language shares (the sample config) is in `templates/common/`.

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use include_dir::{Dir, DirEntry, include_dir};
use rustix::fs::{Mode, OFlags};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

static TEMPLATES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../templates");

/// The checkout this binary was built from: its `wit/` and `sdk/` serve
/// `tend-author new` until the SDKs are published.
const BUILT_FROM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
    C,
    Go,
}

impl Lang {
    /// The language's name in messages.
    fn shown(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript/TypeScript",
            Lang::C => "C",
            Lang::Go => "Go",
        }
    }

    /// The language's keywords, reserved words included (from each
    /// language's reference: Rust's strict, reserved and 2024 keywords;
    /// Python 3's `keyword.kwlist`; ECMAScript's reserved words with strict
    /// mode's and TypeScript's; C23's; Go's). The templates use the name as
    /// an identifier (a crate, module, package or file to import), so a
    /// keyword makes a project that does not build.
    fn keywords(self) -> &'static [&'static str] {
        match self {
            Lang::Rust => &[
                "abstract", "as", "async", "await", "become", "box", "break", "const", "continue",
                "crate", "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for",
                "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move", "mut",
                "override", "priv", "pub", "ref", "return", "self", "static", "struct", "super",
                "trait", "true", "try", "type", "typeof", "unsafe", "unsized", "use", "virtual",
                "where", "while", "yield",
            ],
            Lang::Python => &[
                "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
                "del", "elif", "else", "except", "finally", "for", "from", "global", "if",
                "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
                "try", "while", "with", "yield",
            ],
            Lang::Js => &[
                "any",
                "arguments",
                "as",
                "await",
                "boolean",
                "break",
                "case",
                "catch",
                "class",
                "const",
                "constructor",
                "continue",
                "debugger",
                "declare",
                "default",
                "delete",
                "do",
                "else",
                "enum",
                "eval",
                "export",
                "extends",
                "false",
                "finally",
                "for",
                "function",
                "if",
                "implements",
                "import",
                "in",
                "instanceof",
                "interface",
                "let",
                "module",
                "namespace",
                "never",
                "new",
                "null",
                "number",
                "package",
                "private",
                "protected",
                "public",
                "readonly",
                "require",
                "return",
                "static",
                "string",
                "super",
                "switch",
                "symbol",
                "this",
                "throw",
                "true",
                "try",
                "type",
                "typeof",
                "undefined",
                "unknown",
                "var",
                "void",
                "while",
                "with",
                "yield",
            ],
            Lang::C => &[
                "alignas",
                "alignof",
                "auto",
                "bool",
                "break",
                "case",
                "char",
                "const",
                "constexpr",
                "continue",
                "default",
                "do",
                "double",
                "else",
                "enum",
                "extern",
                "false",
                "float",
                "for",
                "goto",
                "if",
                "inline",
                "int",
                "long",
                "nullptr",
                "register",
                "restrict",
                "return",
                "short",
                "signed",
                "sizeof",
                "static",
                "static_assert",
                "struct",
                "switch",
                "thread_local",
                "true",
                "typedef",
                "typeof",
                "typeof_unqual",
                "union",
                "unsigned",
                "void",
                "volatile",
                "while",
            ],
            Lang::Go => &[
                "break",
                "case",
                "chan",
                "const",
                "continue",
                "default",
                "defer",
                "else",
                "fallthrough",
                "for",
                "func",
                "go",
                "goto",
                "if",
                "import",
                "interface",
                "map",
                "package",
                "range",
                "return",
                "select",
                "struct",
                "switch",
                "type",
                "var",
            ],
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
            Lang::Go => "go",
        }
    }
}

/// What the placeholders of a template become.
struct Names {
    name: String,
    tend: String,
}

impl Names {
    fn fill(&self, text: &str) -> String {
        text.replace("{{name}}", &self.name)
            .replace("{{name_snake}}", &self.name.replace('-', "_"))
            .replace("{{tend}}", &self.tend)
    }
}

/// Writes the project and says what to do next.
pub fn run(
    name: &str,
    lang: Lang,
    dir: Option<PathBuf>,
    tend: Option<PathBuf>,
) -> Result<ExitCode> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let tend = tend_source(tend)?;
    let files = create(name, lang, &dir, &tend)?;
    println!("created {} ({} plugin {name}):", dir.display(), lang.dir());
    for file in &files {
        println!("  {}", file.display());
    }
    println!(
        "next: cd {} && ./test.sh && ./build.sh, then `tend plan {name} -c tend.toml` (README.md says more)",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The names a plugin can have in `[plugins.NAME]` that are also identifiers
/// in every template language once `-` becomes `_`, and not one of `lang`'s
/// keywords.
fn check_name(name: &str, lang: Lang) -> Result<()> {
    if !crate::config::is_valid_plugin_name(name)
        || !name.starts_with(|c: char| c.is_ascii_lowercase())
        || name.ends_with('-')
    {
        bail!(
            "invalid plugin name {name:?}: expected lowercase letters, digits and '-', starting with a letter and not ending with '-' (for example \"node-probe\")"
        );
    }
    let identifier = name.replace('-', "_");
    if lang.keywords().contains(&identifier.as_str()) {
        bail!(
            "invalid plugin name {name:?}: {identifier:?} is a {} keyword, and the {} template uses the name as an identifier, so the project would not build: choose another name, for example \"{name}-probe\"",
            lang.shown(),
            lang.dir()
        );
    }
    Ok(())
}

/// `--tend`, else `$TEND_SOURCE`, else the checkout this binary was built from.
fn tend_source(given: Option<PathBuf>) -> Result<PathBuf> {
    let (dir, from) = match given {
        Some(dir) => (dir, "--tend"),
        None => match std::env::var_os("TEND_SOURCE") {
            Some(dir) => (PathBuf::from(dir), "TEND_SOURCE"),
            None => (
                PathBuf::from(BUILT_FROM),
                "the checkout tend-author was built from",
            ),
        },
    };
    if !dir.join("wit/world.wit").is_file() || !dir.join("sdk").is_dir() {
        bail!(
            "{} ({from}) is not a Tend source checkout (no wit/world.wit and sdk/): pass --tend DIR, the checkout whose wit/ and sdk/ the project should use",
            dir.display()
        );
    }
    let dir: PathBuf = std::path::absolute(&dir)
        .map(|d| d.components().collect())
        .with_context(|| format!("resolve {}", dir.display()))?;
    check_source_path(&dir)?;
    Ok(dir)
}

/// The checkout's path lands unquoted in shell scripts, TOML, JSON and go.mod:
/// only characters that mean nothing in any of them.
fn check_source_path(dir: &Path) -> Result<()> {
    let text = dir.to_str().unwrap_or_default();
    let plain = |c: char| c.is_ascii_alphanumeric() || "._/+-".contains(c);
    if text.is_empty() || !text.chars().all(plain) {
        bail!(
            "{}: the projects `tend-author new` writes name this path in scripts and manifests, so it may hold only letters, digits and . _ / + -: use a checkout at a plainer path, or a symlink to it, with --tend",
            crate::text::inert(&dir.to_string_lossy())
        );
    }
    Ok(())
}

/// Renders `templates/LANG` into `dir`, which must not exist yet: written
/// beside it first and renamed into place, so a failure leaves nothing behind.
/// Returns the files written, relative to `dir`.
fn create(name: &str, lang: Lang, dir: &Path, tend: &Path) -> Result<Vec<PathBuf>> {
    check_name(name, lang)?;
    let (Some(common), Some(template)) =
        (TEMPLATES.get_dir("common"), TEMPLATES.get_dir(lang.dir()))
    else {
        bail!("no template for {} in this build of tend", lang.dir());
    };
    if dir.symlink_metadata().is_ok() {
        bail!(
            "{} exists already: pass another --dir, or remove it first",
            dir.display()
        );
    }
    let names = Names {
        name: name.to_string(),
        tend: tend.to_string_lossy().into_owned(),
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".tend-new-")
        .tempdir_in(parent)
        .with_context(|| format!("write into {}", parent.display()))?;
    let mut written = Vec::new();
    write_dir(
        common,
        Path::new("common"),
        staging.path(),
        &names,
        &mut written,
    )?;
    write_dir(
        template,
        Path::new(lang.dir()),
        staging.path(),
        &names,
        &mut written,
    )?;
    // A project's mode (a temporary directory is 0700), set through the
    // staging directory's own descriptor before it moves: after the rename,
    // `dir` is a path anyone who can write `parent` may swap for a symlink.
    let staged = rustix::fs::open(
        staging.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("open {}", staging.path().display()))?;
    rustix::fs::fchmod(&staged, Mode::from_raw_mode(0o755))
        .with_context(|| format!("chmod {}", staging.path().display()))?;
    // Never over something that appeared at `dir` meanwhile.
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        staging.path(),
        rustix::fs::CWD,
        dir,
        rustix::fs::RenameFlags::NOREPLACE,
    )
    .with_context(|| format!("move the project into {}", dir.display()))?;
    // The staging directory is the project now: keep it.
    let _ = staging.keep();
    written.sort();
    Ok(written)
}

fn write_dir(
    template: &Dir<'static>,
    root: &Path,
    out: &Path,
    names: &Names,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    for entry in template.entries() {
        let relative = entry
            .path()
            .strip_prefix(root)
            .expect("inside the template");
        let target = out.join(names.fill(&relative.to_string_lossy()));
        match entry {
            DirEntry::Dir(sub) => {
                std::fs::create_dir_all(&target)?;
                write_dir(sub, root, out, names, written)?;
            }
            DirEntry::File(file) => {
                let contents = match file.contents_utf8() {
                    Some(text) => names.fill(text).into_bytes(),
                    None => file.contents().to_vec(),
                };
                std::fs::write(&target, contents)
                    .with_context(|| format!("write {}", target.display()))?;
                if target.extension().is_some_and(|e| e == "sh") {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
                }
                written.push(target.strip_prefix(out).expect("inside").to_path_buf());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Lang; 5] = [Lang::Rust, Lang::Python, Lang::Js, Lang::C, Lang::Go];

    fn source() -> PathBuf {
        tend_source(None).expect("built from a checkout")
    }

    #[test]
    fn every_language_renders_a_project_with_its_scripts_and_a_valid_config() {
        let tmp = tempfile::tempdir().unwrap();
        for lang in ALL {
            let dir = tmp.path().join(lang.dir());
            let files = create("node-probe", lang, &dir, &source()).unwrap();
            for wanted in ["README.md", "build.sh", "test.sh", "tend.toml"] {
                assert!(
                    files.contains(&PathBuf::from(wanted)),
                    "{lang:?} lacks {wanted}: {files:?}"
                );
            }
            for file in &files {
                let text = std::fs::read(dir.join(file)).unwrap();
                let text = String::from_utf8_lossy(&text);
                for placeholder in ["{{name}}", "{{name_snake}}", "{{tend}}"] {
                    assert!(
                        !text.contains(placeholder),
                        "{lang:?} {file:?} keeps {placeholder}"
                    );
                }
            }
            let mode = {
                use std::os::unix::fs::PermissionsExt;
                std::fs::metadata(dir.join("build.sh"))
                    .unwrap()
                    .permissions()
                    .mode()
            };
            assert_eq!(mode & 0o111, 0o111, "{lang:?} build.sh is not executable");
            let dir_mode = {
                use std::os::unix::fs::PermissionsExt;
                std::fs::metadata(&dir).unwrap().permissions().mode()
            };
            assert_eq!(dir_mode & 0o777, 0o755, "{lang:?}: the project's mode");
            let config = crate::config::Config::load(&dir.join("tend.toml"))
                .unwrap_or_else(|e| panic!("{lang:?} tend.toml: {e}"));
            let plugin = config
                .plugins
                .get("node-probe")
                .expect("configures the plugin");
            assert!(plugin.enabled, "{lang:?}: the sample enables the plugin");
        }
    }

    #[test]
    fn the_names_are_filled_in_paths_and_contents() {
        let names = Names {
            name: "node-probe".into(),
            tend: "/src/tend".into(),
        };
        assert_eq!(
            names.fill("{{name_snake}}.py: {{name}} uses {{tend}}/wit"),
            "node_probe.py: node-probe uses /src/tend/wit"
        );
    }

    #[test]
    fn an_existing_directory_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("mine.txt"), "keep").unwrap();
        let err = create("node-probe", Lang::Rust, tmp.path(), &source()).unwrap_err();
        assert!(
            err.to_string()
                .contains("exists already: pass another --dir"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("mine.txt")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn names_that_are_not_identifiers_everywhere_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in [
            "", "Probe", "9probe", "-probe", "probe-", "pro_be", "a/b", "../x",
        ] {
            let err = create(bad, Lang::Go, &tmp.path().join("x"), &source()).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid plugin name"),
                "{bad:?}: {err}"
            );
        }
        assert!(!tmp.path().join("x").exists());
    }

    #[test]
    fn keywords_of_the_language_are_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, lang, shown) in [
            ("import", Lang::Python, "Python"),
            ("class", Lang::Python, "Python"),
            ("fn", Lang::Rust, "Rust"),
            ("async", Lang::Rust, "Rust"),
            ("function", Lang::Js, "JavaScript/TypeScript"),
            ("interface", Lang::Js, "JavaScript/TypeScript"),
            ("static-assert", Lang::C, "C"),
            ("func", Lang::Go, "Go"),
        ] {
            let err = create(name, lang, &tmp.path().join("x"), &source()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid plugin name {name:?}: {:?} is a {shown} keyword, and the {} template uses the name as an identifier, so the project would not build: choose another name, for example \"{name}-probe\"",
                    name.replace('-', "_"),
                    lang.dir()
                )
            );
        }
        assert!(!tmp.path().join("x").exists());
        for lang in ALL {
            for keyword in lang.keywords() {
                assert!(check_name(keyword, lang).is_err(), "{lang:?} {keyword}");
                let suggested = format!("{}-probe", keyword.replace('_', "-"));
                assert!(check_name(&suggested, lang).is_ok(), "{suggested}");
            }
        }
        assert!(
            check_name("my-class", Lang::Python).is_ok(),
            "my_class is no keyword"
        );
    }

    /// A local user who can write the parent swaps the project directory for
    /// a symlink to a root-owned 0600 file, before `tend-author new` runs and while
    /// it runs: the file's mode never changes, since the project's mode is
    /// set through the staging directory's descriptor before the rename.
    #[test]
    fn a_symlink_planted_at_the_project_path_is_refused_never_followed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("shadow");
        std::fs::write(&victim, "secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tmp.path().join("proj");
        // Planted beforehand: refused, nothing followed.
        std::os::unix::fs::symlink(&victim, &dir).unwrap();
        assert!(create("node-probe", Lang::C, &dir, &source()).is_err());
        assert_eq!(mode(&victim), 0o600);
        // Swapped in while tend-author new runs: tests/e2e/hostile_local.rs races
        // the real binary.
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    }

    #[test]
    fn a_dangling_symlink_counts_as_existing() {
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
        let err = create("node-probe", Lang::C, &link, &source()).unwrap_err();
        assert!(err.to_string().contains("exists already"), "{err}");
        assert!(!tmp.path().join("nowhere").exists());
    }

    #[test]
    fn a_source_path_that_scripts_would_misread_is_refused() {
        for bad in [
            "/src/my tend",
            "/src/$(reboot)",
            "/src/a\"b",
            "/src/`x`",
            "/src/a\nb",
        ] {
            let err = check_source_path(Path::new(bad)).unwrap_err();
            assert!(
                err.to_string().contains("may hold only letters"),
                "{bad:?}: {err}"
            );
        }
        check_source_path(Path::new("/work/tend-1.0/src+x")).unwrap();
    }

    #[test]
    fn a_directory_without_wit_and_sdk_is_not_a_source() {
        let tmp = tempfile::tempdir().unwrap();
        let err = tend_source(Some(tmp.path().to_path_buf())).unwrap_err();
        assert!(err.to_string().contains("pass --tend DIR"), "{err}");
    }
}
