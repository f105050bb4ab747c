//! What the Kubernetes deployment relies on, with the real `tend run`:
//! `/readyz` turns 503 (saying why) on a plugin load error or a rejected
//! config and 200 again once fixed, so a DaemonSet rollout stops at the first
//! node; `NODE_NAME` and `$POD_IP` come from the environment as the downward
//! API sets them. `kubectl kustomize examples/deploy` renders what a real node
//! needs; the alerts pass `promtool`; the dashboard and alerts use only
//! metrics a live tend exports.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tend_e2e::{
    Daemon, KubeApi, Sandbox, free_port, http_get, kubectl_bin, kubelet_conditions, metric, plugin,
    status, tend_bin, time_until, wait_until, workspace_root,
};

const WITHIN: Duration = Duration::from_secs(60);

/// Wait until `/readyz` answers `code` with a body containing every needle
/// and none of `absent`;
/// returns the body (and prints how long it took: the test's measurement of
/// how soon a rollout sees a change).
fn wait_readyz(port: u16, code: u16, needles: &[&str], absent: &[&str]) -> String {
    let mut last = None;
    let what = format!("/readyz {code} with {needles:?}, without {absent:?}");
    let took = time_until(WITHIN, &what, || {
        last = http_get(port, "/readyz").ok();
        last.as_ref().is_some_and(|(c, body)| {
            *c == code
                && needles.iter().all(|n| body.contains(n))
                && !absent.iter().any(|n| body.contains(n))
        })
    });
    eprintln!("{what}: {took:?}");
    last.unwrap().1
}

/// Put `bytes` at `to` in one step (written beside it, then renamed).
fn land(bytes: &[u8], to: &Path) {
    let staging = to.with_extension("part");
    std::fs::write(&staging, bytes).unwrap();
    std::fs::rename(staging, to).unwrap();
}

/// A node config without `node-name`, listening on `$POD_IP`.
fn node_config(sandbox: &Sandbox, port: u16, extra: &str) {
    let text = format!(
        "[host]\nplugins-dir = \"plugins\"\nstate-dir = \"state\"\ncache-dir = \"{}\"\nlisten = \"$POD_IP:{port}\"\n\
         [plugins.steady]\nfile = \"plugins/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.steady.config]\nmode = \"ok\"\n\
         [plugins.other]\nfile = \"plugins/other.wasm\"\ninterval = \"100ms\"\n[plugins.other.config]\nmode = \"ok\"\n{extra}",
        workspace_root().join("target/e2e-cache").display()
    );
    land(text.as_bytes(), &sandbox.path("tend.toml"));
}

#[test]
fn readyz_is_503_while_a_plugin_fails_to_load_or_the_config_is_rejected() {
    let sandbox = Sandbox::new();
    let port = free_port();
    sandbox.add_plugin("chaos", "chaos");
    let good = std::fs::read(plugin("chaos")).unwrap();
    let other = sandbox.path("plugins/other.wasm");
    // A rollout with a corrupt plugin: the new pod never becomes ready.
    land(b"\0asm garbage", &other);
    node_config(&sandbox, port, "");
    let daemon: Daemon =
        sandbox.daemon_with_env(&[("POD_IP", "127.0.0.1"), ("NODE_NAME", "node-from-api")]);
    let body = wait_readyz(
        port,
        503,
        &[
            "plugin other failed to load",
            "not a valid WebAssembly component",
        ],
        // Once steady has loaded, only the broken plugin is named.
        &["plugin steady"],
    );
    assert_eq!(body.lines().count(), 1, "one reason: {body}");
    assert_eq!(status(port)["node_name"], "node-from-api");
    assert_eq!(metric(port, "tend_ready"), Some(0.0));

    // Fixed: ready.
    land(&good, &other);
    wait_readyz(port, 200, &["ready"], &[]);
    assert_eq!(metric(port, "tend_ready"), Some(1.0));

    // A running plugin's file replaced by a corrupt one: the old version keeps
    // serving, but the node does not run what was shipped.
    land(b"not wasm at all", &other);
    wait_readyz(
        port,
        503,
        &["plugin other: its newest file failed to load, the previous version keeps running"],
        &[],
    );
    land(&good, &other);
    wait_readyz(port, 200, &["ready"], &[]);

    // A config that does not parse: rejected at file:line, not ready, the
    // last good config keeps running; fixed, ready again.
    node_config(
        &sandbox,
        port,
        "[plugins.steady.limits]\nmemory = \"lots\"\n",
    );
    let config = sandbox.path("tend.toml");
    let body = wait_readyz(
        port,
        503,
        &[
            "config rejected, the last good config keeps running",
            &format!("{}:17:", config.display()),
        ],
        &["plugin "],
    );
    assert!(body.contains("invalid size \"lots\""), "{body}");
    assert_eq!(metric(port, "tend_config_rejected"), Some(1.0));
    node_config(&sandbox, port, "");
    wait_readyz(port, 200, &["ready"], &[]);
    assert_eq!(metric(port, "tend_config_rejected"), Some(0.0));
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// YAML documents (separated by `---` lines) as JSON values, empty ones dropped.
fn documents(yaml: &str) -> Vec<Value> {
    let mut docs = vec![String::new()];
    for line in yaml.lines() {
        match line == "---" {
            true => docs.push(String::new()),
            false => {
                let last = docs.last_mut().unwrap();
                last.push_str(line);
                last.push('\n');
            }
        }
    }
    docs.iter()
        .map(|d| yaml_serde::from_str::<Value>(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("TEND_LOG", "warn")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} (is it installed? .ci/run installs it): {e}")
        });
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl kustomize DIR`, parsed: the same with the oldest and the newest
/// kubectl the tests run (kustomize 5.0 and 5.6).
fn kustomize(dir: &Path) -> Vec<Value> {
    let render = |version: &str| {
        let kubectl = kubectl_bin(version);
        documents(&run(
            kubectl.to_str().unwrap(),
            &["kustomize", dir.to_str().unwrap()],
        ))
    };
    let newest = render("1.33");
    assert_eq!(
        render("1.27"),
        newest,
        "kubectl 1.27 and 1.33 render {}",
        dir.display()
    );
    newest
}

fn deploy_dir() -> PathBuf {
    workspace_root().join("examples/deploy")
}

fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// `[plugins.NAME]` tables of a config, and whether any names a `file`.
fn plugin_names(config: &str) -> Vec<String> {
    config
        .lines()
        .filter_map(|l| l.strip_prefix("[plugins."))
        .map(|rest| rest.split(['.', ']']).next().unwrap().to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn is_digest_pinned(image: &str) -> bool {
    image.split_once("@sha256:").is_some_and(|(name, digest)| {
        !name.is_empty()
            && digest.len() == 64
            && digest
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    })
}

/// The rendered RBAC is exactly what `tend rbac` prints for the configs
/// examples/deploy ships, no more; the node agent gets none.
fn assert_rbac_is_what_tend_rbac_prints(objects: &[Value]) {
    let deploy = deploy_dir();
    let key = |o: &Value| {
        format!(
            "{}/{}/{}",
            o["kind"].as_str().unwrap(),
            o["metadata"]["namespace"].as_str().unwrap_or(""),
            o["metadata"]["name"].as_str().unwrap()
        )
    };
    let rbac = |objects: Vec<Value>| -> BTreeMap<String, Value> {
        objects
            .into_iter()
            .filter(|o| o["apiVersion"] == "rbac.authorization.k8s.io/v1")
            .map(|o| (key(&o), o))
            .collect()
    };
    let mut printed = BTreeMap::new();
    for scope in ["node", "cluster"] {
        let config = deploy.join(format!("{scope}-config.toml"));
        printed.extend(rbac(documents(&run(
            tend_bin().to_str().unwrap(),
            &["rbac", "-c", config.to_str().unwrap()],
        ))));
    }
    assert!(!printed.is_empty());
    assert_eq!(
        rbac(objects.to_vec()),
        printed,
        "regenerate rbac-*.yaml with `tend rbac -c`"
    );
    let node_rules: Vec<&Value> = printed
        .values()
        .filter(|o| {
            o["subjects"][0]["name"] == "tend-node"
                || o["metadata"]["labels"]["app.kubernetes.io/component"] == "node"
        })
        .collect();
    assert!(
        node_rules.is_empty(),
        "no node plugin has a kube grant: {node_rules:?}"
    );
}

#[test]
fn the_kustomization_renders_a_deployment_that_works_on_real_nodes() {
    let deploy = deploy_dir();
    let objects = kustomize(&deploy);

    assert_rbac_is_what_tend_rbac_prints(&objects);
    // `kubectl apply --prune -l app.kubernetes.io/part-of=tend` sees every object.
    for o in &objects {
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/part-of"], "tend",
            "{o}"
        );
    }

    // The configs as generated ConfigMaps, each under a hashed name the pods mount.
    let mounts = |workload: &Value| -> String {
        let volumes = workload["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap();
        let config = volumes.iter().find(|v| v["name"] == "config").unwrap();
        config["configMap"]["name"].as_str().unwrap().to_string()
    };
    let ds = object(&objects, "DaemonSet", "tend-node");
    let deployment = object(&objects, "Deployment", "tend-cluster");
    for (scope, workload) in [("node", ds), ("cluster", deployment)] {
        let name = mounts(workload);
        assert!(
            name.starts_with(&format!("tend-{scope}-config-")),
            "{name}: hashed"
        );
        let map = object(&objects, "ConfigMap", &name);
        assert_eq!(map["metadata"]["namespace"], "tend-system");
        let file = std::fs::read_to_string(deploy.join(format!("{scope}-config.toml"))).unwrap();
        assert_eq!(map["data"]["tend.toml"].as_str().unwrap(), file);
        // Every plugin it names is a built-in the image ships (no `file`: the
        // plugins dir's NAME.wasm).
        for plugin in plugin_names(&file) {
            assert!(
                workspace_root()
                    .join("plugins")
                    .join(&plugin)
                    .join("Cargo.toml")
                    .exists(),
                "{scope}-config.toml names {plugin}, which is not a built-in plugin"
            );
            assert!(
                !file.contains(&format!("[plugins.{plugin}]\nfile")),
                "{plugin}"
            );
        }
        let pod = &workload["spec"]["template"]["spec"];
        assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux", "{scope}");
        let container = &pod["containers"][0];
        let image = container["image"].as_str().unwrap();
        assert!(
            is_digest_pinned(image),
            "{scope}: {image} is not pinned by digest"
        );
        assert!(
            workload["spec"]["minReadySeconds"].as_u64().unwrap() > 0,
            "{scope}"
        );
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert!(
            container["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "metrics" && p["containerPort"] == 9464),
            "{scope}: a metrics port"
        );
    }

    // The node agent: one process per node's state (maxSurge 0), the Node's
    // name and the pod's address from the downward API, AppArmor and SELinux
    // settings that let D-Bus and the host-path writes through.
    let spec = &ds["spec"];
    assert_eq!(
        spec["template"]["spec"]["automountServiceAccountToken"], false,
        "no RBAC for the node agent, so no token"
    );
    assert_eq!(spec["updateStrategy"]["rollingUpdate"]["maxSurge"], 0);
    assert_eq!(spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"], 1);
    let pod = &spec["template"]["spec"];
    let env = pod["containers"][0]["env"].as_array().unwrap();
    let field = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(field("NODE_NAME"), Some(Value::from("spec.nodeName")));
    assert_eq!(field("POD_IP"), Some(Value::from("status.podIP")));
    assert!(
        std::fs::read_to_string(deploy.join("node-config.toml"))
            .unwrap()
            .contains("\nlisten = \"$POD_IP:9464\"")
    );
    assert_eq!(
        pod["securityContext"]["appArmorProfile"]["type"],
        "Unconfined"
    );
    assert_eq!(
        spec["template"]["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/tend"],
        "unconfined"
    );
    assert_eq!(pod["securityContext"]["seLinuxOptions"]["type"], "spc_t");

    // Metrics off the node: a headless Service over both scopes' metrics port,
    // a ServiceMonitor on it, and the alerts.
    let service = object(&objects, "Service", "tend-metrics");
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(
        service["spec"]["selector"]["app.kubernetes.io/name"],
        "tend"
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
    let monitor = object(&objects, "ServiceMonitor", "tend");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "tend"
    );
    let rule = object(&objects, "PrometheusRule", "tend");
    let plain: Value = yaml_serde::from_str(
        &std::fs::read_to_string(deploy.join("monitoring/tend.rules.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rule["spec"], plain,
        "the PrometheusRule holds monitoring/tend.rules.yaml"
    );
}

/// examples/deploy with `component` (components/NAME), rendered from an
/// overlay beside a copy of it (a kustomization inside would be a cycle).
fn with_component(component: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let copy = Command::new("cp")
        .args(["-r", deploy_dir().to_str().unwrap()])
        .arg(dir.path().join("deploy"))
        .status()
        .unwrap();
    assert!(copy.success());
    let overlay = dir.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!("resources:\n- ../deploy\ncomponents:\n- ../deploy/components/{component}\n"),
    )
    .unwrap();
    kustomize(&overlay)
}

/// components/medik8s: the CRDs NodeHealthCheck's template and requests
/// need, named as node-remediator reads them (its `medik8s` module) and as
/// the Kubernetes fake serves them (the fake serves them as if installed:
/// its discovery must say what these CRDs would), the template's kind the
/// request's with NHC's "Template" suffix, and NHC's aggregated role.
#[test]
fn the_medik8s_component_defines_what_node_remediator_and_the_fake_use() {
    let objects = with_component("medik8s");
    let source =
        std::fs::read_to_string(workspace_root().join("plugins/node-remediator/src/medik8s.rs"))
            .unwrap();
    let api = KubeApi::start();
    let (code, discovery) = api.call("GET", "/apis/remediation.tend.dev/v1alpha1", None);
    assert_eq!(code, 200, "{discovery}");
    for (kind, plural) in [
        ("TendRemediation", "tendremediations"),
        ("TendRemediationTemplate", "tendremediationtemplates"),
    ] {
        let crd = object(
            &objects,
            "CustomResourceDefinition",
            &format!("{plural}.remediation.tend.dev"),
        );
        assert_eq!(crd["spec"]["group"], "remediation.tend.dev");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
        assert!(
            crd["spec"]["versions"][0]["subresources"].is_null(),
            "no status subresource: the status is patched with the object"
        );
        let served = discovery["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == plural && r["kind"] == kind && r["namespaced"] == true);
        assert!(served, "the fake serves {plural}: {discovery}");
    }
    assert!(source.contains("\"remediation.tend.dev/v1alpha1\""));
    assert!(source.contains("pub const KIND: &str = \"TendRemediation\";"));
    let template = object(&objects, "TendRemediationTemplate", "tend");
    assert!(
        template["spec"]["template"]["spec"].is_object(),
        "{template}"
    );
    let role = object(&objects, "ClusterRole", "tend-remediation-for-nhc");
    assert_eq!(
        role["metadata"]["labels"]["rbac.ext-remediation/aggregate-to-ext-remediation"],
        "true"
    );
}

/// components/hot-reload: one unhashed ConfigMap name, so kubelet swaps the
/// mounted config in place and every node reloads it.
#[test]
fn the_hot_reload_component_mounts_configmaps_under_fixed_names() {
    let objects = with_component("hot-reload");
    assert_rbac_is_what_tend_rbac_prints(&objects);
    for (scope, kind, name) in [
        ("node", "DaemonSet", "tend-node"),
        ("cluster", "Deployment", "tend-cluster"),
    ] {
        let workload = object(&objects, kind, name);
        let volumes = workload["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap();
        assert!(
            volumes
                .iter()
                .any(|v| v["configMap"]["name"] == format!("{name}-config")),
            "{scope}: {volumes:?}"
        );
        let map = object(&objects, "ConfigMap", &format!("{name}-config"));
        let file =
            std::fs::read_to_string(deploy_dir().join(format!("{scope}-config.toml"))).unwrap();
        assert_eq!(map["data"]["tend.toml"].as_str().unwrap(), file);
    }
}

/// `promtool check rules` and `promtool test rules` (one case per alert that
/// fires and one that does not). Fails, never skips, without promtool.
#[test]
fn the_alerting_rules_check_and_pass_their_unit_tests() {
    let monitoring = deploy_dir().join("monitoring");
    let checked = run(
        "promtool",
        &[
            "check",
            "rules",
            monitoring.join("tend.rules.yaml").to_str().unwrap(),
        ],
    );
    assert!(checked.contains("SUCCESS: 11 rules found"), "{checked}");
    let tested = Command::new("promtool")
        .args(["test", "rules", "tend.rules.test.yaml"])
        .current_dir(&monitoring)
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    let out = String::from_utf8_lossy(&tested.stdout).into_owned()
        + &String::from_utf8_lossy(&tested.stderr);
    assert!(tested.status.success() && out.contains("SUCCESS"), "{out}");
    // Every alert has a case that fires and a case that does not.
    let tests = std::fs::read_to_string(monitoring.join("tend.rules.test.yaml")).unwrap();
    let tests: Value = yaml_serde::from_str(&tests).unwrap();
    let rules: Value =
        yaml_serde::from_str(&std::fs::read_to_string(monitoring.join("tend.rules.yaml")).unwrap())
            .unwrap();
    for rule in rules["groups"][0]["rules"].as_array().unwrap() {
        let alert = rule["alert"].as_str().unwrap();
        let evals: Vec<&Value> = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
            .filter(|e| e["alertname"] == alert)
            .collect();
        let fires = |e: &&Value| e["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
        assert!(evals.iter().any(fires), "{alert}: no case where it fires");
        assert!(
            evals.iter().any(|e| !fires(e)),
            "{alert}: no case where it stays quiet"
        );
    }
}

/// Every `tend_*` metric name in an expression (histogram series by family).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("tend_") {
        let before = rest[..at].chars().last();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            let name = &tail[..end];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            names.insert(family.to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// Families plugins export (`tend_plugin_<name>`), and the built-in plugin
/// that exports each: a daemon without that plugin's peers cannot show them,
/// so the test checks the plugin's source declares them.
const PLUGIN_FAMILIES: [(&str, &str, &str); 3] = [
    (
        "tend_plugin_breaker_open",
        "node-reaper",
        "\"breaker_open\"",
    ),
    (
        "tend_plugin_remediation_overdue_timestamp_seconds",
        "node-remediator",
        "\"remediation_overdue_timestamp_seconds\"",
    ),
    (
        "tend_plugin_remediation_exhausted",
        "node-remediator",
        "\"remediation_exhausted\"",
    ),
];

/// The dashboard's queries and the alerts' expressions use only metrics a
/// live tend exports: a real daemon with plugins that succeed, fail and lead.
#[test]
fn every_metric_the_dashboard_and_alerts_use_is_on_a_live_metrics_page() {
    let monitoring = deploy_dir().join("monitoring");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring.join("tend-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            used.extend(metric_names(target["expr"].as_str().unwrap()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        used.extend(metric_names(variable["definition"].as_str().unwrap_or("")));
    }
    let rules = std::fs::read_to_string(monitoring.join("tend.rules.yaml")).unwrap();
    for line in rules.lines().filter(|l| {
        !l.trim_start().starts_with("description") && !l.trim_start().starts_with("summary")
    }) {
        used.extend(metric_names(line));
    }
    assert!(used.len() >= 12, "{used:?}");

    let api = KubeApi::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("chaos", "chaos");
    let port = free_port();
    let plugins = "[plugins.steady]\nfile = \"plugins/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.steady.config]\nmode = \"ok\"\n\
                   [plugins.broken]\nfile = \"plugins/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.broken.config]\nmode = \"fail\"\n";
    let host = format!(
        "listen = \"127.0.0.1:{port}\"\n{}[host.leader-election]\nnamespace = \"kube-system\"\nname = \"tend\"\nlease-duration = \"6s\"\nrenew-deadline = \"4s\"\nretry-period = \"1s\"\n",
        api.host_kube(&sandbox)
    );
    sandbox.config_with_host(&host, plugins);
    api.grant_rbac(&sandbox);
    let daemon = sandbox.daemon();
    // The compile cache's counter counts the optimized (Cranelift) build,
    // which comes after the quick one the first reconciles run on.
    wait_until(
        WITHIN,
        "a success, a failure, the Lease and the optimized build",
        || {
            metric(port, "tend_leader") == Some(1.0)
                && metric(port, "tend_plugin_last_success_timestamp_seconds").is_some()
                && metric(port, "tend_plugin_consecutive_failures").is_some_and(|f| f >= 1.0)
                && metric(port, "tend_compile_cache_total").is_some()
        },
    );
    // A config reload, so the reload counter has a series.
    sandbox.config_with_host(&host, &plugins.replace("100ms", "200ms"));
    wait_until(WITHIN, "the config reloaded", || {
        metric(port, "tend_reloads_total").is_some()
    });
    let (_, page) = http_get(port, "/metrics").unwrap();
    let exported = metric_names(&page);
    let missing: Vec<&String> = used
        .iter()
        .filter(|name| !exported.contains(*name))
        .filter(|name| {
            !PLUGIN_FAMILIES.iter().any(|(family, plugin, declared)| {
                *name == family
                    && std::fs::read_to_string(
                        workspace_root().join(format!("plugins/{plugin}/src/lib.rs")),
                    )
                    .unwrap()
                    .contains(declared)
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "used but not exported: {missing:?}\n{page}"
    );
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// The alerting rules (monitoring/tend.rules.yaml), each with the labels its
/// text names.
fn alert_rules() -> Vec<(String, String, BTreeSet<String>)> {
    let path = deploy_dir().join("monitoring/tend.rules.yaml");
    let rules: Value = yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rules = rules["groups"][0]["rules"].as_array().unwrap().clone();
    rules
        .iter()
        .map(|rule| {
            let text = rule["annotations"].to_string();
            let labels = (text.split("$labels.").skip(1))
                .map(|rest| rest.split(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
                .filter_map(|mut words| words.next().map(str::to_string))
                .collect();
            let alert = rule["alert"].as_str().unwrap().to_string();
            (alert, rule["expr"].as_str().unwrap().to_string(), labels)
        })
        .collect()
}

/// Every alert's expression, evaluated by a real Prometheus scraping live
/// tends (as the ServiceMonitor does: job `tend-metrics`, a `node` label),
/// answers in the state the alert describes, with every label its text names:
/// on `sick-node` a plugin that fails, one whose file is missing, one over its
/// budget, node-reaper with its `not_ready` breaker open (its one Node
/// NotReady), node-remediator's ladder exhausted (one step that never
/// verifies: KernelDeadlock stays True) and another's overdue (its drain
/// refused, not granted: held back past `alert-after-ms`) and, later, a config rejected and the daemon killed (TendDown); on
/// `follower-node` a replica whose Lease another holder keeps (no leader).
/// On `well-node`, a healthy tend beside them, none of the per-node alerts
/// answers. (`for:` is promtool's part, in the rules' unit tests.)
#[test]
fn every_alert_answers_on_live_tends_in_the_state_it_describes() {
    use tend_e2e::cloud::{CloudPeer, Provider};
    use tend_e2e::peers::prometheus::Prometheus;
    let api = KubeApi::start();
    let cloud = CloudPeer::start(Provider::OpenStack);
    cloud.add_instance("never-registered", &[("kubernetes-cluster", "alerts")]);
    let env = cloud.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Scraping from before the tends start: a counter's first rise is seen.
    let (sick_port, follower_port, well_port) = (free_port(), free_port(), free_port());
    let prometheus = Prometheus::start(
        &deploy_dir().join("monitoring/tend.rules.yaml"),
        &[
            (sick_port, "sick-node"),
            (follower_port, "follower-node"),
            (well_port, "well-node"),
        ],
    );

    // The sick Node: NotReady, with a KernelDeadlock nothing clears.
    api.seed_node("sick-node");
    let mut conditions = kubelet_conditions().as_array().unwrap().clone();
    for condition in &mut conditions {
        if condition["type"] == "Ready" {
            condition["status"] = "False".into();
        }
    }
    conditions.push(
        serde_json::json!({"type": "KernelDeadlock", "status": "True", "reason": "TaskHung"}),
    );
    api.merge_patch(
        "/api/v1/nodes/sick-node/status",
        &serde_json::json!({"status": {"conditions": conditions}}),
    );

    let sick = Sandbox::new();
    sick.add_plugin("chaos", "chaos");
    sick.add_plugin("node-reaper", "node-reaper");
    sick.add_plugin("node-remediator", "node-remediator");
    let out = sick.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let sick_host = format!(
        "listen = \"127.0.0.1:{sick_port}\"\n[host.budgets.writes]\noperations = [\"files.write\"]\nmax = 1\nper = \"1h\"\n{}{}",
        api.host_kube(&sick),
        cloud.host_config()
    );
    let sick_plugins = format!(
        r#"[plugins.broken]
file = "plugins/chaos.wasm"
interval = "100ms"
[plugins.broken.config]
mode = "fail"
[plugins.gone]
file = "plugins/gone.wasm"
[plugins.writer]
file = "plugins/chaos.wasm"
interval = "200ms"
[plugins.writer.grants]
files = [{{ path = "{out}", write = true }}]
[plugins.writer.config]
mode = "flood"
dir = "{out}"
count = 3
name-len = 8
[plugins.node-reaper]
interval = "1s"
[plugins.node-reaper.grants]
cloud = {{ operations = ["list-instances"], instances = [{{ tag = "kubernetes-cluster", value = "alerts" }}] }}
kube = [{{ resource = "nodes", verbs = ["get", "list", "watch"] }}]
[plugins.node-reaper.config]
owner = {{ tag = "kubernetes-cluster", value = "alerts" }}
[plugins.node-remediator]
interval = "1s"
[plugins.node-remediator.grants]
kube = [
  {{ resource = "nodes", verbs = ["get", "list", "watch", "patch"], names = ["$NODE"], fields = ["spec.unschedulable", "metadata.annotations[tend.dev/replace-requested]"] }},
  {{ resource = "pods", verbs = ["get", "list"], field-selector = "spec.nodeName=$NODE" }},
  {{ resource = "pods/eviction", verbs = ["create"], field-selector = "spec.nodeName=$NODE" }},
]
[plugins.node-remediator.config]
conditions = ["KernelDeadlock"]
steps = [{{ action = "replace" }}]
verify-within-ms = 1000
[plugins.held-remediator]
file = "plugins/node-remediator.wasm"
interval = "1s"
[plugins.held-remediator.grants]
kube = [{{ resource = "nodes", verbs = ["get", "list", "watch"], names = ["$NODE"] }}]
[plugins.held-remediator.config]
conditions = ["KernelDeadlock"]
steps = [{{ action = "replace" }}]
alert-after-ms = 1000
"#,
        out = out.display()
    );
    sick.config_on_node("sick-node", &sick_host, &sick_plugins);
    api.grant_rbac(&sick);
    let sick_daemon = sick.daemon_with_env(&env);

    // Another holder keeps the Lease for an hour: the follower never leads.
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "alerts", "namespace": "kube-system"},
        "spec": {"holderIdentity": "another-host", "leaseDurationSeconds": 3600, "renewTime": now, "acquireTime": now},
    });
    let (code, body) = api.call(
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        Some(&lease),
    );
    assert_eq!(code, 201, "{body}");
    let follower = Sandbox::new();
    let follower_host = format!(
        "listen = \"127.0.0.1:{follower_port}\"\n{}[host.leader-election]\nnamespace = \"kube-system\"\nname = \"alerts\"\n",
        api.host_kube(&follower)
    );
    follower.config_on_node("follower-node", &follower_host, "");
    api.grant_rbac(&follower);
    let _follower_daemon = follower.daemon();

    let well = Sandbox::new();
    well.add_plugin("chaos", "chaos");
    let well_host = format!("listen = \"127.0.0.1:{well_port}\"\n");
    well.config_on_node(
        "well-node",
        &well_host,
        "[plugins.steady]\nfile = \"plugins/chaos.wasm\"\ninterval = \"2s\"\n[plugins.steady.config]\nmode = \"ok\"\n",
    );
    let _well_daemon = well.daemon();

    let refused = |line: &str| {
        (line.strip_prefix("tend_budget_refusals_total{plugin=\"writer\"} "))
            .is_some_and(|count| count != "0")
    };
    wait_until(WITHIN, "the breaker open and a write refused", || {
        let (_, page) = http_get(sick_port, "/metrics").unwrap_or_default();
        metric(sick_port, "tend_plugin_breaker_open").is_some() && page.lines().any(refused)
    });
    // A config the sick tend rejects (the good one keeps running).
    sick.config_on_node(
        "sick-node",
        &sick_host,
        &format!("{sick_plugins}[plugins.broken.bad]\n"),
    );
    wait_until(WITHIN, "the config rejected", || {
        metric(sick_port, "tend_config_rejected") == Some(1.0)
    });

    let on_node = |series: &[Value], node: &str| series.iter().any(|s| s["metric"]["node"] == node);
    let answers = |alert: &str, expr: &str, node: Option<&str>| -> Vec<Value> {
        let mut series = vec![];
        wait_until(WITHIN, &format!("{alert} to answer"), || {
            series = prometheus.query(expr);
            !series.is_empty() && node.is_none_or(|n| on_node(&series, n))
        });
        series
    };
    let mut checked = vec![];
    for (alert, expr, labels) in alert_rules() {
        let node = match alert.as_str() {
            "TendDown" => continue,
            "TendLeaderMissing" => None,
            _ => Some("sick-node"),
        };
        let series = answers(&alert, &expr, node);
        for s in &series {
            for label in &labels {
                assert!(
                    s["metric"][label].is_string(),
                    "{alert}: its text names $labels.{label}, missing from {s}"
                );
            }
        }
        assert!(
            !on_node(&series, "well-node"),
            "{alert} answers for the healthy tend: {series:?}"
        );
        checked.push(alert);
    }
    let (_, rules_state) = http_get(prometheus.port, "/api/v1/rules").unwrap();
    assert!(
        rules_state.contains("\"health\":\"ok\"") && !rules_state.contains("\"health\":\"err\""),
        "{rules_state}\n{}",
        prometheus.log()
    );

    drop(sick_daemon);
    let rules = alert_rules();
    let (_, expr, _) = rules
        .iter()
        .find(|(alert, ..)| alert == "TendDown")
        .unwrap();
    let down = answers("TendDown", expr, Some("sick-node"));
    assert!(!on_node(&down, "well-node"), "{down:?}");
    checked.push("TendDown".into());
    assert_eq!(checked.len(), rules.len(), "{checked:?}");
}
