//! A local user against the real `tend` (issue 25, holes 7 and 8), each
//! test written as the attack:
//!
//! - untrusted paths: a recording naming `/dev/zero` or a FIFO as its
//!   plugin, or being one itself, is refused at once with a clear error, in
//!   bounded memory (before: 800 MB in under a second; a FIFO hung forever);
//! - Tend's own files: under `umask 000`, everything `tend run` writes under
//!   its state and cache dirs is its own (dirs 0700, files 0600); a cache dir
//!   others can write is refused, and a compiled component another user
//!   rewrote (with a matching checksum sidecar) is recompiled, never loaded;
//! - `tend-author new` (hole 9): a project path a local user swaps for a symlink to
//!   a root-owned 0600 file never makes that file 0755, and a name that is a
//!   keyword of the language is refused before anything is written.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tend_e2e::*;

/// Longer than any refusal takes; a FIFO used to block forever.
const DEADLINE: Duration = Duration::from_secs(20);
/// `tend replay` of a tiny plugin stays well under this; reading /dev/zero
/// took 800 MB.
const MAX_RSS_KIB: u64 = 200 * 1024;

fn tend(args: &[&std::ffi::OsStr]) -> Measured {
    run_measured(
        Command::new(tend_bin()).args(args).env("TEND_LOG", "warn"),
        DEADLINE,
    )
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// A real recording of chaos (mode ok), then copies of it naming `plugin`.
fn recording(sandbox: &Sandbox) -> serde_json::Value {
    sandbox
        .add_plugin("chaos", "chaos")
        .config("[plugins.chaos]\n[plugins.chaos.config]\nmode = \"ok\"\n");
    let file = sandbox.path("rec.json");
    let run = sandbox.tend(&["reconcile", "chaos", "--record", file.to_str().unwrap()]);
    assert!(run.success, "{run:?}");
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

fn refused_quickly(what: &str, run: &Measured, expected: &str) {
    assert_eq!(
        run.success,
        Some(false),
        "{what}: exited within {DEADLINE:?}: {run:?}"
    );
    assert!(run.elapsed < Duration::from_secs(10), "{what}: {run:?}");
    assert!(run.output.contains(expected), "{what}: {}", run.output);
    assert!(
        run.peak_rss_kib < MAX_RSS_KIB,
        "{what}: peak RSS {} KiB",
        run.peak_rss_kib
    );
}

#[test]
fn devices_and_fifos_named_by_a_recording_or_the_command_line_are_refused_at_once() {
    let sandbox = Sandbox::new();
    let recorded = recording(&sandbox);
    let fifo = sandbox.path("plugin.fifo");
    mkfifo(&fifo);
    let recording_fifo = sandbox.path("recording.fifo");
    mkfifo(&recording_fifo);
    let not_regular = "not a regular file (a FIFO, socket, device or directory)";
    for plugin in [Path::new("/dev/zero"), &fifo] {
        let mut hostile = recorded.clone();
        hostile["plugin"]["file"] = plugin.display().to_string().into();
        let file = sandbox.path("hostile.json");
        std::fs::write(&file, serde_json::to_vec(&hostile).unwrap()).unwrap();
        let run = tend(&["replay".as_ref(), file.as_os_str()]);
        refused_quickly(&format!("recording naming {plugin:?}"), &run, not_regular);
        assert!(
            run.output.contains(&plugin.display().to_string()),
            "{}",
            run.output
        );
        let run = tend(&[
            "replay".as_ref(),
            sandbox.path("rec.json").as_os_str(),
            "--plugin".as_ref(),
            plugin.as_os_str(),
        ]);
        refused_quickly(&format!("--plugin {plugin:?}"), &run, not_regular);
        let run = tend(&["plugins".as_ref(), "inspect".as_ref(), plugin.as_os_str()]);
        refused_quickly(&format!("inspect {plugin:?}"), &run, not_regular);
    }
    for file in [Path::new("/dev/zero"), &recording_fifo] {
        let run = tend(&["replay".as_ref(), file.as_os_str()]);
        refused_quickly(&format!("the recording {file:?}"), &run, not_regular);
        assert!(
            run.output.contains("cannot read the recording"),
            "{}",
            run.output
        );
    }
    // The honest recording still replays.
    let run = tend(&["replay".as_ref(), sandbox.path("rec.json").as_os_str()]);
    assert_eq!(run.success, Some(true), "{}", run.output);
}

/// Every file and directory below `dir`, with its mode.
fn modes(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut found = vec![(dir.to_path_buf(), std::fs::symlink_metadata(dir).unwrap())];
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path.clone());
            }
            found.push((path, meta));
        }
    }
    found
}

/// tend.toml with its own state and cache dirs, chaos in mode `mode`.
fn private_config(sandbox: &Sandbox, plugin: &str, config: &str) {
    let text = format!(
        "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"cache\"\nnode-name = \"e2e-node\"\n[plugins.{plugin}]\n{config}\n"
    );
    std::fs::write(sandbox.path("tend.toml"), text).unwrap();
}

#[test]
fn under_umask_000_tend_run_keeps_everything_it_writes_its_own() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let out = sandbox.path("out");
    std::fs::create_dir_all(&out).unwrap();
    private_config(
        &sandbox,
        "chaos",
        &format!(
            "[plugins.chaos.grants]\nfiles = [{{ path = \"{0}\", write = true }}]\n[plugins.chaos.config]\nmode = \"write\"\npath = \"{0}/f\"\ncontent = \"x\"\n",
            out.display()
        ),
    );
    let log = sandbox.path("tend.log");
    let mut daemon = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" run -c \"$1\"")
        .arg(tend_bin())
        .arg(sandbox.path("tend.toml"))
        .env("TEND_LOG", "info")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let journaled = sandbox.path("state/journal/chaos.jsonl");
    let cached = || {
        std::fs::read_dir(sandbox.path("cache"))
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            })
            .unwrap_or(false)
    };
    wait_until(
        Duration::from_secs(60),
        "a journaled write and a compiled component",
        || journaled.exists() && cached() && sandbox.path("state/state.redb").exists(),
    );
    Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap();
    wait_until(Duration::from_secs(30), "tend to exit", || {
        daemon.try_wait().unwrap().is_some()
    });
    let log = std::fs::read_to_string(&log).unwrap();
    let mut checked = 0;
    for dir in [
        sandbox.path("state"),
        sandbox.path("cache"),
        sandbox.path("plugins"),
    ] {
        for (path, meta) in modes(&dir) {
            let mode = meta.mode() & 0o7777;
            if path.starts_with(sandbox.path("plugins"))
                && (!meta.is_dir() || path == sandbox.path("plugins"))
            {
                continue; // the test's own plugins dir and copy of chaos.wasm
            }
            let expected = if meta.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(
                mode,
                expected,
                "{} has mode {mode:o}; log:\n{log}",
                path.display()
            );
            checked += 1;
        }
    }
    for written in [
        "state/state.redb",
        "state/journal/VERSION",
        "state/journal/chaos.jsonl",
        "state/journal/plans",
    ] {
        assert!(sandbox.path(written).exists(), "{written}; log:\n{log}");
    }
    assert!(checked >= 9, "{checked} paths checked");
}

#[test]
fn a_cache_dir_others_can_write_is_refused_by_tend_run() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    private_config(&sandbox, "chaos", "[plugins.chaos.config]\nmode = \"ok\"\n");
    let cache = sandbox.path("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = tend(&[
        "run".as_ref(),
        "-c".as_ref(),
        sandbox.path("tend.toml").as_os_str(),
    ]);
    assert_eq!(run.success, Some(false), "{run:?}");
    assert!(
        run.output.contains(&format!(
            "the cache dir {} is not tend's alone: another user could replace the compiled components there, native code tend runs; it is writable by every user (mode 777): run `chmod o-w {}`",
            cache.display(),
            cache.display()
        )),
        "{}",
        run.output
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing compiled there"
    );
}

/// The `.cwasm` files in `dir`.
fn artifacts(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    found.sort();
    found
}

#[test]
fn a_compiled_component_another_user_rewrote_is_recompiled_never_loaded() {
    let sandbox = Sandbox::new();
    let cache = sandbox.path("cache");
    let reconcile = |built: &str| {
        sandbox.add_plugin(built, "p");
        private_config(&sandbox, "p", "[plugins.p.config]\nmode = \"ok\"\n");
        let run = sandbox.tend(&["reconcile", "p"]);
        assert!(run.success, "{run:?}");
        run.stdout + &run.stderr
    };
    assert!(reconcile("chaos").contains("(v1)"));
    let v1 = artifacts(&cache);
    assert!(reconcile("chaos-v2").contains("(v2)"));
    let v2: Vec<PathBuf> = artifacts(&cache)
        .into_iter()
        .filter(|a| !v1.contains(a))
        .collect();
    assert_eq!((v1.len(), v2.len()), (1, 1), "{v1:?} {v2:?}");
    // Another user's rewrite: v2's native code (and its matching checksum)
    // as v1's entry.
    let sidecar = |a: &Path| a.with_extension("xxh3");
    std::fs::copy(&v2[0], &v1[0]).unwrap();
    std::fs::copy(sidecar(&v2[0]), sidecar(&v1[0])).unwrap();
    for path in [v1[0].clone(), sidecar(&v1[0])] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    let out = reconcile("chaos");
    assert!(
        out.contains("(v1)"),
        "the rewritten artifact was loaded: {out}"
    );
    assert!(!out.contains("(v2)"), "{out}");
    // Recompiled and stored again as Tend's own.
    let meta = std::fs::metadata(&v1[0]).unwrap();
    assert_eq!(meta.uid(), own_uid(), "rewritten by tend");
    assert_eq!(meta.mode() & 0o7777, 0o600);
}

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// `tend-author new NAME --lang LANG --dir DIR`.
fn tend_new(name: &str, lang: &str, dir: &Path) -> std::process::Output {
    Command::new(author_bin())
        .args(["new", name, "--lang", lang, "--dir"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn tend_new_refuses_keywords_and_never_chmods_a_symlink_swapped_in() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, lang) in [("import", "python"), ("fn", "rust"), ("func", "go")] {
        let dir = tmp.path().join(name);
        let out = tend_new(name, lang, &dir);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} {lang}: {stderr}");
        assert!(
            stderr.contains("keyword") && stderr.contains("choose another name"),
            "{stderr}"
        );
        assert!(!dir.exists(), "nothing written for {name}");
    }
    // A root-owned 0600 file, and a swapper replacing the project directory
    // with a symlink to it whenever the directory appears.
    let victim = tmp.path().join("shadow");
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dir = tmp.path().join("proj");
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (stop, swaps) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let swapper = {
        let (dir, victim, moved) = (dir.clone(), victim.clone(), tmp.path().join("moved"));
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                    let _ = std::fs::remove_dir_all(&moved);
                    if std::fs::rename(&dir, &moved).is_ok()
                        && std::os::unix::fs::symlink(&victim, &dir).is_ok()
                    {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::yield_now();
            }
        })
    };
    let (started, mut created) = (std::time::Instant::now(), 0);
    while swaps.load(Ordering::Relaxed) < 3 && started.elapsed() < Duration::from_secs(60) {
        let _ = std::fs::remove_file(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        created += usize::from(tend_new("node-probe", "c", &dir).status.success());
        let mode = std::fs::metadata(&victim).unwrap().mode() & 0o7777;
        assert_eq!(
            mode, 0o600,
            "tend-author new followed the swapped-in symlink"
        );
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(created > 0, "tend-author new never wrote the project");
    assert!(swaps.load(Ordering::Relaxed) > 0, "the swapper never raced");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
}
