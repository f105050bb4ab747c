//! A component built against the first `tend:plugin@0.1.0` contract (the
//! committed fixture) still loads and reconciles on this host.

use tend_e2e::{Registry, Sandbox, workspace_root};

#[test]
fn the_0_1_0_mirror_gate_fixture_loads_and_reconciles() {
    let registry = Registry::start();
    let sandbox = Sandbox::new();
    std::fs::copy(
        workspace_root().join("tests/fixtures/mirror-gate-0.1.0.wasm"),
        sandbox.path("plugins/mirror-gate.wasm"),
    )
    .unwrap();
    let certs = sandbox.path("certs.d");
    sandbox.config(&format!(
        r#"
[plugins.mirror-gate]
[plugins.mirror-gate.grants]
files = [{{ path = "{certs}", write = true }}]
http = ["http://127.0.0.1:*/*"]
[plugins.mirror-gate.config]
certs-dir = "{certs}"
[[plugins.mirror-gate.config.caches]]
upstream = "docker.io"
endpoint = "{endpoint}"
"#,
        certs = certs.display(),
        endpoint = registry.endpoint()
    ));
    let check = sandbox.tend(&["check"]);
    assert!(check.success, "{}{}", check.stdout, check.stderr);
    let out = sandbox.tend(&["reconcile", "mirror-gate"]);
    assert!(out.success, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("did files.write"), "{}", out.stdout);
    let hosts = std::fs::read_to_string(certs.join("docker.io/hosts.toml")).unwrap();
    assert!(hosts.contains(&registry.endpoint()), "{hosts}");
}
