//! `tend reconcile --record` and `tend replay`: a real reconcile of
//! mirror-gate against a real registry, recorded in-process and by the
//! daemon, replayed with the registry gone and the node untouched.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tend_e2e::{Registry, Sandbox, tend_bin};

/// mirror-gate writing one cache's hosts.toml into the sandbox's certs.d.
fn configure(sandbox: &Sandbox, registry: &Registry) -> String {
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let certs = sandbox.path("certs.d");
    std::fs::create_dir_all(&certs).unwrap();
    let certs = certs.display().to_string();
    sandbox.config(&format!(
        "[plugins.mirror-gate]\n[plugins.mirror-gate.grants]\nfiles = [{{ path = \"{certs}\", write = true }}]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.mirror-gate.config]\ncerts-dir = \"{certs}\"\n[[plugins.mirror-gate.config.caches]]\nupstream = \"docker.io\"\nendpoint = \"{}\"\n",
        registry.endpoint()
    ));
    certs
}

/// `tend replay FILE [ARGS]`: (success, stdout and stderr).
fn replay(file: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(tend_bin())
        .arg("replay")
        .arg(file)
        .args(args)
        .env("TEND_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// With the registry gone and the file the plugin wrote removed, the replay
/// of `file` needs neither, answers all `calls` from the tape and writes nothing.
fn replays_without_the_node(file: &Path, registry: Registry, certs: &str, calls: usize) {
    drop(registry);
    std::fs::remove_dir_all(certs).unwrap();
    let (same, out) = replay(file, &[]);
    assert!(same, "{out}");
    assert!(
        out.contains(&format!(
            "replayed {calls} calls identically; outcome matches"
        )),
        "{out}"
    );
    assert!(!Path::new(certs).exists(), "the replay wrote {certs}");
}

/// `tend reconcile mirror-gate --record NAME` in `sandbox`: the file, the
/// recording, its calls (as the command counted them) and what it printed.
fn record(sandbox: &Sandbox, name: &str) -> (PathBuf, serde_json::Value, Vec<String>, String) {
    let file = sandbox.path(name);
    let file_arg = file.display().to_string();
    let run = sandbox.tend(&["reconcile", "mirror-gate", "--record", &file_arg]);
    assert!(run.success, "{run:?}");
    let recorded = recording(&file);
    let names = calls(&recorded);
    assert!(
        run.stdout
            .contains(&format!("recorded {} calls to {file_arg}", names.len())),
        "{}",
        run.stdout
    );
    (file, recorded, names, run.stdout)
}

fn recording(file: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

/// Capability.operation of each recorded call.
fn calls(recording: &serde_json::Value) -> Vec<String> {
    recording["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}.{}", c["capability"], c["operation"]).replace('"', ""))
        .collect()
}

#[test]
fn a_recorded_reconcile_replays_identically_without_touching_the_node() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    let certs = configure(&sandbox, &registry);
    let (file, recorded, names, _) = record(&sandbox, "incident.json");
    assert_eq!(recorded["format"], 1);
    assert_eq!(recorded["plugin"]["name"], "mirror-gate");
    assert!(names.contains(&"http.send".to_string()), "{names:?}");
    assert!(names.contains(&"files.write".to_string()), "{names:?}");
    assert_eq!(recorded["outcome"]["returned"]["health"], "healthy");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);

    // The registry is gone and the file the plugin wrote is removed: the
    // replay needs neither, and writes nothing.
    replays_without_the_node(&file, registry, &certs, names.len());

    // The same plugin under another config: the same probes, then it
    // diverges at its first file call, naming both.
    let mut changed = recorded.clone();
    let config = changed["context"]["config"].as_str().unwrap().to_string();
    let elsewhere = sandbox.path("elsewhere").display().to_string();
    changed["context"]["config"] = config.replace(&certs, &elsewhere).into();
    let changed_file = sandbox.path("changed.json");
    std::fs::write(&changed_file, changed.to_string()).unwrap();
    let first_file_call = names.iter().position(|n| n.starts_with("files.")).unwrap();
    let (same, out) = replay(&changed_file, &[]);
    assert!(!same, "{out}");
    assert!(
        out.contains(&format!(
            "diverged at call {}: expected {}(\"{certs}",
            first_file_call + 1,
            names[first_file_call]
        )),
        "{out}"
    );
    assert!(
        out.contains("plugin called files.") && out.contains(&elsewhere),
        "{out}"
    );
    assert!(!Path::new(&elsewhere).exists() && !Path::new(&certs).exists());

    // Another plugin altogether leaves the tape at its first call.
    let chaos = tend_e2e::plugin("chaos");
    let (same, out) = replay(&file, &["--plugin", &chaos.display().to_string()]);
    assert!(!same, "{out}");
    assert!(out.contains("note: replaying"), "{out}");
    assert!(
        out.contains("diverged at call 1: expected http.send("),
        "{out}"
    );
}

#[test]
fn the_daemon_records_a_reconcile_for_the_client_to_write() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    let certs = configure(&sandbox, &registry);
    let daemon = sandbox.daemon();
    let hosts = format!("{certs}/docker.io/hosts.toml");
    tend_e2e::wait_until(Duration::from_secs(30), "the first reconcile", || {
        Path::new(&hosts).exists()
    });
    let (file, recorded, names, stdout) = record(&sandbox, "by-daemon.json");
    assert!(stdout.contains("by the tend daemon"), "{stdout}");
    assert!(names.contains(&"http.send".to_string()), "{names:?}");
    // The file was there already: the write answered "unchanged".
    let write = &recorded["calls"][names.iter().position(|n| n == "files.write").unwrap()];
    assert_eq!(write["answer"], serde_json::json!({"Ok": false}), "{write}");
    assert!(daemon.terminate(Duration::from_secs(10)));

    replays_without_the_node(&file, registry, &certs, names.len());
}

#[test]
fn a_file_that_is_no_recording_is_refused_by_name() {
    let sandbox = Sandbox::new();
    let file = sandbox.path("notes.json");
    std::fs::write(&file, r#"{"format": 99, "tend_version": "9.9.9"}"#).unwrap();
    let (ok, out) = replay(&file, &[]);
    assert!(!ok);
    assert!(
        out.contains("a recording of format 99 (it was written by tend \"9.9.9\")"),
        "{out}"
    );
}
