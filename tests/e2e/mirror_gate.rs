//! mirror-gate through the real host against a real OCI registry.

use tend_e2e::{Registry, Sandbox};

/// A mirror-gate config writing into the sandbox's certs.d, one cache per
/// (upstream, endpoint).
fn configure(sandbox: &Sandbox, caches: &[(&str, &str)], grant_files: bool) -> String {
    let certs = sandbox.path("certs.d");
    let certs = certs.display();
    let mut text =
        "[plugins.mirror-gate]\n[plugins.mirror-gate.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n"
            .to_string();
    if grant_files {
        text += &format!("files = [{{ path = \"{certs}\", write = true }}]\n");
    }
    text += &format!("[plugins.mirror-gate.config]\ncerts-dir = \"{certs}\"\n");
    for (upstream, endpoint) in caches {
        text += &format!(
            "[[plugins.mirror-gate.config.caches]]\nupstream = \"{upstream}\"\nendpoint = \"{endpoint}\"\n"
        );
    }
    sandbox.config(&text);
    certs.to_string()
}

fn read(path: impl AsRef<std::path::Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn healthy_cache_gets_a_containerd_hosts_toml() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let certs = configure(&sandbox, &[("docker.io", &registry.endpoint())], true);
    let run = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(run.success, "{run:?}");
    assert!(
        run.stdout
            .contains("mirror-gate: healthy: 1 mirror(s) active"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("did files.write {certs}/docker.io/hosts.toml")),
        "{}",
        run.stdout
    );
    let hosts = read(format!("{certs}/docker.io/hosts.toml")).expect("hosts.toml written");
    assert!(
        hosts.contains("server = \"https://registry-1.docker.io\"\n"),
        "{hosts}"
    );
    assert!(
        hosts.contains(&format!(
            "[host.\"{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            registry.endpoint()
        )),
        "{hosts}"
    );
    // Nothing left behind by the atomic write.
    let names: Vec<_> = std::fs::read_dir(format!("{certs}/docker.io"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["hosts.toml"]);
    // A second reconcile changes nothing.
    let again = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(again.stdout.contains("no changes"), "{}", again.stdout);
}

#[test]
fn unreachable_cache_gets_no_file() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let closed = format!("http://127.0.0.1:{}", tend_e2e::free_port());
    let certs = configure(&sandbox, &[("docker.io", &closed)], true);
    let run = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(run.success, "progressing is not a failure: {run:?}");
    assert!(
        run.stdout
            .contains("progressing: 0 mirror(s) active; waiting for docker.io"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Connection refused"), "{}", run.stdout);
    assert_eq!(read(format!("{certs}/docker.io/hosts.toml")), None);
}

#[test]
fn removed_upstream_loses_its_file_and_operator_files_stay() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let endpoint = registry.endpoint();
    let certs = configure(
        &sandbox,
        &[("docker.io", &endpoint), ("ghcr.io", &endpoint)],
        true,
    );
    let operators = format!("{certs}/quay.io/hosts.toml");
    std::fs::create_dir_all(format!("{certs}/quay.io")).unwrap();
    std::fs::write(&operators, "server = \"https://quay.io\"\n").unwrap();
    assert!(sandbox.tend(&["reconcile", "mirror-gate"]).success);
    assert!(read(format!("{certs}/ghcr.io/hosts.toml")).is_some());

    configure(&sandbox, &[("docker.io", &endpoint)], true);
    let run = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(
        run.stdout.contains("1 mirror(s) active, 1 removed"),
        "{}",
        run.stdout
    );
    assert!(
        !std::path::Path::new(&format!("{certs}/ghcr.io")).exists(),
        "file and its directory removed"
    );
    assert!(read(format!("{certs}/docker.io/hosts.toml")).is_some());
    assert_eq!(
        read(&operators).unwrap(),
        "server = \"https://quay.io\"\n",
        "operator's file untouched"
    );

    // Removing every cache removes mirror-gate's files, still not the operator's.
    configure(&sandbox, &[], true);
    assert!(sandbox.tend(&["reconcile", "mirror-gate"]).success);
    assert_eq!(read(format!("{certs}/docker.io/hosts.toml")), None);
    assert!(read(&operators).is_some());
}

#[test]
fn missing_files_grant_is_denied_naming_the_grant() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let certs = configure(&sandbox, &[("docker.io", &registry.endpoint())], false);
    let run = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(!run.success);
    // mirror-gate first reads any existing hosts.toml, so the read is what is denied.
    let expected = format!(
        "denied: no files grant covers {certs}/docker.io/hosts.toml: add {{ path = \"{certs}/docker.io\" }} to [plugins.mirror-gate.grants] files"
    );
    assert!(run.stdout.contains(&expected), "{}", run.stdout);
    assert_eq!(read(format!("{certs}/docker.io/hosts.toml")), None);
}

#[test]
fn plan_shows_the_write_and_changes_nothing() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let certs = configure(&sandbox, &[("docker.io", &registry.endpoint())], true);
    let run = sandbox.tend(&["plan"]);
    assert!(run.success, "{run:?}");
    assert!(
        run.stdout.contains(&format!(
            "would files.write {certs}/docker.io/hosts.toml (new file,"
        )),
        "{}",
        run.stdout
    );
    assert!(
        !std::path::Path::new(&certs).exists(),
        "plan created nothing"
    );
    // The plan's state writes were not persisted either: a real run still writes.
    let real = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(real.stdout.contains("did files.write"), "{}", real.stdout);
}

/// `tend check` names a grant the plugin can never use (its component does
/// not import the capability), and the config passes without it.
#[test]
fn check_names_a_grant_the_plugin_never_uses() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    configure(&sandbox, &[("docker.io", "http://127.0.0.1:9")], true);
    let config = std::fs::read_to_string(sandbox.path("tend.toml")).unwrap();
    let hint = "hint: mirror-gate: its cri grant is never used (the plugin does not import tend:plugin/cri): remove [plugins.mirror-gate.grants] cri";
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "{check:?}");
    assert!(!check.stdout.contains("hint:"), "{}", check.stdout);
    std::fs::write(
        sandbox.path("tend.toml"),
        config.replace(
            "[plugins.mirror-gate.grants]\n",
            "[plugins.mirror-gate.grants]\ncri = { read = true }\n",
        ),
    )
    .unwrap();
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "a hint, not an error: {check:?}");
    assert!(check.stdout.contains(hint), "{}", check.stdout);
}
