//! The node agent is only the node agent: `tend` (what the image and the
//! DaemonSet run) refuses the plugin author's commands, naming `tend-author`,
//! and carries none of their code or data: no `tend-author new` templates, no
//! publishing, no key generation. `tend-author` runs them. Both binaries are
//! the real builds under test (TEND_BIN and the `tend-author` beside it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tend_e2e::{author_bin, tend_bin, workspace_root};

fn run(binary: &Path, args: &[&str], dir: &Path) -> Output {
    Command::new(binary)
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "test")
        .env("TEND_LOG", "warn")
        .output()
        .unwrap()
}

/// Every author command, given to the node binary: a failure that names the
/// author binary and the command to run there, and nothing written.
#[test]
fn the_node_binary_refuses_the_author_commands_naming_tend_author() {
    let tmp = tempfile::tempdir().unwrap();
    let component = tmp.path().join("p.wasm");
    std::fs::write(&component, b"\0asm\x01\0\0\0").unwrap();
    // (arguments, the command refused, the command it says to run instead)
    let cases: [(&[&str], &str, &str); 3] = [
        (
            &["new", "probe", "--lang", "rust", "--dir", "my probe"],
            "`tend new` is in tend-author",
            "run `tend-author new probe --lang rust --dir 'my probe'`",
        ),
        (
            &[
                "plugins",
                "push",
                "p.wasm",
                "oci://127.0.0.1:1/p:v1",
                "--insecure",
            ],
            "`tend plugins push` is in tend-author",
            "run `tend-author plugins push p.wasm oci://127.0.0.1:1/p:v1 --insecure`",
        ),
        (
            &["plugins", "keygen", "keys"],
            "`tend plugins keygen` is in tend-author",
            "run `tend-author plugins keygen keys`",
        ),
    ];
    for (args, refused, instead) in cases {
        let out = run(&tend_bin(), args, tmp.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
        assert!(
            stderr.contains(refused) && stderr.contains(instead),
            "{args:?}: {stderr}"
        );
    }
    let mut left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["p.wasm"], "the node binary wrote something");
}

/// The same commands through `tend-author` work: a project rendered from the
/// templates, a key pair written (pushing is tests/e2e/oci.rs, through the
/// harness's `push_plugin`).
#[test]
fn tend_author_renders_a_project_and_writes_a_key_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let new = run(
        &author_bin(),
        &["new", "probe", "--lang", "rust", "--dir", "probe"],
        tmp.path(),
    );
    assert!(new.status.success(), "{new:?}");
    let manifest = std::fs::read_to_string(tmp.path().join("probe/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"probe\""), "{manifest}");
    assert!(tmp.path().join("probe/tend.toml").is_file());
    let keygen = run(&author_bin(), &["plugins", "keygen", "keys"], tmp.path());
    assert!(keygen.status.success(), "{keygen:?}");
    for file in ["keys/cosign.key", "keys/cosign.pub"] {
        assert!(tmp.path().join(file).is_file(), "no {file}");
    }
}

/// What only the author's commands hold: every template file (as
/// `include_dir!` embeds it, byte for byte; any under 64 bytes could occur
/// by chance, so is left out) and a message of the publishing and of the key
/// generation code.
fn author_only_bytes() -> Vec<(String, Vec<u8>)> {
    let mut found = vec![
        (
            "the push's plain-HTTP hint".to_string(),
            b"if it serves plain HTTP, pass --insecure".to_vec(),
        ),
        (
            "keygen's refusal to overwrite".to_string(),
            b"not overwriting a key".to_vec(),
        ),
    ];
    let mut dirs = vec![workspace_root().join("templates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.metadata().unwrap().len() >= 64 {
                found.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    found
}

/// The node binary holds none of it (the linker dropped the author's code,
/// which the node's command line never names), while the author binary
/// holds all of it: the search finds what is there.
#[test]
fn the_node_binary_carries_no_templates_publishing_or_key_generation() {
    let node = std::fs::read(tend_bin()).unwrap();
    let author = std::fs::read(author_bin()).unwrap();
    let wanted = author_only_bytes();
    assert!(wanted.len() > 10, "no templates found");
    for (what, bytes) in wanted {
        assert!(
            memchr::memmem::find(&author, &bytes).is_some(),
            "tend-author lacks {what}"
        );
        assert!(
            memchr::memmem::find(&node, &bytes).is_none(),
            "the node binary tend carries {what}"
        );
    }
}
