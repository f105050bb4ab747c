//! What a plugin cannot do: escape its grants, outlive its deadline, outgrow its
//! memory, or take the host down with a corrupt component.

use tend_e2e::{Registry, Sandbox};

/// A chaos plugin named `name` with `mode` (TOML inline table body) and grants.
fn chaos(name: &str, mode: &str, extra: &str) -> String {
    format!(
        "[plugins.{name}]\nfile = \"plugins/chaos.wasm\"\n{extra}\n[plugins.{name}.config]\n{mode}\n"
    )
}

#[test]
fn parent_components_and_symlinks_cannot_leave_a_root() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let root = sandbox.path("root");
    let outside = sandbox.path("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "secret").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    let grant = format!(
        "[plugins.c.grants]\nfiles = [{{ path = \"{}\", write = true }}]",
        root.display()
    );
    let root = root.display();

    sandbox.config(&chaos(
        "c",
        &format!("mode = \"read\"\npath = \"{root}/../outside/secret\""),
        &grant,
    ));
    let run = sandbox.tend(&["reconcile", "c"]);
    assert!(!run.success);
    assert!(
        run.stdout.contains("invalid: ") && run.stdout.contains("`..` is not allowed"),
        "{}",
        run.stdout
    );

    sandbox.config(&chaos(
        "c",
        &format!("mode = \"read\"\npath = \"{root}/escape/secret\""),
        &grant,
    ));
    let run = sandbox.tend(&["reconcile", "c"]);
    assert!(!run.success);
    assert!(
        run.stdout.contains("denied: ") && run.stdout.contains("symlinks may not lead out of it"),
        "{}",
        run.stdout
    );

    sandbox.config(&chaos(
        "c",
        &format!("mode = \"write\"\npath = \"{root}/escape/secret\"\ncontent = \"pwned\""),
        &grant,
    ));
    let run = sandbox.tend(&["reconcile", "c"]);
    assert!(
        !run.success && run.stdout.contains("denied: "),
        "{}",
        run.stdout
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        "secret"
    );

    // Absolute paths outside every grant are denied with the grant to add.
    sandbox.config(&chaos(
        "c",
        "mode = \"read\"\npath = \"/etc/hostname\"",
        &grant,
    ));
    let run = sandbox.tend(&["reconcile", "c"]);
    assert!(
        run.stdout
            .contains("denied: no files grant covers /etc/hostname: add { path = \"/etc\" }"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_corrupt_or_truncated_component_is_named_in_the_error() {
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    sandbox.config("[plugins.mirror-gate]\n");
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "{check:?}");
    assert!(
        check.stdout.contains("ok: mirror-gate (sha256:"),
        "{}",
        check.stdout
    );

    let file = sandbox.path("plugins/mirror-gate.wasm");
    let bytes = std::fs::read(&file).unwrap();
    for (what, corrupt) in [
        ("garbage", b"this is not wasm".to_vec()),
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
    ] {
        std::fs::write(&file, corrupt).unwrap();
        let check = sandbox.tend(&["check"]);
        assert!(!check.success, "{what}");
        let expected = format!(
            "error: mirror-gate: {}: not a valid WebAssembly component",
            file.display()
        );
        assert!(check.stdout.contains(&expected), "{what}: {}", check.stdout);
        let run = sandbox.tend(&["reconcile", "mirror-gate"]);
        assert!(
            !run.success && run.stderr.contains(&file.display().to_string()),
            "{what}: {run:?}"
        );
    }
}

#[test]
fn invalid_config_names_file_line_and_column() {
    let sandbox = Sandbox::new();
    sandbox.config("[plugins.mirror-gate]\nintreval = \"10s\"\n");
    let run = sandbox.tend(&["check"]);
    assert!(!run.success);
    let expected = format!(
        "{}:8:1: unknown field `intreval`",
        sandbox.path("tend.toml").display()
    );
    assert!(run.stderr.contains(&expected), "{}", run.stderr);
}

#[test]
fn inspect_shows_world_capabilities_and_self_description() {
    let home = tempfile::tempdir().unwrap();
    let inspect = |extra: &[&str]| {
        let run = std::process::Command::new(tend_e2e::tend_bin())
            .args(["plugins", "inspect"])
            .arg(tend_e2e::plugin("mirror-gate"))
            .args(extra)
            .env("XDG_CACHE_HOME", home.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        assert!(run.status.success(), "{stdout}");
        stdout
    };
    // The user's compile cache: compiled once, then loaded.
    let cache = home.path().join("tend");
    let first = inspect(&[]);
    assert!(
        first.contains(&format!("compiled: miss ({})", cache.display())),
        "{first}"
    );
    let stdout = inspect(&[]);
    assert!(
        stdout.contains(&format!("compiled: hit ({})", cache.display())),
        "{stdout}"
    );
    let mode = std::fs::metadata(&cache).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
    let elsewhere = home.path().join("elsewhere");
    let other = inspect(&["--cache-dir", elsewhere.to_str().unwrap()]);
    assert!(other.contains("compiled: miss"), "{other}");
    assert!(elsewhere.read_dir().unwrap().next().is_some());
    let uncached = inspect(&["--no-cache"]);
    assert!(
        uncached.contains("compiled: now (no compile cache)"),
        "{uncached}"
    );
    assert!(stdout.contains("plugin:   mirror-gate 0.1.0"), "{stdout}");
    assert!(
        stdout.contains("world:    tend:plugin/plugin@0.1.0"),
        "{stdout}"
    );
    // Exactly what mirror-gate declares (its `export_plugin!` uses), no more.
    assert!(
        stdout.contains(
            "capabilities: log@0.1.0, state@0.1.0, files@0.1.0, http@0.1.0, metrics@0.1.0\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("exports:\n  tend:plugin/reconciler@0.1.0"),
        "{stdout}"
    );
}

/// A Rust plugin declaring its capabilities (`export_plugin!(P, uses: [..])`)
/// imports only those: `tend plugins inspect` says so, and a call to another
/// is refused in the guest with the fix, whatever the operator granted. v1
/// of chaos declares everything and makes the same call through the same
/// grant.
#[test]
fn a_capability_a_plugin_does_not_declare_is_neither_imported_nor_reached() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    let inspect = std::process::Command::new(tend_e2e::tend_bin())
        .args(["plugins", "inspect", "--no-cache"])
        .arg(tend_e2e::plugin("chaos-v2"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&inspect.stdout);
    assert!(inspect.status.success(), "{inspect:?}");
    assert!(
        stdout.contains("capabilities: log@0.1.0, state@0.1.0, files@0.1.0\n"),
        "{stdout}"
    );
    let get = format!(
        "mode = \"get\"\nurl = \"http://127.0.0.1:{}/v2/\"",
        registry.port
    );
    let grant = "[plugins.c.grants]\nhttp = [\"http://127.0.0.1:*/v2/*\"]";
    for (build, reached) in [("chaos", true), ("chaos-v2", false)] {
        sandbox.add_plugin(build, "chaos");
        sandbox.config(&chaos("c", &get, grant));
        let run = sandbox.tend(&["reconcile", "c"]);
        assert_eq!(run.success, reached, "{build}: {run:?}");
        let refused = "denied: http is not among the capabilities this plugin declares: add http to the uses list of its tend_sdk::export_plugin!";
        assert_eq!(
            run.stdout.contains(refused),
            !reached,
            "{build}: {}",
            run.stdout
        );
    }
}

#[test]
fn python_plugin_runs_on_the_same_host_with_the_same_grants() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("python-http-check", "python-http-check");
    let url = format!("{}/v2/", registry.endpoint());
    let closed = format!("http://127.0.0.1:{}/healthz", tend_e2e::free_port());
    sandbox.config(&format!(
        "[plugins.python-http-check]\n[plugins.python-http-check.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.python-http-check.config]\nurls = [\"{url}\"]\n"
    ));
    let run = sandbox.tend(&["reconcile", "python-http-check"]);
    assert!(run.success, "{run:?}");
    assert!(
        run.stdout
            .contains("python-http-check: healthy: 1 endpoint(s) answering"),
        "{}",
        run.stdout
    );

    // State persists across reconciles: failures in a row are counted.
    sandbox.config(&format!(
        "[plugins.python-http-check]\n[plugins.python-http-check.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.python-http-check.config]\nurls = [\"{closed}\"]\n"
    ));
    sandbox.tend(&["reconcile", "python-http-check"]);
    let run = sandbox.tend(&["reconcile", "python-http-check"]);
    assert!(
        run.stdout.contains("degraded: ") && run.stdout.contains("(2 in a row)"),
        "{}",
        run.stdout
    );

    // Without the grant the Python plugin is denied like any other.
    sandbox.config(&format!(
        "[plugins.python-http-check]\n[plugins.python-http-check.config]\nurls = [\"{url}\"]\n"
    ));
    let run = sandbox.tend(&["reconcile", "python-http-check"]);
    assert!(!run.success);
    assert!(
        run.stdout.contains("denied: GET ") && run.stdout.contains("no http grant matches"),
        "{}",
        run.stdout
    );
}

/// `tend plugins precompile` makes the builds a config's `precompiled-dir`
/// names: loaded where the compile cache has none, so nothing is compiled;
/// a build that fails its checksum, or a directory others could write, is
/// never loaded (the plugin is compiled, the reason said).
#[test]
fn precompiled_builds_load_instead_of_compiling_and_bad_ones_never_do() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let precompiled = sandbox.path("precompiled");
    // `tend plugins precompile --out precompiled plugins/NAME.wasm`: (ok, stdout, stderr).
    let precompile = |name: &str| {
        let run = std::process::Command::new(tend_e2e::tend_bin())
            .args(["plugins", "precompile", "--out"])
            .arg(&precompiled)
            .arg(sandbox.path(&format!("plugins/{name}.wasm")))
            .output()
            .unwrap();
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (run.status.success(), text(&run.stdout), text(&run.stderr))
    };
    let (made, made_out, stderr) = precompile("chaos");
    assert!(made, "{made_out}{stderr}");
    let portable = if cfg!(target_arch = "x86_64") {
        "x86-64-v2"
    } else {
        "native"
    };
    assert!(
        made_out.contains(&format!("for {portable}: ")),
        "{made_out}"
    );
    let digest = tend_e2e::digest_of(&sandbox.path("plugins/chaos.wasm"));
    let build = precompiled.join(format!("{}.cwasm", &digest["sha256:".len()..]));
    assert!(build.is_file(), "{made_out}");
    // A file that is no component: refused, naming it, and nothing written.
    std::fs::write(sandbox.path("plugins/broken.wasm"), b"\0asm broken").unwrap();
    let (made, _, stderr) = precompile("broken");
    assert!(
        !made && stderr.contains("broken.wasm: cannot compile it"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&precompiled).unwrap().count(),
        2,
        "chaos's build and checksum alone"
    );

    sandbox.config_with_host(
        "cache-dir = \"cache\"\nprecompiled-dir = \"precompiled\"",
        &chaos("c", "mode = \"noop\"", ""),
    );
    let cached = || tend_e2e::compiled_builds(&sandbox.path("cache"));
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "{}{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains(&format!("ok: c ({digest}, ")),
        "{}",
        check.stdout
    );
    assert!(check.stdout.contains(", precompiled)"), "{}", check.stdout);
    assert!(
        !check.stderr.contains("precompiled-dir"),
        "{}",
        check.stderr
    );
    let run = sandbox.tend(&["reconcile", "c"]);
    assert!(
        run.success && run.stdout.contains("nothing to do"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(cached(), 0, "nothing compiled, nothing cached");

    // A directory every user may write: not loaded, and `tend check` says so
    // with the fix; `precompile` refuses to write there.
    std::fs::set_permissions(&precompiled, std::fs::Permissions::from_mode(0o777)).unwrap();
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "{}{}", check.stdout, check.stderr);
    assert!(!check.stdout.contains(", precompiled)"), "{}", check.stdout);
    assert!(
        check.stderr.contains("precompiled-dir ")
            && check.stderr.contains("chmod o-w")
            && check.stderr.contains("its builds are not loaded"),
        "{}",
        check.stderr
    );
    assert_eq!(cached(), 1, "compiled here instead");
    let (made, _, stderr) = precompile("chaos");
    assert!(!made && stderr.contains("chmod o-w"), "{stderr}");

    // A build that is not what was written: compiled here, never loaded.
    std::fs::set_permissions(&precompiled, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(sandbox.path("cache")).unwrap();
    let mut bytes = std::fs::read(&build).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&build, bytes).unwrap();
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "{}{}", check.stdout, check.stderr);
    assert!(!check.stdout.contains(", precompiled)"), "{}", check.stdout);
    assert!(
        check.stderr.contains("checksum mismatch"),
        "{}",
        check.stderr
    );
    assert_eq!(cached(), 1, "compiled here instead");
}
