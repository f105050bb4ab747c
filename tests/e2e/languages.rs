//! Plugins in every language with an SDK, end to end: the starter plugin that
//! `tend-author new` writes for Rust, Python, JavaScript, C and Go (built by `cargo
//! xtask plugins` as target/plugins/LANG-probe.wasm), run by the real `tend`
//! against the project's Kubernetes API fake (tests/peers/kube-apiserver.py)
//! for both its kube call and its HTTP probe. Each exercises files, http,
//! state and kube under the narrowest grants, and is denied like any other
//! plugin when a grant is missing. Each project as `tend-author new` writes it also
//! plans off a cluster, its Node "not checked". And a JavaScript build Winch cannot
//! compile (QuickJS `--opt-size`: tail calls) still loads in the daemon, by
//! Cranelift, saying so.

use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use tend_e2e::{
    KubeApi, Sandbox, author_bin, free_port, http_get, plugin, plugin_status, tend_bin, wait_until,
};

const NODE: &str = "e2e-node";

/// `[plugins.NAME]` with its grants (`files` only when `files`) and config.
fn probe_config(name: &str, files: bool, url: &str, reports: &str) -> String {
    let files = match files {
        true => format!("files = [{{ path = \"{reports}\", write = true }}]\n"),
        false => String::new(),
    };
    format!(
        "[plugins.{name}]\n[plugins.{name}.grants]\n{files}http = [\"{url}\"]\nkube = [{{ resource = \"nodes\", verbs = [\"get\"], names = [\"$NODE\"] }}]\n[plugins.{name}.config]\nurl = \"{url}\"\nreport = \"{reports}/report.txt\"\n"
    )
}

/// The starter plugin in `lang`: a healthy run, runs counted in state across
/// processes, a Node gone, then a missing files grant.
fn starter_plugin_runs(lang: &str) {
    let api = KubeApi::start();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
    let (code, body) = api.call("POST", "/api/v1/nodes", Some(&node));
    assert_eq!(code, 201, "{body}");
    let name = format!("{lang}-probe");
    let sandbox = Sandbox::new();
    sandbox.add_plugin(&name, &name);
    let reports = sandbox.path("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let reports = reports.to_str().unwrap();
    let url = format!("{}/healthz", api.url());
    let host = api.host_kube(&sandbox);

    sandbox.config_with_host(&host, &probe_config(&name, true, &url, reports));
    api.grant_rbac(&sandbox);
    let run = sandbox.tend(&["reconcile", &name]);
    let line = format!("{name} run 1: {url} answered 200; node {NODE} found");
    assert!(run.success, "{run:?}");
    assert!(
        run.stdout.contains(&format!("{name}: healthy: {line}")),
        "{}",
        run.stdout
    );
    let report = std::fs::read_to_string(format!("{reports}/report.txt")).unwrap();
    assert_eq!(report, format!("{line}\n"));

    let (code, body) = api.call("DELETE", &format!("/api/v1/nodes/{NODE}"), None);
    assert_eq!(code, 200, "{body}");
    let run = sandbox.tend(&["reconcile", &name]);
    let line = format!("{name} run 2: {url} answered 200; node {NODE} missing");
    assert!(
        run.stdout.contains(&format!("{name}: degraded: {line}")),
        "{}",
        run.stdout
    );
    let report = std::fs::read_to_string(format!("{reports}/report.txt")).unwrap();
    assert_eq!(report, format!("{line}\n"));

    sandbox.config_with_host(&host, &probe_config(&name, false, &url, reports));
    let run = sandbox.tend(&["reconcile", &name]);
    assert!(!run.success, "{run:?}");
    let denied = format!(
        "{name}: FAILED: denied: no files grant covers {reports}/report.txt: add {{ path = \"{reports}\", write = true }} to [plugins.{name}.grants] files"
    );
    assert!(run.stdout.contains(&denied), "{}", run.stdout);
    let report = std::fs::read_to_string(format!("{reports}/report.txt")).unwrap();
    assert!(
        report.contains(" run 2: "),
        "the denied run wrote: {report}"
    );
}

#[test]
fn rust_starter_plugin() {
    starter_plugin_runs("rust");
}

#[test]
fn python_starter_plugin() {
    starter_plugin_runs("python");
}

#[test]
fn js_starter_plugin() {
    starter_plugin_runs("js");
}

#[test]
fn c_starter_plugin() {
    starter_plugin_runs("c");
}

#[test]
fn go_starter_plugin() {
    starter_plugin_runs("go");
}

/// The URL the generated tend.toml probes: a kubelet's health endpoint.
const KUBELET_HEALTHZ: &str = "http://127.0.0.1:10248/healthz";

/// A stand-in kubelet on 127.0.0.1:10248 answering every request 200, for
/// this test process's lifetime (shared by the tests running in parallel).
fn kubelet_answers_200() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:10248")
            .expect("127.0.0.1:10248 must be free: the starter's tend.toml probes it");
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
        });
    });
}

/// The project `tend-author new LANG-probe --lang LANG` writes, with the suite's
/// build of it (target/plugins/LANG-probe.wasm) as its `LANG-probe.wasm`,
/// planned as its README says, off a cluster: no [host.kube], no in-cluster
/// environment, no KUBECONFIG and a HOME with no ~/.kube/config. The plan
/// succeeds, the Node "not checked" with the host's reason, and the probe's
/// 200 alone makes it healthy.
fn starter_plans_off_a_cluster(lang: &str) {
    kubelet_answers_200();
    let name = format!("{lang}-probe");
    let tmp = tempfile::tempdir().unwrap();
    let (dir, home) = (tmp.path().join(&name), tmp.path().join("home"));
    std::fs::create_dir(&home).unwrap();
    let new = Command::new(author_bin())
        .args(["new", &name, "--lang", lang, "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(new.status.success(), "{new:?}");
    std::fs::copy(plugin(&name), dir.join(format!("{name}.wasm"))).unwrap();
    let report = format!("/var/lib/{name}/report.txt");
    let before = std::fs::read(&report).ok();
    let plan = Command::new(tend_bin())
        .args(["plan", &name, "-c", "tend.toml"])
        .current_dir(&dir)
        .env("HOME", &home)
        .env("TEND_LOG", "warn")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.status.success(), "{plan:?}");
    let healthy = format!("{name}: healthy: {name} run 1: {KUBELET_HEALTHZ} answered 200; node ");
    let why = " not checked (no Kubernetes API: not in a cluster, and no kubeconfig (";
    assert!(
        stdout.contains(&healthy) && stdout.contains(why),
        "{stdout}"
    );
    assert!(stdout.contains("; set [host.kube] kubeconfig)"), "{stdout}");
    assert_eq!(std::fs::read(&report).ok(), before, "a plan wrote {report}");
}

#[test]
fn rust_starter_plans_off_a_cluster() {
    starter_plans_off_a_cluster("rust");
}

#[test]
fn python_starter_plans_off_a_cluster() {
    starter_plans_off_a_cluster("python");
}

#[test]
fn js_starter_plans_off_a_cluster() {
    starter_plans_off_a_cluster("js");
}

#[test]
fn c_starter_plans_off_a_cluster() {
    starter_plans_off_a_cluster("c");
}

#[test]
fn go_starter_plans_off_a_cluster() {
    starter_plans_off_a_cluster("go");
}

#[test]
fn a_component_winch_cannot_compile_is_compiled_by_cranelift() {
    let api = KubeApi::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("js-tailcall", "js-tailcall");
    let reports = sandbox.path("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let url = format!("{}/healthz", api.url());
    let port = free_port();
    // Its own compile cache: a cached build would skip Winch altogether.
    let host = format!(
        "cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n{}",
        api.host_kube(&sandbox)
    );
    let plugins = probe_config("js-tailcall", true, &url, reports.to_str().unwrap());
    sandbox.config_with_host(&host, &plugins);
    api.grant_rbac(&sandbox);
    let daemon = sandbox.daemon_with_env(&[("TEND_LOG", "info")]);
    wait_until(Duration::from_secs(30), "/readyz", || {
        http_get(port, "/readyz").is_ok_and(|(_, body)| body == "ready\n")
    });
    wait_until(Duration::from_secs(60), "a reconcile", || {
        plugin_status(port, "js-tailcall")["reconciles"].as_u64() >= Some(1)
    });
    let status = plugin_status(port, "js-tailcall");
    // No Node in this API server: the plugin ran and said so.
    assert_eq!(status["last"]["health"], "degraded", "{status}");
    let ran = "answered 200; node e2e-node missing";
    assert!(
        status["last"]["message"]
            .as_str()
            .unwrap_or("")
            .ends_with(ran),
        "{status}"
    );
    assert_eq!(status["compiler"], "cranelift", "{status}");
    let log = daemon.log();
    assert!(
        log.contains("Winch cannot compile it (") && log.contains("compiled by Cranelift instead"),
        "{log}"
    );
}
