//! The fake Kubernetes API server (tests/peers/kube-apiserver.py) is faithful
//! enough for real clients: real kubectl (the oldest and the newest this
//! machine has, 1.28 and 1.33) gets, lists, applies (client- and server-side),
//! patches, deletes, watches and waits against it, and raw HTTP checks what
//! kubectl hides (Status reasons, 410 after compaction, bookmarks, paging).
//! Authentication and RBAC too: the admin token, ServiceAccount tokens held
//! to their bindings, and no credentials answered as a real server answers
//! system:anonymous. Every wait is on a condition with a deadline.

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use tend_e2e::{KubeApi, KubeWatch, Kubectl, wait_until, workspace_root};

/// The kubectl versions every kubectl test runs with.
const KUBECTLS: [&str; 2] = ["1.28", "1.33"];
const WITHIN: Duration = Duration::from_secs(20);

/// Run `test` once per kubectl version, each against a fresh server.
fn each_kubectl(test: impl Fn(&KubeApi, &Kubectl)) {
    for version in KUBECTLS {
        let api = KubeApi::start();
        let kubectl = Kubectl::version(version, &api);
        eprintln!("--- kubectl {version} against {}", api.url());
        test(&api, &kubectl);
    }
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no resourceVersion in {obj}"))
        .parse()
        .unwrap()
}

fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether a process is running (a zombie is not: it is only waiting to be reaped).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
        })
        .unwrap_or(false)
}

/// PIDs of running processes whose command line mentions `needle`.
fn processes_naming(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) && running(pid) {
            found.push(pid);
        }
    }
    found
}

fn configmap(name: &str, data: &[(&str, &str)]) -> String {
    let data: String = data
        .iter()
        .map(|(k, v)| format!("  {k}: \"{v}\"\n"))
        .collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n{data}")
}

fn deployment(replicas: u32, track: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web, track: {track}}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: app
        image: busybox:1.36
"
    )
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {app: p}
spec:
  containers:
  - name: c
    image: busybox:1.36
";

const LEASE: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: leader
  namespace: kube-system
spec:
  holderIdentity: node-a
  leaseDurationSeconds: 15
  renewTime: \"2026-01-01T00:00:00.000000Z\"
";

#[test]
fn starts_fast_and_stops_by_pid_leaving_nothing_behind() {
    let started = Instant::now();
    let mut api = KubeApi::start();
    let took = started.elapsed();
    eprintln!("the fake API server answered GET /version {took:?} after spawn");
    assert!(took < Duration::from_secs(5), "slow start: {took:?}");
    let (pid, port, dir) = (api.pid(), api.port(), api.dir().to_path_buf());
    assert!(running(pid));
    assert_eq!(
        read(&dir.join("kube-apiserver.pid")).trim(),
        pid.to_string()
    );
    assert_eq!(processes_naming(dir.to_str().unwrap()), vec![pid]);
    // An open watch does not hold the server up.
    let mut watch = api.watch("/api/v1/nodes?watch=1");
    wait_until(WITHIN, "the watch to be open", || {
        api.open_watches("nodes") == 1
    });
    let stopping = Instant::now();
    assert!(api.stop(), "the server did not exit on SIGTERM");
    eprintln!("stopped in {:?}", stopping.elapsed());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "PID {pid} remains"
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(watch.next(Duration::from_secs(5)).is_none());
    assert!(!dir.join("kube-apiserver.pid").exists() && !dir.join("port").exists());
    assert!(processes_naming(dir.to_str().unwrap()).is_empty());

    // The script (for people and demos) starts and stops it the same way.
    let script = workspace_root().join("tests/peers/kube-apiserver.sh");
    let sdir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = std::process::Command::new(&script)
        .arg("start")
        .arg(sdir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("kube-apiserver.sh start took {:?}", started.elapsed());
    let url = String::from_utf8(output.stdout).unwrap().trim().to_string();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let pid: u32 = read(&sdir.path().join("kube-apiserver.pid"))
        .trim()
        .parse()
        .unwrap();
    assert!(running(pid));
    let (status, body) = tend_e2e::http_get(port, "/version").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("gitVersion"));
    let status = std::process::Command::new(&script)
        .arg("stop")
        .arg(sdir.path())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(!running(pid), "PID {pid} still runs after stop");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(processes_naming(sdir.path().to_str().unwrap()).is_empty());
}

#[test]
fn kubectl_gets_and_lists_json_with_label_and_field_selectors() {
    each_kubectl(|api, k| {
        for (name, tier) in [
            ("a", Some("front")),
            ("b", Some("back")),
            ("c", Some("front")),
            ("d", None),
        ] {
            k.ok(&["create", "configmap", name, "--from-literal=k=v"]);
            if let Some(tier) = tier {
                k.ok(&["label", "configmap", name, &format!("tier={tier}")]);
            }
        }
        let list = k.json(&["get", "configmaps"]);
        assert_eq!(names(&list), ["a", "b", "c", "d"]);
        let items = list["items"].as_array().unwrap();
        let mut uids = std::collections::HashSet::new();
        let mut rvs = std::collections::HashSet::new();
        for item in items {
            let uid = item["metadata"]["uid"].as_str().unwrap();
            assert_eq!(uid.len(), 36, "uid {uid}");
            assert!(uids.insert(uid.to_string()));
            assert!(rvs.insert(rv(item)));
            tend_e2e::epoch_ms(item["metadata"]["creationTimestamp"].as_str().unwrap());
            assert_eq!(item["data"]["k"], "v");
        }
        // The label changes came after every create: b's label RV is above a's.
        let get = |n: &str| k.json(&["get", "configmap", n]);
        assert!(rv(&get("b")) > rv(&get("a")));
        assert_eq!(get("a")["metadata"]["uid"], items[0]["metadata"]["uid"]);
        for (selector, want) in [
            ("tier=front", vec!["a", "c"]),
            ("tier==front", vec!["a", "c"]),
            ("tier!=front", vec!["b", "d"]),
            ("tier in (back,other)", vec!["b"]),
            ("tier notin (back)", vec!["a", "c", "d"]),
            ("tier", vec!["a", "b", "c"]),
            ("!tier", vec!["d"]),
            ("tier=front,tier!=back", vec!["a", "c"]),
        ] {
            assert_eq!(
                names(&k.json(&["get", "configmaps", "-l", selector])),
                want,
                "-l {selector}"
            );
        }
        assert_eq!(
            names(&k.json(&["get", "cm", "--field-selector", "metadata.name=b"])),
            ["b"]
        );
        assert_eq!(
            names(&k.json(&["get", "cm", "--field-selector", "metadata.name!=b"])),
            ["a", "c", "d"]
        );
        let out = k.run(&["get", "cm", "--field-selector", "data.k=v"]);
        assert_eq!(out.code, Some(1));
        assert!(
            out.stderr.contains("field label not supported: data.k"),
            "{}",
            out.stderr
        );
        // Human output is the server's Table.
        let table = k.ok(&["get", "configmaps", "-l", "tier=front"]);
        assert!(
            table.starts_with("NAME") && table.contains("DATA"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 3, "{table}");
        // Raw: a typed list whose resourceVersion is the server's, and one global
        // counter across resource types.
        let (status, raw) = api.call("GET", "/api/v1/namespaces/default/configmaps", None);
        assert_eq!(status, 200);
        assert_eq!(raw["kind"], "ConfigMapList");
        let list_rv = rv(&raw);
        assert!(
            raw["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| rv(i) <= list_rv)
        );
        assert_eq!(list_rv, api.resource_version());
        k.ok(&["create", "namespace", "other"]);
        assert_eq!(rv(&k.json(&["get", "namespace", "other"])), list_rv + 1);
        // Namespaces scope lists; -A lists them all.
        k.ok(&["create", "configmap", "e", "-n", "other"]);
        assert_eq!(names(&k.json(&["get", "cm", "-n", "other"])), ["e"]);
        assert_eq!(
            names(&k.json(&["get", "cm", "-A"])),
            ["a", "b", "c", "d", "e"]
        );
    });
}

#[test]
fn kubectl_applies_client_side_and_server_side() {
    each_kubectl(|api, k| {
        let out = k.apply(&deployment(1, "v1"), &[]);
        assert!(
            out.stdout.contains("deployment.apps/web created"),
            "{out:?}"
        );
        let first = k.json(&["get", "deployment", "web"]);
        assert_eq!(first["metadata"]["generation"], 1);
        assert!(
            first["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .is_string()
        );
        // The same manifest again: nothing to patch, nothing written.
        let out = k.apply(&deployment(1, "v1"), &[]);
        assert!(
            out.stdout.contains("deployment.apps/web unchanged"),
            "{out:?}"
        );
        assert_eq!(rv(&k.json(&["get", "deployment", "web"])), rv(&first));
        // A label: configured, generation unchanged (metadata is not spec).
        let seq = api.request_seq();
        let out = k.apply(&deployment(1, "v2"), &[]);
        assert!(
            out.stdout.contains("deployment.apps/web configured"),
            "{out:?}"
        );
        let second = k.json(&["get", "deployment", "web"]);
        assert_eq!(second["metadata"]["labels"]["track"], "v2");
        assert_eq!(second["metadata"]["generation"], 1);
        assert!(rv(&second) > rv(&first));
        let patches: Vec<Value> = api
            .requests_since(seq)
            .into_iter()
            .filter(|r| r["verb"] == "patch")
            .collect();
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert_eq!(
            patches[0]["contentType"],
            "application/strategic-merge-patch+json"
        );
        assert_eq!(
            patches[0]["query"]["fieldManager"],
            "kubectl-client-side-apply"
        );
        // The spec: generation 2.
        let out = k.apply(&deployment(3, "v2"), &[]);
        assert!(
            out.stdout.contains("deployment.apps/web configured"),
            "{out:?}"
        );
        let third = k.json(&["get", "deployment", "web"]);
        assert_eq!(third["spec"]["replicas"], 3);
        assert_eq!(third["metadata"]["generation"], 2);

        // Server-side apply: created by an apply patch, fields owned by kubectl.
        let seq = api.request_seq();
        let out = k.apply(
            &configmap("ssa", &[("k", "v"), ("x", "1")]),
            &["--server-side"],
        );
        assert!(
            out.stdout.contains("configmap/ssa serverside-applied"),
            "{out:?}"
        );
        let applies: Vec<Value> = api
            .requests_since(seq)
            .into_iter()
            .filter(|r| r["verb"] == "patch")
            .collect();
        assert_eq!(applies.len(), 1, "{applies:?}");
        assert_eq!(applies[0]["contentType"], "application/apply-patch+yaml");
        assert_eq!(applies[0]["query"]["fieldManager"], "kubectl");
        assert_eq!(applies[0]["code"], 201);
        let cm = k.json(&["get", "cm", "ssa", "--show-managed-fields"]);
        let managed = &cm["metadata"]["managedFields"][0];
        assert_eq!(managed["manager"], "kubectl");
        assert_eq!(managed["operation"], "Apply");
        assert!(
            managed["fieldsV1"]["f:data"]["f:x"].is_object(),
            "{managed}"
        );
        // The same apply: a no-op (no new resourceVersion).
        let out = k.apply(
            &configmap("ssa", &[("k", "v"), ("x", "1")]),
            &["--server-side"],
        );
        assert!(out.success(), "{out:?}");
        assert_eq!(rv(&k.json(&["get", "cm", "ssa"])), rv(&cm));
        // A field the manager no longer applies, owned by nobody else, goes.
        let out = k.apply(&configmap("ssa", &[("k", "v")]), &["--server-side"]);
        assert!(out.success(), "{out:?}");
        assert_eq!(k.json(&["get", "cm", "ssa"])["data"], json!({"k": "v"}));
        // Another manager changing kubectl's field: a conflict, unless forced.
        let other = configmap("ssa", &[("k", "theirs")]);
        let out = k.apply(&other, &["--server-side", "--field-manager=other"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains("conflict with \"kubectl\"") && out.stderr.contains(".data.k"),
            "{}",
            out.stderr
        );
        assert_eq!(k.json(&["get", "cm", "ssa"])["data"]["k"], "v");
        let out = k.apply(
            &other,
            &[
                "--server-side",
                "--field-manager=other",
                "--force-conflicts",
            ],
        );
        assert!(out.success(), "{out:?}");
        assert_eq!(k.json(&["get", "cm", "ssa"])["data"]["k"], "theirs");
        // The same value from another manager is shared, not a conflict.
        let out = k.apply(
            &configmap("ssa", &[("k", "theirs")]),
            &["--server-side", "--field-manager=third"],
        );
        assert!(out.success(), "{out:?}");
    });
}

#[test]
fn kubectl_patches_merge_json_and_strategic() {
    each_kubectl(|_api, k| {
        assert!(k.apply(&deployment(1, "v1"), &[]).success());
        k.ok(&[
            "patch",
            "deployment",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"patched":"merge"}}}"#,
        ]);
        let d = k.json(&["get", "deployment", "web"]);
        assert_eq!(
            d["metadata"]["labels"],
            json!({"app": "web", "track": "v1", "patched": "merge"})
        );
        assert_eq!(d["metadata"]["generation"], 1);
        k.ok(&[
            "patch",
            "deployment",
            "web",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":5}]"#,
        ]);
        let d = k.json(&["get", "deployment", "web"]);
        assert_eq!(d["spec"]["replicas"], 5);
        assert_eq!(d["metadata"]["generation"], 2);
        // A JSON patch whose test fails changes nothing.
        let out = k.run(&["patch", "deployment", "web", "--type", "json", "-p", r#"[{"op":"test","path":"/spec/replicas","value":9},{"op":"replace","path":"/spec/replicas","value":9}]"#]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains("the server rejected our request"),
            "{}",
            out.stderr
        );
        assert_eq!(k.json(&["get", "deployment", "web"])["spec"]["replicas"], 5);
        // A patch naming another UID changes nothing: 422, the UID is immutable.
        let stale = r#"{"metadata":{"uid":"another","labels":{"stale":"yes"}}}"#;
        let out = k.run(&["patch", "deployment", "web", "--type", "merge", "-p", stale]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains("metadata.uid") && out.stderr.contains("field is immutable"),
            "{}",
            out.stderr
        );
        let d = k.json(&["get", "deployment", "web"]);
        assert!(d["metadata"]["labels"].get("stale").is_none(), "{d}");
        // Strategic merge (kubectl's default): containers merge by name...
        let sidecar = r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox:1.37"}]}}}}"#;
        k.ok(&["patch", "deployment", "web", "-p", sidecar]);
        let containers = |d: &Value| -> Vec<String> {
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c["name"].as_str().unwrap(),
                        c["image"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let d = k.json(&["get", "deployment", "web"]);
        assert_eq!(containers(&d), ["app=busybox:1.36", "sidecar=busybox:1.37"]);
        // ...and an item's $patch: delete removes it.
        k.ok(&[
            "patch",
            "deployment",
            "web",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","$patch":"delete"}]}}}}"#,
        ]);
        assert_eq!(
            containers(&k.json(&["get", "deployment", "web"])),
            ["sidecar=busybox:1.37"]
        );
        // A merge patch replaces the list.
        k.ok(&["patch", "deployment", "web", "--type", "merge", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"solo","image":"busybox:1"}]}}}}"#]);
        assert_eq!(
            containers(&k.json(&["get", "deployment", "web"])),
            ["solo=busybox:1"]
        );
        // A patch that changes nothing writes nothing.
        let before = rv(&k.json(&["get", "deployment", "web"]));
        let out = k.ok(&[
            "patch",
            "deployment",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":5}}"#,
        ]);
        assert!(out.contains("(no change)"), "{out}");
        assert_eq!(rv(&k.json(&["get", "deployment", "web"])), before);
        // Patching what does not exist.
        let out = k.run(&["patch", "deployment", "nope", "--type", "merge", "-p", "{}"]);
        assert_eq!(out.code, Some(1));
        assert!(
            out.stderr.contains(r#"deployments.apps "nope" not found"#),
            "{}",
            out.stderr
        );
    });
}

#[test]
fn kubectl_delete_then_not_found() {
    each_kubectl(|api, k| {
        k.ok(&["create", "configmap", "x"]);
        let out = k.ok(&["delete", "configmap", "x"]);
        assert!(out.contains(r#"configmap "x" deleted"#), "{out}");
        let out = k.run(&["get", "configmap", "x"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr
                .contains(r#"Error from server (NotFound): configmaps "x" not found"#),
            "{}",
            out.stderr
        );
        let out = k.run(&["delete", "configmap", "x"]);
        assert_eq!(out.code, Some(1));
        assert!(out.stderr.contains("NotFound"), "{}", out.stderr);
        let (status, body) = api.call("GET", "/api/v1/namespaces/default/configmaps/x", None);
        assert_eq!(status, 404);
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "NotFound");
        assert_eq!(body["code"], 404);
        assert_eq!(
            body["details"],
            json!({"name": "x", "group": "", "kind": "configmaps"})
        );
        // A namespace's deletion takes what is in it.
        k.ok(&["create", "namespace", "doomed"]);
        k.ok(&["create", "configmap", "inside", "-n", "doomed"]);
        k.ok(&["delete", "namespace", "doomed"]);
        assert_eq!(k.run(&["get", "namespace", "doomed"]).code, Some(1));
        let (status, _) = api.call("GET", "/api/v1/namespaces/doomed/configmaps/inside", None);
        assert_eq!(status, 404);
    });
}

/// `--dry-run=server` (`dryRun=All`): the server validates and answers the
/// object as it would be, and persists nothing: no resourceVersion bump, no
/// watch event (the first event after the dry runs is the real change).
#[test]
fn kubectl_dry_run_server_answers_and_persists_nothing() {
    each_kubectl(|api, k| {
        k.ok(&["create", "configmap", "x", "--from-literal=a=1"]);
        let service = |name: &str, extra: &[&str]| {
            let manifest = format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports: [{{port: 80}}]\n"
            );
            let out = k.run_stdin(
                &[&["create", "-f", "-", "-o", "json"], extra].concat(),
                &manifest,
            );
            assert!(out.success(), "{out:?}");
            serde_json::from_str::<Value>(&out.stdout).unwrap()
        };
        service("s", &[]);
        let before = api.resource_version();
        let x_rv = rv(&k.json(&["get", "configmap", "x"]));
        let mut watch = api.watch(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={before}"
        ));
        assert_eq!(watch.status, 200);

        let would = k.json(&[
            "patch",
            "configmap",
            "x",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"a":"2"},"metadata":{"labels":{"l":"v"}}}"#,
            "--dry-run=server",
            "-o",
            "json",
        ]);
        assert_eq!(would["data"]["a"], "2", "{would:#}");
        assert_eq!(would["metadata"]["labels"]["l"], "v");
        assert_eq!(
            rv(&would),
            x_rv,
            "the object's own resourceVersion, not a new one"
        );
        let out = k.run(&[
            "patch",
            "configmap",
            "x",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"bad key":"v"}}}"#,
            "--dry-run=server",
        ]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(out.stderr.contains("is invalid"), "{}", out.stderr);

        let would = k.json(&[
            "create",
            "configmap",
            "y",
            "--from-literal=b=1",
            "--dry-run=server",
            "-o",
            "json",
        ]);
        assert_eq!(would["metadata"]["name"], "y", "{would:#}");
        assert_eq!(would["data"]["b"], "1");
        assert!(
            would["metadata"]["uid"].is_string(),
            "the server filled it in: {would:#}"
        );
        let out = k.run(&["create", "configmap", "x", "--dry-run=server"]);
        assert!(
            out.stderr.contains(r#"configmaps "x" already exists"#),
            "{}",
            out.stderr
        );
        // A dry-run Service shows the ClusterIP the next real one gets.
        let dry = service("t", &["--dry-run=server"]);

        let out = k.ok(&["delete", "configmap", "x", "--dry-run=server"]);
        assert!(
            out.contains(r#"configmap "x" deleted (server dry run)"#),
            "{out}"
        );
        let out = k.run(&["delete", "configmap", "nope", "--dry-run=server"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains(r#"configmaps "nope" not found"#),
            "{}",
            out.stderr
        );

        assert_eq!(
            api.resource_version(),
            before,
            "a dry run bumps no resourceVersion"
        );
        let x = k.json(&["get", "configmap", "x"]);
        assert_eq!(x["data"]["a"], "1");
        assert!(x["metadata"].get("labels").is_none(), "{x:#}");
        assert_eq!(
            k.run(&["get", "configmap", "y"]).code,
            Some(1),
            "a dry-run create creates nothing"
        );
        k.ok(&["label", "configmap", "x", "real=yes"]);
        let event = watch.next(WITHIN).expect("the real change's event");
        assert_eq!(event["type"], "MODIFIED", "{event:#}");
        assert_eq!(
            event["object"]["metadata"]["labels"],
            json!({"real": "yes"}),
            "the first event is the real change: {event:#}"
        );
        assert!(dry["spec"]["clusterIP"].is_string(), "{dry:#}");
        let t = service("t", &[]);
        assert_eq!(
            t["spec"]["clusterIP"], dry["spec"]["clusterIP"],
            "the dry run took no ClusterIP"
        );
    });
}

#[test]
fn kubectl_get_watch_prints_changes_as_they_happen() {
    each_kubectl(|api, k| {
        k.ok(&["create", "configmap", "w1"]);
        let out = api.dir().join("watch.out");
        let mut child = k.spawn(&["get", "configmaps", "--watch"], &out);
        wait_until(WITHIN, "the initial list", || read(&out).contains("w1"));
        wait_until(WITHIN, "kubectl's watch", || {
            api.open_watches("configmaps") == 1
        });
        let lines = |name: &str| {
            read(&out)
                .lines()
                .filter(|l| l.starts_with(&format!("{name} ")))
                .count()
        };
        k.ok(&["create", "configmap", "w2", "--from-literal=a=1"]);
        wait_until(WITHIN, "w2 added", || lines("w2") == 1);
        k.ok(&[
            "patch",
            "configmap",
            "w2",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"b":"2"}}"#,
        ]);
        wait_until(WITHIN, "w2 modified", || lines("w2") == 2);
        assert!(
            read(&out)
                .lines()
                .any(|l| l.starts_with("w2 ") && l.split_whitespace().nth(1) == Some("2")),
            "{}",
            read(&out)
        );
        k.ok(&["delete", "configmap", "w2"]);
        wait_until(WITHIN, "w2 deleted", || lines("w2") == 3);
        assert_eq!(lines("w1"), 1, "{}", read(&out));
        assert!(
            child.try_wait().unwrap().is_none(),
            "kubectl get --watch ended"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        wait_until(WITHIN, "the watch to close", || {
            api.open_watches("configmaps") == 0
        });
    });
}

#[test]
fn kubectl_waits_for_condition_jsonpath_and_delete() {
    each_kubectl(|api, k| {
        assert!(k.apply(POD, &[]).success());
        let out = api.dir().join("wait.out");
        let _ = std::fs::remove_file(&out);
        let mut wait = k.spawn(
            &["wait", "--for=condition=Ready", "pod/p", "--timeout=60s"],
            &out,
        );
        wait_until(WITHIN, "kubectl wait to watch the pod", || {
            api.open_watches("pods") == 1
        });
        assert!(wait.try_wait().unwrap().is_none(), "{}", read(&out));
        // Status goes through the status subresource; the main resource ignores it.
        k.ok(&[
            "patch",
            "pod",
            "p",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ]);
        assert_eq!(k.json(&["get", "pod", "p"])["status"]["phase"], "Pending");
        k.ok(&[
            "patch",
            "pod",
            "p",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ]);
        let deadline = Instant::now() + WITHIN;
        let status = loop {
            if let Some(status) = wait.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl wait did not return: {}",
                read(&out)
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{}", read(&out));
        assert!(read(&out).contains("pod/p condition met"), "{}", read(&out));
        let pod = k.json(&["get", "pod", "p"]);
        assert_eq!(pod["spec"]["containers"][0]["image"], "busybox:1.36");
        assert_eq!(
            pod["metadata"]["generation"], 1,
            "a status write is not a spec change"
        );
        let out2 = k.ok(&[
            "wait",
            "--for=jsonpath={.status.phase}=Pending",
            "pod/p",
            "--timeout=10s",
        ]);
        assert!(out2.contains("condition met"), "{out2}");
        let out3 = k.run(&[
            "wait",
            "--for=jsonpath={.status.phase}=Running",
            "pod/p",
            "--timeout=1s",
        ]);
        assert_eq!(out3.code, Some(1), "{out3:?}");
        // wait --for=delete returns once the pod is gone.
        let out = api.dir().join("wait-delete.out");
        let _ = std::fs::remove_file(&out);
        let mut wait = k.spawn(&["wait", "--for=delete", "pod/p", "--timeout=60s"], &out);
        wait_until(WITHIN, "kubectl wait to watch the pod", || {
            api.open_watches("pods") == 1
        });
        assert!(wait.try_wait().unwrap().is_none(), "{}", read(&out));
        k.ok(&["delete", "pod", "p"]);
        let deadline = Instant::now() + WITHIN;
        let status = loop {
            if let Some(status) = wait.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl wait --for=delete did not return"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{}", read(&out));
    });
}

#[test]
fn kubectl_leases_and_a_stale_replace_conflicts() {
    each_kubectl(|api, k| {
        let out = k.run_stdin(&["create", "-f", "-"], LEASE);
        assert!(
            out.stdout
                .contains("lease.coordination.k8s.io/leader created"),
            "{out:?}"
        );
        let table = k.ok(&["get", "leases", "-n", "kube-system"]);
        assert!(
            table.contains("HOLDER") && table.contains("node-a"),
            "{table}"
        );
        let old = k.ok(&["get", "lease", "leader", "-n", "kube-system", "-o", "json"]);
        let old_rv = rv(&serde_json::from_str(&old).unwrap());
        // The holder renews...
        k.ok(&[
            "patch",
            "lease",
            "leader",
            "-n",
            "kube-system",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"renewTime":"2026-01-01T00:00:10.000000Z"}}"#,
        ]);
        // ...so a replace carrying the old resourceVersion is refused.
        let stolen = old.replace("node-a", "node-b");
        let out = k.run_stdin(&["replace", "-f", "-"], &stolen);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains("Conflict") && out.stderr.contains("the object has been modified"),
            "{}",
            out.stderr
        );
        let lease = k.json(&["get", "lease", "leader", "-n", "kube-system"]);
        assert_eq!(lease["spec"]["holderIdentity"], "node-a");
        assert!(
            lease["metadata"].get("generation").is_none(),
            "leases have no generation"
        );
        // Raw PUTs, as leader election does them.
        let path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/leader";
        // Leases allow no unconditional update: a PUT must carry a
        // resourceVersion (kubectl replace fetches one; a raw client must too).
        let mut unconditional = lease.clone();
        unconditional["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        unconditional["spec"]["holderIdentity"] = json!("node-b");
        let (status, body) = api.call("PUT", path, Some(&unconditional));
        assert_eq!(
            (status, body["reason"].as_str()),
            (422, Some("Invalid")),
            "{body}"
        );
        assert_eq!(
            body["message"],
            "Lease.coordination.k8s.io \"leader\" is invalid: metadata.resourceVersion: \
             Invalid value: 0x0: must be specified for an update"
        );
        assert_eq!(
            body["details"]["causes"][0]["field"],
            "metadata.resourceVersion"
        );
        assert_eq!(
            k.json(&["get", "lease", "leader", "-n", "kube-system"])["spec"]["holderIdentity"],
            "node-a"
        );
        // Other kinds allow it (a ConfigMap here), as their strategies do.
        let cms = "/api/v1/namespaces/kube-system/configmaps";
        let plain = |a: &str| json!({"metadata": {"name": "plain"}, "data": {"a": a}});
        assert_eq!(api.call("POST", cms, Some(&plain("1"))).0, 201);
        let (status, body) = api.call("PUT", &format!("{cms}/plain"), Some(&plain("2")));
        assert_eq!((status, &body["data"]["a"]), (200, &json!("2")), "{body}");
        let mut stale = lease.clone();
        stale["metadata"]["resourceVersion"] = json!(old_rv.to_string());
        let (status, body) = api.call("PUT", path, Some(&stale));
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("Conflict")),
            "{body}"
        );
        let mut fresh = lease.clone();
        fresh["spec"]["holderIdentity"] = json!("node-b");
        fresh["spec"]["leaseTransitions"] = json!(1);
        let (status, body) = api.call("PUT", path, Some(&fresh));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["spec"]["holderIdentity"], "node-b");
        assert!(rv(&body) > rv(&lease));
        // The same object again is now stale too.
        let (status, _) = api.call("PUT", path, Some(&fresh));
        assert_eq!(status, 409);
        // A Lease can be created by PUT (leader election's first acquire may do that).
        let (status, body) = api.call(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/fresh",
            Some(&json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "fresh"}, "spec": {"holderIdentity": "x"}})),
        );
        assert_eq!(status, 201, "{body}");
        assert_eq!(
            k.json(&["get", "lease", "fresh"])["spec"]["holderIdentity"],
            "x"
        );
    });
}

#[test]
fn kubectl_events_in_both_apis() {
    each_kubectl(|api, k| {
        let v1 = "apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: ev1, namespace: default}
eventTime: \"2026-01-01T00:00:00.000000Z\"
reportingController: tend.dev/agent
reportingInstance: node-a
action: Remediate
reason: Restarted
type: Normal
note: restarted unit demo
regarding: {kind: Node, name: node-a, apiVersion: v1}
";
        let core = "apiVersion: v1
kind: Event
metadata: {name: ev2, namespace: default}
involvedObject: {kind: Pod, name: web, namespace: default}
reason: Pulled
message: pulled the image
type: Warning
source: {component: kubelet}
firstTimestamp: \"2026-01-01T00:00:00Z\"
lastTimestamp: \"2026-01-01T00:00:00Z\"
count: 2
";
        let out = k.run_stdin(&["create", "-f", "-"], v1);
        assert!(
            out.stdout.contains("event.events.k8s.io/ev1 created"),
            "{out:?}"
        );
        let out = k.run_stdin(&["create", "-f", "-"], core);
        assert!(out.stdout.contains("event/ev2 created"), "{out:?}");
        let table = k.ok(&["get", "events"]);
        for want in [
            "REASON",
            "Restarted",
            "node/node-a",
            "restarted unit demo",
            "Pulled",
            "pod/web",
            "pulled the image",
            "Warning",
        ] {
            assert!(table.contains(want), "{want} missing: {table}");
        }
        // One storage, two versions: each shows the other's event in its own shape.
        let ev1 = k.json(&["get", "events.v1.", "ev1"]);
        assert_eq!(ev1["message"], "restarted unit demo");
        assert_eq!(ev1["involvedObject"]["name"], "node-a");
        assert_eq!(ev1["reportingComponent"], "tend.dev/agent");
        let ev2 = k.json(&["get", "events.v1.events.k8s.io", "ev2"]);
        assert_eq!(ev2["note"], "pulled the image");
        assert_eq!(ev2["regarding"]["name"], "web");
        assert_eq!(ev2["deprecatedCount"], 2);
        assert_eq!(
            names(&k.json(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=Node"
            ])),
            ["ev1"]
        );
        assert_eq!(
            names(&k.json(&[
                "get",
                "events.v1.events.k8s.io",
                "--field-selector",
                "regarding.name=web"
            ])),
            ["ev2"]
        );
        // events.k8s.io/v1 validates what the new API requires.
        let (status, body) = api.call(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
            Some(&json!({"metadata": {"name": "bad"}, "reason": "R", "type": "Normal"})),
        );
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["reason"], "Invalid");
        let fields: Vec<&str> = body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert!(
            fields.contains(&"reportingController") && fields.contains(&"eventTime"),
            "{body}"
        );
    });
}

#[test]
fn kubectl_chunked_list_pages_with_limit_and_continue() {
    each_kubectl(|api, k| {
        for i in 1..=5 {
            k.ok(&["create", "configmap", &format!("c{i}")]);
        }
        let seq = api.request_seq();
        let table = k.ok(&["get", "configmaps", "--chunk-size=2"]);
        for i in 1..=5 {
            assert!(table.contains(&format!("c{i} ")), "c{i} missing: {table}");
        }
        let lists: Vec<Value> = api
            .requests_since(seq)
            .into_iter()
            .filter(|r| r["verb"] == "list" && r["resource"] == "configmaps")
            .collect();
        assert_eq!(lists.len(), 3, "{lists:#?}");
        assert!(
            lists.iter().all(|r| r["query"]["limit"] == "2"),
            "{lists:#?}"
        );
        assert!(lists[0]["query"].get("continue").is_none());
        let tokens: Vec<&str> = lists[1..]
            .iter()
            .map(|r| r["query"]["continue"].as_str().unwrap())
            .collect();
        assert_ne!(tokens[0], tokens[1]);
        // The pages are one snapshot: a change between them does not show.
        let (_, page) = api.call("GET", "/api/v1/namespaces/default/configmaps?limit=2", None);
        assert_eq!(names(&page), ["c1", "c2"]);
        assert_eq!(page["metadata"]["remainingItemCount"], 3);
        let token = page["metadata"]["continue"].as_str().unwrap().to_string();
        k.ok(&["delete", "configmap", "c4"]);
        k.ok(&["create", "configmap", "c35"]);
        let (_, next) = api.call(
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}"),
            None,
        );
        assert_eq!(names(&next), ["c3", "c4"]);
        assert_eq!(
            next["metadata"]["resourceVersion"],
            page["metadata"]["resourceVersion"]
        );
        let token = next["metadata"]["continue"].as_str().unwrap().to_string();
        let (_, last) = api.call(
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}"),
            None,
        );
        assert_eq!(names(&last), ["c5"]);
        assert!(last["metadata"].get("continue").is_none());
    });
}

#[test]
fn watch_and_continue_from_a_compacted_resource_version_get_410() {
    let api = KubeApi::start();
    let base = "/api/v1/namespaces/default/configmaps";
    let (_, list) = api.call("GET", base, None);
    let old = rv(&list);
    for name in ["g1", "g2"] {
        let (status, _) = api.call("POST", base, Some(&json!({"metadata": {"name": name}})));
        assert_eq!(status, 201);
    }
    // Before compaction, a watch from `old` replays what came after it.
    let mut watch = api.watch(&format!("{base}?watch=1&resourceVersion={old}"));
    let event = watch.next(WITHIN).unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("g1"))
    );
    let (_, page) = api.call("GET", &format!("{base}?limit=1"), None);
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    // A write after the page, then compaction up to now: the page's snapshot is gone.
    let (status, _) = api.call("POST", base, Some(&json!({"metadata": {"name": "g3"}})));
    assert_eq!(status, 201);
    let compacted = api.compact();
    assert_eq!(compacted, api.resource_version());
    assert!(compacted > rv(&page));
    // The open watch goes on after compaction...
    let (status, _) = api.call("POST", base, Some(&json!({"metadata": {"name": "g3b"}})));
    assert_eq!(status, 201);
    watch.until(WITHIN, "g3b on the open watch", |e| {
        e["object"]["metadata"]["name"] == "g3b"
    });
    // ...but a new one from `old` gets an ERROR event: 410 Expired.
    let mut gone = api.watch(&format!("{base}?watch=1&resourceVersion={old}"));
    assert_eq!(gone.status, 200);
    let event = gone.next(WITHIN).unwrap();
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!(event["object"]["kind"], "Status");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(
        event["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version")
    );
    assert!(
        gone.next(Duration::from_secs(5)).is_none(),
        "the watch did not end"
    );
    // So does a list continuation from before it, and an exact list at `old`.
    let (status, body) = api.call("GET", &format!("{base}?limit=1&continue={token}"), None);
    assert_eq!(
        (status, body["reason"].as_str()),
        (410, Some("Expired")),
        "{body}"
    );
    let (status, _) = api.call(
        "GET",
        &format!("{base}?resourceVersion={old}&resourceVersionMatch=Exact"),
        None,
    );
    assert_eq!(status, 410);
    // A watch from the compaction point works: it replays what came after it.
    let mut fine = api.watch(&format!("{base}?watch=1&resourceVersion={compacted}"));
    let (status, _) = api.call("POST", base, Some(&json!({"metadata": {"name": "g4"}})));
    assert_eq!(status, 201);
    for name in ["g3b", "g4"] {
        let event = fine.next(WITHIN).unwrap();
        assert_eq!(event["object"]["metadata"]["name"], name, "{event}");
    }
    // kubectl sees the same 410.
    let k = Kubectl::version(KUBECTLS[1], &api);
    let out = k.ok(&[
        "get",
        "--raw",
        &format!("{base}?watch=1&resourceVersion={old}"),
    ]);
    assert!(out.contains(r#""code":410"#), "{out}");

    // A bounded history compacts by itself.
    let api = KubeApi::start_with(&["--history", "5"]);
    let first = api.resource_version();
    for i in 0..10 {
        let (status, _) = api.call(
            "POST",
            base,
            Some(&json!({"metadata": {"name": format!("h{i}")}})),
        );
        assert_eq!(status, 201);
    }
    let mut gone = api.watch(&format!("{base}?watch=1&resourceVersion={first}"));
    assert_eq!(gone.next(WITHIN).unwrap()["object"]["code"], 410);
    let recent = api.resource_version() - 3;
    let mut replay = api.watch(&format!("{base}?watch=1&resourceVersion={recent}"));
    let replayed: Vec<String> = (0..3)
        .map(|_| {
            replay.next(WITHIN).unwrap()["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(replayed, ["h7", "h8", "h9"]);
}

#[test]
fn status_reasons_over_raw_http() {
    let api = KubeApi::start();
    let base = "/api/v1/namespaces/default/configmaps";
    let (status, body) = api.call("POST", base, Some(&json!({"metadata": {}})));
    assert_eq!(
        (status, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("metadata.name: Required value"),
        "{body}"
    );
    let (status, body) = api.call(
        "POST",
        base,
        Some(&json!({"metadata": {"generateName": "gen-"}})),
    );
    assert_eq!(status, 201, "{body}");
    let name = body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert!(
        body["metadata"].get("generation").is_none(),
        "configmaps have no generation"
    );
    let (status, _) = api.call("POST", base, Some(&json!({"metadata": {"name": "x"}})));
    assert_eq!(status, 201);
    let (status, body) = api.call("POST", base, Some(&json!({"metadata": {"name": "x"}})));
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{body}"
    );
    assert_eq!(body["message"], r#"configmaps "x" already exists"#);
    let (status, body) = api.call(
        "POST",
        base,
        Some(&json!({"metadata": {"name": "Bad_Name"}})),
    );
    assert_eq!(
        (status, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    let (status, body) = api.call(
        "POST",
        base,
        Some(&json!({"metadata": {"name": "l", "labels": {"a": "not valid!"}}})),
    );
    assert_eq!(
        (status, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    let (status, body) = api.call(
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(&json!({"metadata": {"name": "p"}, "spec": {}})),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.containers");
    let (status, body) = api.call(
        "POST",
        "/api/v1/configmaps",
        Some(&json!({"metadata": {"name": "y"}})),
    );
    assert_eq!(
        (status, body["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{body}"
    );
    let (status, body) = api.call("GET", &format!("{base}?labelSelector=a%20in%20()"), None);
    assert_eq!(
        (status, body["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    let (status, body) = api.call(
        "POST",
        "/api/v1/namespaces/nope/configmaps",
        Some(&json!({"metadata": {"name": "z"}})),
    );
    assert_eq!(
        (status, body["message"].as_str()),
        (404, Some(r#"namespaces "nope" not found"#)),
        "{body}"
    );
    let (status, body) = api.call(
        "POST",
        base,
        Some(&json!({"metadata": {"name": "w", "namespace": "other"}})),
    );
    assert_eq!(
        (status, body["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    let (status, body) = api.call("GET", "/api/v1/widgets", None);
    assert_eq!(
        (status, body["reason"].as_str()),
        (404, Some("NotFound")),
        "{body}"
    );
    // PUT: optimistic concurrency; the name must match the URL.
    let (_, x) = api.call("GET", &format!("{base}/x"), None);
    let mut update = x.clone();
    update["data"] = json!({"k": "1"});
    let (status, updated) = api.call("PUT", &format!("{base}/x"), Some(&update));
    assert_eq!(status, 200);
    assert!(rv(&updated) > rv(&x));
    assert_eq!(updated["metadata"]["uid"], x["metadata"]["uid"]);
    assert_eq!(
        updated["metadata"]["creationTimestamp"],
        x["metadata"]["creationTimestamp"]
    );
    let (status, body) = api.call("PUT", &format!("{base}/x"), Some(&update));
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("Conflict")),
        "{body}"
    );
    let (status, _) = api.call("PUT", &format!("{base}/other"), Some(&updated));
    assert_eq!(status, 400);
    let (status, _) = api.call(
        "PUT",
        &format!("{base}/absent"),
        Some(&json!({"metadata": {"name": "absent"}})),
    );
    assert_eq!(status, 404, "configmaps are not created by PUT");
    // Finalizers hold a deletion until they are removed.
    let (status, _) = api.call(
        "POST",
        base,
        Some(&json!({"metadata": {"name": "held", "finalizers": ["tend.dev/keep"]}})),
    );
    assert_eq!(status, 201);
    let (status, body) = api.call("DELETE", &format!("{base}/held"), None);
    assert_eq!(status, 202, "{body}");
    let (status, held) = api.call("GET", &format!("{base}/held"), None);
    assert_eq!(status, 200);
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    let (status, _) = api
        .call_raw(
            "PATCH",
            &format!("{base}/held"),
            "application/merge-patch+json",
            r#"{"metadata":{"finalizers":null}}"#,
            None,
            WITHIN,
        )
        .unwrap();
    assert_eq!(status, 200);
    let (status, _) = api.call("GET", &format!("{base}/held"), None);
    assert_eq!(status, 404);
    // deletecollection by label.
    for (name, group) in [("dc1", "x"), ("dc2", "x"), ("dc3", "y")] {
        let (status, _) = api.call(
            "POST",
            base,
            Some(&json!({"metadata": {"name": name, "labels": {"grp": group}}})),
        );
        assert_eq!(status, 201);
    }
    let (status, deleted) = api.call("DELETE", &format!("{base}?labelSelector=grp%3Dx"), None);
    assert_eq!(
        (status, deleted["kind"].as_str()),
        (200, Some("ConfigMapList")),
        "{deleted}"
    );
    assert_eq!(names(&deleted), ["dc1", "dc2"]);
    let (_, left) = api.call("GET", &format!("{base}?labelSelector=grp"), None);
    assert_eq!(names(&left), ["dc3"]);
    // An unsupported patch type, and a body that is not JSON.
    let (status, body) = api
        .call_raw(
            "PATCH",
            &format!("{base}/x"),
            "text/plain",
            "{}",
            None,
            WITHIN,
        )
        .unwrap();
    assert_eq!(status, 415, "{body}");
    let (status, _) = api
        .call_raw("POST", base, "application/json", "{not json", None, WITHIN)
        .unwrap();
    assert_eq!(status, 400);
    // Discovery for kubectl and client libraries.
    let (status, v) = api.call("GET", "/version", None);
    assert_eq!((status, v["major"].as_str()), (200, Some("1")));
    let (_, core) = api.call("GET", "/api/v1", None);
    let pods = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(
        (pods["kind"].as_str(), pods["namespaced"].as_bool()),
        (Some("Pod"), Some(true))
    );
    assert_eq!(pods["shortNames"], json!(["po"]));
    let (_, groups) = api.call("GET", "/apis", None);
    let group_names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in ["coordination.k8s.io", "events.k8s.io", "apps"] {
        assert!(group_names.contains(&g), "{groups}");
    }
    let (_, leases) = api.call("GET", "/apis/coordination.k8s.io/v1", None);
    assert_eq!(leases["resources"][0]["kind"], "Lease");
}

#[test]
fn watches_selectors_bookmarks_and_counts() {
    let api = KubeApi::start_with(&["--bookmark-interval", "0.2"]);
    let nodes = "/api/v1/nodes";
    let mut watchers: Vec<KubeWatch> = (0..3)
        .map(|_| {
            api.watch_as(
                &format!("{nodes}?watch=1&labelSelector=role%3Dworker"),
                "tend-test/1",
            )
        })
        .collect();
    wait_until(WITHIN, "three node watches", || {
        api.open_watches("nodes") == 3
    });
    let watches = api.watches();
    let entries = watches["watches"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{watches}");
    assert_eq!(entries[0]["count"], 3);
    assert_eq!(entries[0]["labelSelector"], "role=worker");
    assert_eq!(entries[0]["namespace"], "");
    assert_eq!(entries[0]["userAgents"], json!(["tend-test/1"]));
    // Into the selection: ADDED; out of it: DELETED; never seen: nothing.
    let (status, _) = api.call(
        "POST",
        nodes,
        Some(&json!({"metadata": {"name": "n1", "labels": {"role": "worker"}}})),
    );
    assert_eq!(status, 201);
    let (status, _) = api.call(
        "POST",
        nodes,
        Some(&json!({"metadata": {"name": "n2", "labels": {"role": "infra"}}})),
    );
    assert_eq!(status, 201);
    let (status, _) = api
        .call_raw(
            "PATCH",
            &format!("{nodes}/n1"),
            "application/merge-patch+json",
            r#"{"metadata":{"labels":{"role":"gone"}}}"#,
            None,
            WITHIN,
        )
        .unwrap();
    assert_eq!(status, 200);
    for w in &mut watchers {
        let e = w.next(WITHIN).unwrap();
        assert_eq!(
            (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some("n1")),
            "{e}"
        );
        let e = w.next(WITHIN).unwrap();
        assert_eq!(
            (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
            (Some("DELETED"), Some("n1")),
            "{e}"
        );
        assert_eq!(e["object"]["metadata"]["labels"]["role"], "gone");
    }
    drop(watchers);
    wait_until(WITHIN, "the node watches to close", || {
        api.open_watches("nodes") == 0
    });
    // Bookmarks carry the current resourceVersion, on the interval and on demand.
    let mut w = api.watch(&format!(
        "{nodes}?watch=1&allowWatchBookmarks=true&resourceVersion={}",
        api.resource_version()
    ));
    let bookmark = w.until(WITHIN, "a bookmark", |e| e["type"] == "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Node");
    assert_eq!(rv(&bookmark["object"]), api.resource_version());
    assert!(api.bookmark() >= 1);
    // timeoutSeconds ends a watch.
    let started = Instant::now();
    let mut short = api.watch(&format!(
        "{nodes}?watch=1&timeoutSeconds=1&resourceVersion={}",
        api.resource_version()
    ));
    while short.next(Duration::from_secs(10)).is_some() {}
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // sendInitialEvents: the current state, then a bookmark marking its end.
    let mut initial = api.watch(&format!("{nodes}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"));
    let mut added = Vec::new();
    let end = loop {
        let e = initial.next(WITHIN).unwrap();
        if e["type"] == "BOOKMARK" && !e["object"]["metadata"]["annotations"].is_null() {
            break e;
        }
        if e["type"] == "ADDED" {
            added.push(
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    };
    assert_eq!(added, ["n1", "n2"]);
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // A field-selected watch of one object.
    let mut one = api.watch(&format!("{nodes}?watch=1&fieldSelector=metadata.name%3Dn2"));
    assert_eq!(
        one.next(WITHIN).unwrap()["object"]["metadata"]["name"],
        "n2"
    );
    let (status, _) = api.call("DELETE", &format!("{nodes}/n1"), None);
    assert_eq!(status, 200);
    let (status, _) = api.call("DELETE", &format!("{nodes}/n2"), None);
    assert_eq!(status, 200);
    let e = one.next(WITHIN).unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("n2"))
    );
    // Counts per verb and resource, and a log with queries.
    let requests = api.requests();
    assert!(
        requests["counts"]["watch"].as_u64().unwrap() >= 7,
        "{requests}"
    );
    assert_eq!(requests["resources"]["nodes"]["create"], 2);
    assert_eq!(requests["resources"]["nodes"]["patch"], 1);
    assert_eq!(requests["resources"]["nodes"]["delete"], 2);
    let before = requests["total"].as_u64().unwrap();
    // Admin endpoints are not counted.
    api.watches();
    assert_eq!(api.requests()["total"].as_u64().unwrap(), before);
    api.reset_requests();
    assert_eq!(api.requests()["total"], 0);
    // Reset: everything but the default namespaces goes; old resourceVersions expire.
    let old = api.resource_version();
    let (status, _) = api.call(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&json!({"metadata": {"name": "r"}})),
    );
    assert_eq!(status, 201);
    api.reset();
    let (_, cms) = api.call("GET", "/api/v1/configmaps", None);
    assert!(cms["items"].as_array().unwrap().is_empty());
    let (_, nss) = api.call("GET", "/api/v1/namespaces", None);
    assert_eq!(
        names(&nss),
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let mut gone = api.watch(&format!("/api/v1/configmaps?watch=1&resourceVersion={old}"));
    assert_eq!(gone.next(WITHIN).unwrap()["object"]["code"], 410);
}

#[test]
fn blackhole_hangs_one_client_then_drops_its_connections() {
    let api = KubeApi::start();
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let mut watch = api.watch_as(&format!("{leases}?watch=1"), "holder/1");
    wait_until(WITHIN, "the holder's watch", || {
        api.open_watches("leases") == 1
    });
    api.blackhole(60.0, Some("holder"));
    // The holder's requests hang; everyone else is answered.
    let started = Instant::now();
    let hung = api.call_raw(
        "GET",
        leases,
        "application/json",
        "",
        Some("holder/1"),
        Duration::from_millis(500),
    );
    assert!(hung.is_err(), "a blackholed request was answered: {hung:?}");
    assert!(started.elapsed() >= Duration::from_millis(450));
    let (status, _) = api.call(
        "POST",
        leases,
        Some(&json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "other"}})),
    );
    assert_eq!(status, 201);
    // Nor does its open watch hear of the new lease.
    assert!(watch.next(Duration::from_millis(500)).is_none());
    // A request in flight when the blackhole ends sees its connection closed.
    let port = api.port();
    let pending = std::thread::spawn(move || {
        tend_e2e::http_call(
            port,
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            &[("User-Agent", "holder/1")],
            "",
            Duration::from_secs(30),
        )
    });
    wait_until(WITHIN, "the pending request to arrive", || {
        api.requests()["log"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["userAgent"] == "holder/1")
            .count()
            == 3
    });
    api.end_blackhole();
    let ended = pending.join().unwrap();
    assert!(!matches!(ended, Ok((200, _))), "{ended:?}");
    assert!(watch.next(WITHIN).is_none(), "the watch was not closed");
    wait_until(WITHIN, "the watch to be gone", || {
        api.open_watches("leases") == 0
    });
    let (status, body) = api
        .call_raw(
            "GET",
            leases,
            "application/json",
            "",
            Some("holder/1"),
            WITHIN,
        )
        .unwrap();
    assert_eq!(status, 200, "{body}");
    // Everyone, for a while: then it answers again by itself.
    api.blackhole(1.0, None);
    let started = Instant::now();
    let (status, _) = api
        .call_raw(
            "GET",
            leases,
            "application/json",
            "",
            None,
            Duration::from_secs(10),
        )
        .unwrap_or((0, String::new()));
    assert_ne!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(900));
    wait_until(WITHIN, "the blackhole to end", || {
        api.call_raw(
            "GET",
            leases,
            "application/json",
            "",
            None,
            Duration::from_secs(5),
        )
        .is_ok_and(|(s, _)| s == 200)
    });
}

#[test]
fn an_outage_fails_one_clients_requests_and_ends_its_watches() {
    let api = KubeApi::start();
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let get = |agent: &str| {
        api.call_raw("GET", leases, "application/json", "", Some(agent), WITHIN)
            .unwrap()
    };
    let mut watch = api.watch_as(&format!("{leases}?watch=1"), "holder/1");
    wait_until(WITHIN, "the holder's watch", || {
        api.open_watches("leases") == 1
    });
    api.outage(60.0, Some("holder"));
    let (status, body) = get("holder/1");
    assert_eq!(status, 503, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&body["kind"], &body["reason"]),
        (&json!("Status"), &json!("ServiceUnavailable"))
    );
    let started = Instant::now();
    assert!(watch.next(WITHIN).is_none(), "an event during the outage");
    assert!(started.elapsed() < WITHIN, "the watch was not ended");
    wait_until(WITHIN, "the watch to be gone", || {
        api.open_watches("leases") == 0
    });
    assert_eq!(get("other/1").0, 200, "only the holder's requests fail");
    api.end_outage();
    assert_eq!(get("holder/1").0, 200);
}

#[test]
fn kubectl_cordons_and_drains_a_node() {
    let node = "apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {node-role.kubernetes.io/worker: \"\"}
status:
  conditions: [{type: Ready, status: \"True\"}]
  nodeInfo: {kubeletVersion: v1.33.0}
";
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: node-a\n  containers: [{{name: c, image: busybox}}]\n"
        )
    };
    each_kubectl(|api, k| {
        assert!(k.apply(node, &[]).success());
        let table = k.ok(&["get", "nodes"]);
        assert!(table.contains("node-a   Ready    worker"), "{table}");
        k.ok(&["cordon", "node-a"]);
        assert_eq!(
            k.json(&["get", "node", "node-a"])["spec"]["unschedulable"],
            true
        );
        assert!(k.ok(&["get", "nodes"]).contains("Ready,SchedulingDisabled"));
        assert_eq!(
            names(&k.json(&[
                "get",
                "nodes",
                "--field-selector",
                "spec.unschedulable=true"
            ])),
            ["node-a"]
        );
        // A pod bound to a node is deleted gracefully: it stays, terminating, until
        // a deletion with no grace (the kubelet's; no kubelet runs here).
        assert!(k.apply(&pod("slow"), &[]).success());
        let path = "/api/v1/namespaces/default/pods/slow";
        let (status, body) = api.call("DELETE", path, None);
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 30);
        assert!(k.ok(&["get", "pods"]).contains("Terminating"));
        let (status, _) = api.call("DELETE", &format!("{path}?gracePeriodSeconds=0"), None);
        assert_eq!(status, 200);
        assert_eq!(api.call("GET", path, None).0, 404);
        // Drain evicts what runs on the node (pods/eviction; kubectl 1.33 sends it as protobuf).
        assert!(k.apply(&pod("bound"), &[]).success());
        let seq = api.request_seq();
        let out = k.run(&[
            "drain",
            "node-a",
            "--force",
            "--grace-period=0",
            "--timeout=30s",
        ]);
        assert!(out.success(), "{out:?}");
        assert!(out.stdout.contains("pod/bound evicted"), "{out:?}");
        let evictions: Vec<Value> = api
            .requests_since(seq)
            .into_iter()
            .filter(|r| r["resource"] == "pods/eviction")
            .collect();
        assert_eq!(evictions.len(), 1, "{evictions:?}");
        assert_eq!(evictions[0]["code"], 201);
        assert!(
            api.requests_since(seq)
                .iter()
                .any(|r| r["verb"] == "list"
                    && r["query"]["fieldSelector"] == "spec.nodeName=node-a"),
            "drain did not list the node's pods"
        );
        assert_eq!(
            api.call("GET", "/api/v1/namespaces/default/pods/bound", None)
                .0,
            404
        );
        k.ok(&["uncordon", "node-a"]);
        assert!(
            k.json(&["get", "node", "node-a"])["spec"]
                .get("unschedulable")
                .is_none()
        );
    });
}

/// A Ready Node `name` (no kubelet stand-in runs for it unless a test starts one).
fn node_manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  conditions: [{{type: Ready, status: \"True\"}}]\n"
    )
}

/// A bare Pod (no controller) labelled `labels`, bound to `node`, with its own
/// terminationGracePeriodSeconds.
fn bound_pod(name: &str, labels: &str, node: &str, grace: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec:\n  nodeName: {node}\n  \
         terminationGracePeriodSeconds: {grace}\n  containers: [{{name: c, image: busybox}}]\n"
    )
}

/// Make a pod Running and Ready through the status subresource, as its kubelet
/// reports a started pod (kubectl apply ignores status): what the disruption
/// controller counts as healthy.
fn report_ready(k: &Kubectl, pod: &str) {
    k.ok(&[
        "patch",
        "pod",
        pod,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
}

/// A PodDisruptionBudget `name` over the pods labelled `app=APP`, with `rule`
/// (e.g. "minAvailable: 3").
fn pdb_manifest(name: &str, app: &str, rule: &str) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}}}\nspec:\n  {rule}\n  \
         selector: {{matchLabels: {{app: {app}}}}}\n"
    )
}

/// POST an Eviction of pod `pod` in default (with gracePeriodSeconds when
/// given): (status, Status).
fn evict(api: &KubeApi, pod: &str, grace: Option<u32>) -> (u16, Value) {
    let mut eviction =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}});
    if let Some(grace) = grace {
        eviction["deleteOptions"] = json!({"gracePeriodSeconds": grace});
    }
    api.call(
        "POST",
        &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
        Some(&eviction),
    )
}

/// The 429 the real eviction subresource answers when `budget` allows no
/// disruption (eviction.go checkAndDecrement).
fn budget_refusal(budget: &str, desired: u32, current: u32) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget",
            "message": format!("The disruption budget {budget} needs {desired} healthy pods and has {current} currently")}]},
        "code": 429,
    })
}

/// A pod of default, as the server has it (None when it is gone).
fn pod(api: &KubeApi, name: &str) -> Option<Value> {
    let (status, body) = api.call(
        "GET",
        &format!("/api/v1/namespaces/default/pods/{name}"),
        None,
    );
    match status {
        404 => None,
        200 => Some(body),
        _ => panic!("GET pod {name}: {status} {body}"),
    }
}

/// The PodDisruptionBudget `name` of default, as the server has it.
fn pdb(api: &KubeApi, name: &str) -> Value {
    let (status, body) = api.call(
        "GET",
        &format!("/apis/policy/v1/namespaces/default/poddisruptionbudgets/{name}"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// The row of `kubectl get pdb NAME` (NAME, MIN AVAILABLE, MAX UNAVAILABLE,
/// ALLOWED DISRUPTIONS; AGE left out), its header checked against the real
/// server's table.
fn pdb_row(k: &Kubectl, name: &str) -> Vec<String> {
    let table = k.ok(&["get", "pdb", name]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "MIN AVAILABLE",
            "MAX UNAVAILABLE",
            "ALLOWED DISRUPTIONS",
            "AGE"
        ],
        "{table}"
    );
    lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .take(4)
        .map(String::from)
        .collect()
}

/// (currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed) of a PDB.
fn budget_counts(pdb: &Value) -> [u64; 4] {
    [
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
        "disruptionsAllowed",
    ]
    .map(|f| {
        pdb["status"][f]
            .as_u64()
            .unwrap_or_else(|| panic!("no {f}: {pdb}"))
    })
}

const WEB: [&str; 3] = ["web-0", "web-1", "web-2"];

#[test]
fn kubectl_drain_is_held_to_a_pod_disruption_budget() {
    each_kubectl(|api, k| {
        assert!(k.apply(&node_manifest("node-a"), &[]).success());
        for name in WEB {
            assert!(
                k.apply(&bound_pod(name, "app: web", "node-a", 30), &[])
                    .success()
            );
            report_ready(k, name);
        }
        assert!(
            k.apply(&pdb_manifest("web-pdb", "web", "minAvailable: 3"), &[])
                .success()
        );
        // The disruption controller's status: three healthy pods, three needed.
        let budget = pdb(api, "web-pdb");
        assert_eq!(budget_counts(&budget), [3, 3, 3, 0], "{budget}");
        assert_eq!(budget["status"]["observedGeneration"], 1, "{budget}");
        assert_eq!(
            (
                &budget["status"]["conditions"][0]["type"],
                &budget["status"]["conditions"][0]["reason"]
            ),
            (&json!("DisruptionAllowed"), &json!("InsufficientPods")),
            "{budget}"
        );
        assert_eq!(pdb_row(k, "web-pdb"), ["web-pdb", "3", "N/A", "0"]);
        let refused = "Cannot evict pod as it would violate the pod's disruption budget";
        let drain = |extra: &[&str]| {
            let mut args = vec!["drain", "node-a", "--force", "--ignore-daemonsets"];
            args.extend_from_slice(extra);
            let out = k.run(&args);
            let text = format!("{}{}", out.stdout, out.stderr);
            (out, text)
        };
        // A server-side dry run is refused alike and writes nothing (not even the cordon).
        let before = api.resource_version();
        let (out, text) = drain(&["--dry-run=server", "--timeout=5s"]);
        assert!(!out.success() && text.contains(refused), "{out:?}");
        assert_eq!(api.resource_version(), before, "a dry run wrote");
        // The drain: every eviction refused until its timeout, no pod touched.
        let (out, text) = drain(&["--grace-period=1", "--timeout=5s"]);
        assert!(!out.success() && text.contains(refused), "{out:?}");
        for name in WEB {
            let p = pod(api, name).unwrap_or_else(|| panic!("{name} was deleted"));
            assert!(p["metadata"].get("deletionTimestamp").is_none(), "{p}");
        }
        assert_eq!(pdb_row(k, "web-pdb"), ["web-pdb", "3", "N/A", "0"]);
        // What the eviction subresource answers, exactly.
        assert_eq!(
            evict(api, "web-0", None),
            (429, budget_refusal("web-pdb", 3, 3))
        );
        // One disruption to spare once the budget asks for two.
        k.ok(&[
            "patch",
            "pdb",
            "web-pdb",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":2}}"#,
        ]);
        let budget = pdb(api, "web-pdb");
        assert_eq!(budget_counts(&budget), [3, 2, 3, 1], "{budget}");
        assert_eq!(budget["status"]["observedGeneration"], 2, "{budget}");
        assert_eq!(pdb_row(k, "web-pdb"), ["web-pdb", "2", "N/A", "1"]);
        // A dry run evicts all three (each alone is allowed; none is recorded).
        let before = api.resource_version();
        let (out, text) = drain(&["--dry-run=server", "--timeout=20s"]);
        assert!(
            out.success() && text.contains("(server dry run)"),
            "{out:?}"
        );
        assert_eq!(api.resource_version(), before, "a dry run wrote");
        assert_eq!(budget_counts(&pdb(api, "web-pdb")), [3, 2, 3, 1]);
        // One eviction is allowed; the pod terminates, the budget has no more to spare.
        let (status, body) = evict(api, "web-0", Some(1));
        assert_eq!(
            (status, &body["status"]),
            (201, &json!("Success")),
            "{body}"
        );
        let evicted = pod(api, "web-0").expect("web-0 is terminating (no kubelet runs)");
        assert!(
            evicted["metadata"]["deletionTimestamp"].is_string(),
            "{evicted}"
        );
        assert_eq!(
            evicted["metadata"]["deletionGracePeriodSeconds"], 1,
            "{evicted}"
        );
        let target = evicted["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "DisruptionTarget")
            .unwrap_or_else(|| panic!("no DisruptionTarget condition: {evicted}"));
        assert_eq!(
            (&target["status"], &target["reason"]),
            (&json!("True"), &json!("EvictionByEvictionAPI"))
        );
        let budget = pdb(api, "web-pdb");
        assert_eq!(budget_counts(&budget), [2, 2, 3, 0], "{budget}");
        // the pod terminating, the controller no longer lists it as disrupted
        assert!(budget["status"].get("disruptedPods").is_none(), "{budget}");
        // The next is refused.
        assert_eq!(
            evict(api, "web-1", None),
            (429, budget_refusal("web-pdb", 2, 2))
        );
        assert!(
            pod(api, "web-1").unwrap()["metadata"]
                .get("deletionTimestamp")
                .is_none()
        );
        assert_eq!(pdb_row(k, "web-pdb"), ["web-pdb", "2", "N/A", "0"]);
    });
}

#[test]
fn two_budgets_over_one_pod_make_its_eviction_the_real_500() {
    each_kubectl(|api, k| {
        assert!(k.apply(&node_manifest("node-a"), &[]).success());
        assert!(
            k.apply(
                &bound_pod("web-0", "app: web, tier: front", "node-a", 30),
                &[]
            )
            .success()
        );
        report_ready(k, "web-0");
        assert!(
            k.apply(&pdb_manifest("by-app", "web", "minAvailable: 0"), &[])
                .success()
        );
        let by_tier = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: by-tier}\n\
                       spec:\n  minAvailable: 0\n  selector: {matchLabels: {tier: front}}\n";
        assert!(k.apply(by_tier, &[]).success());
        // Each budget alone would allow the eviction.
        for name in ["by-app", "by-tier"] {
            assert_eq!(budget_counts(&pdb(api, name)), [1, 0, 1, 1], "{name}");
        }
        let message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
        // kubectl drain gives up at once: not a refusal to retry.
        let out = k.run(&["drain", "node-a", "--force", "--timeout=20s"]);
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(!out.success() && text.contains(message), "{out:?}");
        assert!(!text.contains("will retry"), "{out:?}");
        assert_eq!(
            evict(api, "web-0", None),
            (
                500,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "code": 500})
            )
        );
        let p = pod(api, "web-0").expect("web-0 was deleted");
        assert!(p["metadata"].get("deletionTimestamp").is_none(), "{p}");
    });
}

#[test]
fn a_kubelet_stand_in_finishes_graceful_deletions_on_its_node_only() {
    each_kubectl(|api, k| {
        for node in ["node-a", "node-b"] {
            assert!(k.apply(&node_manifest(node), &[]).success());
        }
        for (name, node) in [
            ("early-a", "node-a"),
            ("slow-a", "node-a"),
            ("slow-b", "node-b"),
        ] {
            assert!(
                k.apply(&bound_pod(name, "app: web", node, 1), &[])
                    .success()
            );
            report_ready(k, name);
        }
        // Without a kubelet, a graceful deletion does not end.
        for name in ["early-a", "slow-b"] {
            assert_eq!(evict(api, name, None).0, 201);
            let p = pod(api, name).unwrap();
            assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 1, "{p}");
        }
        // node-a's kubelet: kubectl drain evicts slow-a (grace 1 s) and waits until
        // it is gone; early-a, terminating before the kubelet started, goes too.
        let rv = api.resource_version();
        let mut watch = api.watch(&format!(
            "/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
        ));
        api.run_kubelet("node-a");
        let started = Instant::now();
        let out = k.run(&["drain", "node-a", "--force", "--timeout=20s"]);
        assert!(out.success(), "{out:?}");
        assert!(out.stdout.contains("pod/slow-a evicted"), "{out:?}");
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "slow-a went before its grace period ended"
        );
        for name in ["early-a", "slow-a"] {
            let event = watch.until(WITHIN, &format!("{name} DELETED"), |e| {
                e["type"] == "DELETED" && e["object"]["metadata"]["name"] == name
            });
            assert!(
                event["object"]["metadata"]["deletionTimestamp"].is_string(),
                "{event}"
            );
            assert_eq!(pod(api, name), None);
        }
        // node-b has none: slow-b, whose grace period ended before slow-a's, stays.
        let waiting = pod(api, "slow-b").expect("slow-b was deleted without a kubelet");
        assert!(
            waiting["metadata"]["deletionTimestamp"].is_string(),
            "{waiting}"
        );
        assert!(k.ok(&["get", "pod", "slow-b"]).contains("Terminating"));
        // Its kubelet starting finishes it.
        api.run_kubelet("node-b");
        wait_until(WITHIN, "slow-b to be deleted", || {
            pod(api, "slow-b").is_none()
        });
        // A stopped stand-in finishes nothing: late-a (node-a) stays while later-b,
        // evicted after it on node-b, is gone.
        api.stop_kubelet("node-a");
        for (name, node) in [("late-a", "node-a"), ("later-b", "node-b")] {
            assert!(
                k.apply(&bound_pod(name, "app: late", node, 1), &[])
                    .success()
            );
            report_ready(k, name);
            assert_eq!(evict(api, name, None).0, 201);
        }
        wait_until(WITHIN, "later-b to be deleted", || {
            pod(api, "later-b").is_none()
        });
        let waiting = pod(api, "late-a").expect("late-a was deleted by a stopped kubelet");
        assert!(
            waiting["metadata"]["deletionTimestamp"].is_string(),
            "{waiting}"
        );
    });
}

#[test]
fn evictions_of_unready_pending_and_unmanaged_pods_follow_the_real_rules() {
    let api = KubeApi::start();
    let k = Kubectl::version("1.33", &api);
    assert!(k.apply(&node_manifest("node-a"), &[]).success());
    for name in ["db-0", "db-1", "db-2"] {
        assert!(
            k.apply(&bound_pod(name, "app: db", "node-a", 30), &[])
                .success()
        );
        report_ready(&k, name);
    }
    // Pending (never started): counted as expected, never as healthy.
    let pending = "apiVersion: v1\nkind: Pod\nmetadata: {name: db-new, labels: {app: db}}\n\
                   spec: {containers: [{name: c, image: busybox}]}\n";
    assert!(k.apply(pending, &[]).success());
    assert!(
        k.apply(&pdb_manifest("db", "db", "minAvailable: 3"), &[])
            .success()
    );
    assert_eq!(budget_counts(&pdb(&api, "db")), [3, 3, 4, 0]);
    // A Pending pod is evicted whatever the budget (canIgnorePDB).
    assert_eq!(evict(&api, "db-new", None).0, 201);
    assert_eq!(pod(&api, "db-new"), None);
    // A pod that is Running but not Ready, the budget not met: refused (IfHealthyBudget).
    k.ok(&[
        "patch",
        "pod",
        "db-2",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#,
    ]);
    assert_eq!(budget_counts(&pdb(&api, "db")), [2, 3, 3, 0]);
    assert_eq!(evict(&api, "db-2", None), (429, budget_refusal("db", 3, 2)));
    // With AlwaysAllow it goes, and the budget is not charged for it.
    k.ok(&[
        "patch",
        "pdb",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"unhealthyPodEvictionPolicy":"AlwaysAllow"}}"#,
    ]);
    assert_eq!(evict(&api, "db-2", None).0, 201);
    let budget = pdb(&api, "db");
    assert_eq!(budget_counts(&budget), [2, 3, 3, 0], "{budget}");
    assert!(budget["status"].get("disruptedPods").is_none(), "{budget}");
    // Bare pods under maxUnavailable: the controller counts controllers' scale, so
    // none is expected and no disruption is allowed.
    assert!(
        k.apply(&bound_pod("bare-0", "app: bare", "node-a", 30), &[])
            .success()
    );
    report_ready(&k, "bare-0");
    assert!(
        k.apply(&pdb_manifest("bare", "bare", "maxUnavailable: 1"), &[])
            .success()
    );
    assert_eq!(budget_counts(&pdb(&api, "bare")), [1, 0, 0, 0]);
    assert_eq!(
        evict(&api, "bare-0", None),
        (429, budget_refusal("bare", 0, 1))
    );
    // Pods of a Deployment: its replicas are the expected count.
    assert!(k.apply(&deployment(4, "stable"), &[]).success());
    let uid = k.json(&["get", "deployment", "web"])["metadata"]["uid"].clone();
    for name in ["web-0", "web-1"] {
        let owned = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}, "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": uid, "controller": true}]},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "busybox"}]},
        });
        assert!(k.apply(&owned.to_string(), &[]).success());
        report_ready(&k, name);
    }
    assert!(
        k.apply(&pdb_manifest("web", "web", "maxUnavailable: \"50%\""), &[])
            .success()
    );
    assert_eq!(budget_counts(&pdb(&api, "web")), [2, 2, 4, 0]);
    assert_eq!(
        evict(&api, "web-0", None),
        (429, budget_refusal("web", 2, 2))
    );
    // Pods of a DaemonSet (no scale subresource): the sync fails, failSafe allows
    // nothing and leaves the generation unobserved.
    let ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  \
              selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    \
              spec: {containers: [{name: c, image: busybox}]}\n";
    assert!(k.apply(ds, &[]).success());
    let uid = k.json(&["get", "daemonset", "agent"])["metadata"]["uid"].clone();
    let owned = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent-0", "labels": {"app": "agent"}, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": uid, "controller": true}]},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "busybox"}]},
    });
    assert!(k.apply(&owned.to_string(), &[]).success());
    report_ready(&k, "agent-0");
    assert!(
        k.apply(&pdb_manifest("agent", "agent", "maxUnavailable: 1"), &[])
            .success()
    );
    let budget = pdb(&api, "agent");
    let condition = &budget["status"]["conditions"][0];
    assert_eq!(
        (
            &condition["status"],
            &condition["reason"],
            &condition["message"]
        ),
        (
            &json!("False"),
            &json!("SyncFailed"),
            &json!("daemonsets.apps does not implement the scale subresource")
        ),
        "{budget}"
    );
    assert!(
        budget["status"].get("observedGeneration").is_none(),
        "{budget}"
    );
    let (status, body) = evict(&api, "agent-0", None);
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["details"],
        json!({"causes": [{"reason": "DisruptionBudget",
                           "message": "The disruption budget agent is still being processed by the server."}],
               "retryAfterSeconds": 10})
    );
}

#[test]
fn pod_disruption_budgets_are_validated_as_the_real_server_does() {
    let api = KubeApi::start();
    let base = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    let create = |spec: Value| {
        api.call(
            "POST",
            base,
            Some(
                &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"name": "b"}, "spec": spec}),
            ),
        )
    };
    let (status, body) = create(json!({"minAvailable": 1, "maxUnavailable": 1,
                                        "selector": {"matchLabels": {"app": "x"}}}));
    assert_eq!(
        (status, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("PodDisruptionBudget.policy \"b\" is invalid: spec: Invalid value: policy.PodDisruptionBudgetSpec{")
            && message.ends_with("}: minAvailable and maxUnavailable cannot be both set"),
        "{body}"
    );
    assert_eq!(body["details"]["causes"][0]["field"], "spec");
    let (status, body) = create(json!({"maxUnavailable": "150%"}));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%"
    );
    let (status, body) = create(json!({"minAvailable": -1}));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Invalid value: -1: must be greater than or equal to 0"
    );
    // No selector is valid: it selects no pods. Status starts empty, then is the
    // controller's; a client's status on create is dropped.
    let (status, body) = create(json!({"minAvailable": 1}));
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["status"],
        json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
    );
    assert_eq!(body["metadata"]["generation"], 1);
    let budget = pdb(&api, "b");
    assert_eq!(budget_counts(&budget), [0, 1, 0, 0], "{budget}");
    assert_eq!(budget["status"]["observedGeneration"], 1);
}

/// The ServiceAccount the RBAC tests authenticate as, and its token.
const SA_USER: &str = "system:serviceaccount:tend-system:tend-cluster";
const SA_TOKEN: &str = "tend-cluster-token";

/// RBAC for [`SA_USER`]: nodes readable and their status patchable
/// everywhere; in kube-system one ConfigMap by name and Pod evictions; in
/// `scratch` anything, through a wildcard ClusterRole bound by a RoleBinding
/// to the ServiceAccounts' group of tend-system.
const RBAC: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: tend-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: scratch}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "tend:nodes"}
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["nodes/status"]
    verbs: ["get", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "tend:nodes"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "tend:nodes"}
subjects:
  - {kind: ServiceAccount, name: tend-cluster, namespace: tend-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "tend:kubeadm", namespace: kube-system}
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["kubeadm-config"]
    verbs: ["get", "list"]
  - apiGroups: [""]
    resources: ["pods/eviction"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "tend:kubeadm", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "tend:kubeadm"}
subjects:
  - {kind: ServiceAccount, name: tend-cluster, namespace: tend-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: anything}
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: anything, namespace: scratch}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: anything}
subjects:
  - {kind: Group, name: "system:serviceaccounts:tend-system"}
"#;

/// kubectl `args` as the user of `token`, over the fake's HTTPS port
/// (kubectl sends credentials over TLS only).
fn with_token(api: &KubeApi, token: &str, args: &[&str]) -> Vec<String> {
    let tls_port = read(&api.dir().join("tls-port"));
    let mut all: Vec<String> = [
        "--server",
        &format!("https://127.0.0.1:{}", tls_port.trim()),
        "--certificate-authority",
        &api.dir().join("tls.crt").display().to_string(),
        "--token",
        token,
    ]
    .map(String::from)
    .into();
    all.extend(args.iter().map(|a| a.to_string()));
    all
}

/// The fake enforces the RBAC objects it holds for a ServiceAccount's token,
/// as the real RBAC authorizer does: verbs, groups, resources and
/// subresources, resourceNames (also for a list by metadata.name), namespaces,
/// wildcards, Group subjects; denials are the real 403 Status; `kubectl auth
/// can-i` asks it through SelfSubjectAccessReviews. The fixtures' admin token
/// (the kubeconfig kubectl uses for setup) is in system:masters: allowed
/// everything, as on a real server.
#[test]
fn rbac_objects_authorize_a_service_account_token() {
    for version in KUBECTLS {
        let api = KubeApi::start_with(&["--token", &format!("{SA_TOKEN}={SA_USER}")]);
        let k = Kubectl::version(version, &api);
        eprintln!("--- kubectl {version} against {}", api.url());
        let out = k.apply(RBAC, &[]);
        assert!(out.success(), "{out:?}");
        // What `tend rbac` prints is valid RBAC here too (names like "tend-system:tend-node").
        for scope in ["node", "cluster"] {
            let manifest =
                read(&workspace_root().join(format!("examples/deploy/rbac-{scope}.yaml")));
            // The node example's plugins have no kube grant: no objects to apply.
            if !manifest.contains("\nkind: ") {
                continue;
            }
            let out = k.apply(&manifest, &[]);
            assert!(out.success(), "rbac-{scope}.yaml: {out:?}");
        }
        k.ok(&[
            "create",
            "-n",
            "kube-system",
            "configmap",
            "kubeadm-config",
            "--from-literal=a=1",
        ]);
        k.ok(&[
            "create",
            "-n",
            "kube-system",
            "configmap",
            "other",
            "--from-literal=a=1",
        ]);
        assert!(
            k.apply("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n", &[])
                .success()
        );

        let sa = |args: &[&str]| {
            k.run(
                &with_token(&api, SA_TOKEN, args)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            )
        };
        let allowed = |args: &[&str]| {
            let out = sa(args);
            assert!(out.success(), "{args:?} as the ServiceAccount: {out:?}");
            out.stdout
        };
        let denied = |args: &[&str], message: &str| {
            let out = sa(args);
            assert_eq!(out.code, Some(1), "{args:?} as the ServiceAccount: {out:?}");
            // "Error from server (Forbidden): MESSAGE" (or "error: failed to create ...: MESSAGE")
            assert!(
                out.stderr.contains(&format!(": {message}")),
                "{args:?}: want {message:?} in {:?}",
                out.stderr
            );
        };
        let can_i = |args: &[&str]| {
            let mut all = vec!["auth", "can-i"];
            all.extend_from_slice(args);
            let out = sa(&all);
            match out.stdout.trim() {
                "yes" => true,
                "no" => false,
                _ => panic!("kubectl auth can-i {args:?}: {out:?}"),
            }
        };

        // A ClusterRoleBinding's rules, everywhere: nodes readable, not
        // patchable; their status subresource patchable.
        assert!(allowed(&["get", "nodes"]).contains("n1"));
        let cannot = |verb: &str, resource: &str, group: &str, where_: &str| {
            format!(
                "User \"{SA_USER}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {where_}"
            )
        };
        denied(
            &["label", "node", "n1", "a=b"],
            &format!(
                "nodes \"n1\" is forbidden: {}",
                cannot("patch", "nodes", "", "at the cluster scope")
            ),
        );
        allowed(&[
            "patch",
            "node",
            "n1",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ]);
        assert!(
            k.json(&["get", "node", "n1"])["metadata"]["labels"]
                .get("a")
                .is_none()
        );
        assert!(can_i(&["patch", "nodes", "--subresource", "status"]));
        assert!(!can_i(&["update", "nodes", "--subresource", "status"]));
        assert!(!can_i(&["delete", "nodes"]));

        // A RoleBinding's Role, in its namespace only, by resource name.
        assert!(
            allowed(&[
                "get",
                "configmap",
                "kubeadm-config",
                "-n",
                "kube-system",
                "-o",
                "name"
            ])
            .contains("kubeadm-config")
        );
        denied(
            &["get", "configmap", "other", "-n", "kube-system"],
            &format!(
                "configmaps \"other\" is forbidden: {}",
                cannot("get", "configmaps", "", "in the namespace \"kube-system\"")
            ),
        );
        denied(
            &["get", "configmaps", "-n", "kube-system"],
            &format!(
                "configmaps is forbidden: {}",
                cannot("list", "configmaps", "", "in the namespace \"kube-system\"")
            ),
        );
        // A list narrowed to the name by a field selector is about that name.
        let listed = allowed(&[
            "get",
            "configmaps",
            "-n",
            "kube-system",
            "--field-selector",
            "metadata.name=kubeadm-config",
            "-o",
            "name",
        ]);
        assert_eq!(listed.trim(), "configmap/kubeadm-config");
        denied(
            &["get", "configmap", "kubeadm-config", "-n", "default"],
            &format!(
                "configmaps \"kubeadm-config\" is forbidden: {}",
                cannot("get", "configmaps", "", "in the namespace \"default\"")
            ),
        );
        assert!(can_i(&[
            "create",
            "pods",
            "--subresource",
            "eviction",
            "-n",
            "kube-system"
        ]));
        assert!(!can_i(&[
            "create",
            "pods",
            "--subresource",
            "eviction",
            "-n",
            "default"
        ]));
        assert!(!can_i(&["create", "pods", "-n", "kube-system"]));

        // A wildcard ClusterRole bound in one namespace to a Group.
        assert!(can_i(&["delete", "deployments.apps", "-n", "scratch"]));
        assert!(can_i(&[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "scratch"
        ]));
        assert!(!can_i(&[
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "default"
        ]));
        allowed(&[
            "create",
            "configmap",
            "made",
            "-n",
            "scratch",
            "--from-literal=a=1",
        ]);
        denied(
            &[
                "create",
                "configmap",
                "made",
                "-n",
                "default",
                "--from-literal=a=1",
            ],
            &format!(
                "configmaps is forbidden: {}",
                cannot("create", "configmaps", "", "in the namespace \"default\"")
            ),
        );
        // Bindings are read at every request: without the RoleBinding, nothing in scratch.
        k.ok(&["delete", "rolebinding", "anything", "-n", "scratch"]);
        assert!(!can_i(&["create", "configmaps", "-n", "scratch"]));
        denied(
            &["delete", "configmap", "made", "-n", "scratch"],
            &format!(
                "configmaps \"made\" is forbidden: {}",
                cannot("delete", "configmaps", "", "in the namespace \"scratch\"")
            ),
        );

        // An unknown token is not anyone; the admin may do anything.
        let out = k.run(
            &with_token(&api, "wrong", &["get", "nodes"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr
                .contains("error: You must be logged in to the server (Unauthorized)"),
            "{out:?}"
        );
        assert_eq!(k.ok(&["auth", "can-i", "delete", "nodes"]).trim(), "yes");
        assert_eq!(k.ok(&["auth", "can-i", "*", "*"]).trim(), "yes");

        // The Status of a denial over raw HTTP, and the fake's request log.
        let auth = format!("Bearer {SA_TOKEN}");
        let (status, body) = tend_e2e::http_call(
            api.port(),
            "DELETE",
            "/apis/coordination.k8s.io/v1/namespaces/tend-system/leases/tend-cluster",
            &[("Authorization", &auth), ("Accept", "application/json")],
            "",
            WITHIN,
        )
        .unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, 403, "{body}");
        assert_eq!(
            body,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("leases.coordination.k8s.io \"tend-cluster\" is forbidden: {}",
                    cannot("delete", "leases", "coordination.k8s.io", "in the namespace \"tend-system\"")),
                "reason": "Forbidden",
                "details": {"name": "tend-cluster", "group": "coordination.k8s.io", "kind": "leases"},
                "code": 403,
            })
        );
        // An eviction is `create` on pods/eviction: allowed in kube-system (the
        // Pod is missing: 404), refused elsewhere.
        let evict = |ns: &str| {
            let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web", "namespace": ns}});
            tend_e2e::http_call(
                api.port(),
                "POST",
                &format!("/api/v1/namespaces/{ns}/pods/web/eviction"),
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                &body.to_string(),
                WITHIN,
            )
            .unwrap()
        };
        assert_eq!(evict("kube-system").0, 404);
        let (status, body) = evict("default");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, 403, "{body}");
        assert_eq!(
            body["message"].as_str().unwrap(),
            format!(
                "pods \"web\" is forbidden: {}",
                cannot(
                    "create",
                    "pods/eviction",
                    "",
                    "in the namespace \"default\""
                )
            )
        );
        let log = api.requests()["log"].as_array().unwrap().clone();
        let forbidden: Vec<&Value> = log.iter().filter(|e| e["code"] == 403).collect();
        assert!(forbidden.len() >= 7, "{forbidden:#?}");
        assert!(
            forbidden.iter().all(|e| e["user"] == SA_USER),
            "{forbidden:#?}"
        );
        assert!(log.iter().any(|e| e["code"] == 401), "no 401 logged");
    }
}

/// A kubeconfig for `api`'s plain HTTP port with no user: kubectl sends no
/// credentials, as a client without any does.
fn anonymous_kubeconfig(api: &KubeApi, dir: &Path) -> String {
    let path = dir.join("anonymous");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context: {{cluster: fake}}\ncurrent-context: fake\n",
            api.url()
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// A request without credentials is system:anonymous, whom a real API server
/// (anonymous auth on, RBAC) allows only what system:public-info-viewer
/// gives: /version and the health checks. kubectl's discovery is refused, so
/// it prints what it prints against a real cluster ("couldn't get current
/// server API group list: unknown", "Error from server (Forbidden): unknown");
/// `auth can-i` is refused its review; raw HTTP gets the real 403 Status; an
/// unknown token is 401. The request log names the user.
#[test]
fn a_request_without_credentials_is_anonymous_and_refused() {
    each_kubectl(|api, k| {
        let dir = tempfile::tempdir().unwrap();
        let anonymous = anonymous_kubeconfig(api, dir.path());
        let as_anonymous = |args: &[&str]| {
            let mut all = vec!["--kubeconfig", anonymous.as_str()];
            all.extend_from_slice(args);
            k.run(&all)
        };
        assert!(
            k.apply("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n", &[])
                .success()
        );

        let out = as_anonymous(&["get", "nodes"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr
                .contains("couldn't get current server API group list: unknown"),
            "{out:?}"
        );
        assert_eq!(
            out.stderr.lines().last(),
            Some("Error from server (Forbidden): unknown"),
            "{out:?}"
        );
        assert!(!out.stdout.contains("n1"), "{out:?}");
        let out = as_anonymous(&["get", "--raw", "/api"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains(
                "Error from server (Forbidden): forbidden: User \"system:anonymous\" cannot get path \"/api\""
            ),
            "{out:?}"
        );
        let out = as_anonymous(&["auth", "can-i", "get", "nodes"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains(
                "Error from server (Forbidden): selfsubjectaccessreviews.authorization.k8s.io is forbidden: \
                 User \"system:anonymous\" cannot create resource \"selfsubjectaccessreviews\" in API group \
                 \"authorization.k8s.io\" at the cluster scope"
            ),
            "{out:?}"
        );
        // What system:public-info-viewer gives everyone.
        for path in ["/version", "/healthz", "/livez", "/readyz"] {
            let out = as_anonymous(&["get", "--raw", path]);
            assert!(out.success(), "{path}: {out:?}");
        }

        // Raw HTTP: the Status a real server answers, and 401 for a token it does not know.
        let (status, body) = tend_e2e::http_call(
            api.port(),
            "GET",
            "/api/v1/nodes/n1",
            &[("Accept", "application/json")],
            "",
            WITHIN,
        )
        .unwrap();
        assert_eq!(status, 403, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "nodes \"n1\" is forbidden: User \"system:anonymous\" cannot get resource \"nodes\" in API group \"\" at the cluster scope",
                "reason": "Forbidden", "details": {"name": "n1", "kind": "nodes"}, "code": 403,
            })
        );
        let (status, body) = tend_e2e::http_call(
            api.port(),
            "GET",
            "/api/v1/nodes",
            &[
                ("Accept", "application/json"),
                ("Authorization", "Bearer wrong"),
            ],
            "",
            WITHIN,
        )
        .unwrap();
        assert_eq!(status, 401, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
            })
        );
        let log = api.requests()["log"].as_array().unwrap().clone();
        let refused: Vec<&Value> = log.iter().filter(|e| e["code"] == 403).collect();
        assert!(refused.len() >= 4, "{refused:#?}");
        assert!(
            refused.iter().all(|e| e["user"] == "system:anonymous"),
            "{refused:#?}"
        );
        assert!(
            log.iter()
                .any(|e| e["user"] == "kubernetes-admin" && e["verb"] == "create"),
            "the admin's apply is not in the log"
        );
        assert!(
            log.iter().any(|e| e["code"] == 401 && e["user"].is_null()),
            "no 401 logged"
        );
    });
}

/// A Node's condition of `kind` in `node`, or Null.
fn condition<'a>(node: &'a Value, kind: &str) -> &'a Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// The condition types of `node`, in order.
fn condition_types(node: &Value) -> Vec<String> {
    node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap_or("<none>").to_string())
        .collect()
}

/// The conditions of `node` but those of `kind`.
fn conditions_but(node: &Value, kind: &str) -> Value {
    Value::Array(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] != kind)
            .cloned()
            .collect(),
    )
}

const DEADLOCK: &str = r#"{"status":{"conditions":[{"type":"KernelDeadlock","status":"True","reason":"TaskHung","message":"m","lastHeartbeatTime":"2026-02-01T00:00:00Z","lastTransitionTime":"2026-02-01T00:00:00Z"}]}}"#;

/// What a node-problem-detector-like writer (issue 28) does to its Node, with
/// the real kubectl, as a real API server answers it: a strategic merge patch
/// of the status subresource adds or (with `$patch: delete`) removes one
/// condition by its type and keeps the kubelet's; a merge patch replaces the
/// whole list (why the host must never send one); a JSON patch removes by
/// index behind a `test`, and a failed `test` is the real 422; the main
/// resource ignores status; a status write bumps resourceVersion, is a
/// MODIFIED event, and Nodes have no generation; `kubectl wait`, `describe`
/// and jsonpath see the condition; nothing about conditions is validated.
#[test]
fn kubectl_sets_node_conditions_through_the_status_subresource() {
    each_kubectl(|api, k| {
        let seeded = api.seed_node("n1");
        assert_eq!(
            seeded["status"]["conditions"],
            tend_e2e::kubelet_conditions()
        );
        assert!(seeded["metadata"].get("generation").is_none(), "{seeded}");
        let rv0 = rv(&seeded);
        let mut watch = api.watch(&format!(
            "/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dn1&resourceVersion={rv0}"
        ));
        assert_eq!(watch.status, 200);
        let status_patch = |kind: &str, patch: &str| {
            k.run(&[
                "patch",
                "node",
                "n1",
                "--subresource=status",
                &format!("--type={kind}"),
                "-p",
                patch,
            ])
        };

        // Strategic merge adds one condition, keeps the kubelet's.
        let out = status_patch("strategic", DEADLOCK);
        assert!(out.success(), "{out:?}");
        assert!(out.stdout.contains("node/n1 patched"), "{out:?}");
        let node = k.json(&["get", "node", "n1"]);
        let mut want = tend_e2e::KUBELET_CONDITION_TYPES.map(String::from).to_vec();
        want.push("KernelDeadlock".into());
        assert_eq!(condition_types(&node), want);
        assert_eq!(
            conditions_but(&node, "KernelDeadlock"),
            tend_e2e::kubelet_conditions()
        );
        assert_eq!(condition(&node, "KernelDeadlock")["reason"], "TaskHung");
        assert!(node["metadata"].get("generation").is_none(), "{node}");
        assert!(rv(&node) > rv0);
        assert_eq!(node["spec"], seeded["spec"]);
        // kubectl hides managedFields: read them over HTTP.
        let (_, raw) = api.call("GET", "/api/v1/nodes/n1", None);
        let managed = raw["metadata"]["managedFields"].as_array().unwrap();
        assert!(
            managed
                .iter()
                .any(|m| m["subresource"] == "status" && m["operation"] == "Update"),
            "{managed:?}"
        );
        let event = watch.until(WITHIN, "the status write's event", |e| {
            e["type"] == "MODIFIED"
        });
        assert_eq!(rv(&event["object"]), rv(&node));
        assert_eq!(
            condition(&event["object"], "KernelDeadlock")["status"],
            "True"
        );

        // Readers see it: jsonpath, wait, describe.
        let reason = k.ok(&[
            "get",
            "node",
            "n1",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="KernelDeadlock")].reason}"#,
        ]);
        assert_eq!(reason, "TaskHung");
        let waited = k.ok(&[
            "wait",
            "--for=condition=KernelDeadlock=True",
            "node/n1",
            "--timeout=10s",
        ]);
        assert!(waited.contains("node/n1 condition met"), "{waited}");
        let described = k.ok(&["describe", "node", "n1"]);
        let line = described
            .lines()
            .find(|l| l.trim_start().starts_with("KernelDeadlock"))
            .unwrap_or_else(|| panic!("no KernelDeadlock in describe:\n{described}"));
        assert!(line.contains("True") && line.contains("TaskHung"), "{line}");
        assert!(described.contains("KubeletReady"), "{described}");

        // The main resource ignores status: nothing written.
        let before = k.json(&["get", "node", "n1"]);
        let out = k.run(&[
            "patch",
            "node",
            "n1",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[]}}"#,
        ]);
        assert!(out.success(), "{out:?}");
        assert!(out.stdout.contains("(no change)"), "{out:?}");
        assert_eq!(k.json(&["get", "node", "n1"]), before);

        // `$patch: delete` removes that condition only.
        let out = status_patch(
            "strategic",
            r#"{"status":{"conditions":[{"type":"KernelDeadlock","$patch":"delete"}]}}"#,
        );
        assert!(out.success(), "{out:?}");
        let node = k.json(&["get", "node", "n1"]);
        assert_eq!(node["status"]["conditions"], tend_e2e::kubelet_conditions());

        // JSON patch: a failed `test` is the real 422 and changes nothing...
        assert!(status_patch("strategic", DEADLOCK).success());
        let before = k.json(&["get", "node", "n1"]);
        let guarded_remove = |expected: &str| {
            format!(
                r#"[{{"op":"test","path":"/status/conditions/5/type","value":"{expected}"}},{{"op":"remove","path":"/status/conditions/5"}}]"#
            )
        };
        let out = status_patch("json", &guarded_remove("Ready"));
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains(
                "The request is invalid: the server rejected our request due to an error in our request"
            ),
            "{out:?}"
        );
        assert_eq!(k.json(&["get", "node", "n1"]), before);
        let (code, body) = api
            .call_raw(
                "PATCH",
                "/api/v1/nodes/n1/status",
                "application/json-patch+json",
                &guarded_remove("Ready"),
                None,
                WITHIN,
            )
            .unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(code, 422, "{body}");
        assert_eq!(
            body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "the server rejected our request due to an error in our request",
                   "reason": "Invalid", "details": {}, "code": 422})
        );
        // ...and one that holds removes by index.
        let out = status_patch("json", &guarded_remove("KernelDeadlock"));
        assert!(out.success(), "{out:?}");
        let node = k.json(&["get", "node", "n1"]);
        assert_eq!(node["status"]["conditions"], tend_e2e::kubelet_conditions());

        // An item without its merge key is the real 500 (strategicpatch's ErrNoMergeKey).
        let out = status_patch(
            "strategic",
            r#"{"status":{"conditions":[{"status":"True","reason":"R"}]}}"#,
        );
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains(
                "Error from server: map: map[reason:R status:True] does not contain declared merge key: type"
            ),
            "{out:?}"
        );
        let (code, body) = api
            .call_raw(
                "PATCH",
                "/api/v1/nodes/n1/status",
                "application/strategic-merge-patch+json",
                r#"{"status":{"conditions":[{"status":"True"}]}}"#,
                None,
                WITHIN,
            )
            .unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(code, 500, "{body}");
        assert!(body.get("reason").is_none(), "{body}");
        // Nothing in a condition is validated (ValidateNodeUpdate checks none): one
        // without status is stored, and reads back as the Go type writes it.
        let out = status_patch(
            "strategic",
            r#"{"status":{"conditions":[{"type":"NoStatus","reason":"","lastHeartbeatTime":"2026-02-01T02:00:00.5+02:00"}]}}"#,
        );
        assert!(out.success(), "{out:?}");
        let node = k.json(&["get", "node", "n1"]);
        assert_eq!(
            condition(&node, "NoStatus"),
            &json!({"type": "NoStatus", "status": "", "lastHeartbeatTime": "2026-02-01T00:00:00Z",
                    "lastTransitionTime": null})
        );

        // A merge patch replaces the whole list, the kubelet's conditions too.
        let out = status_patch(
            "merge",
            r#"{"status":{"conditions":[{"type":"KernelDeadlock","status":"True"}]}}"#,
        );
        assert!(out.success(), "{out:?}");
        let node = k.json(&["get", "node", "n1"]);
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "KernelDeadlock", "status": "True", "lastHeartbeatTime": null,
                    "lastTransitionTime": null}])
        );
        assert!(node["metadata"].get("generation").is_none(), "{node}");
    });
}

/// A ServiceAccount allowed `patch` on nodes/status (and no `patch` on nodes)
/// patches a Node's conditions through the subresource with one PATCH and is
/// refused (403) on the Node itself, whatever the patch carries; kubectl's
/// `patch --subresource=status` also needs `get` on nodes/status, as it reads
/// the subresource first.
#[test]
fn node_status_rbac_allows_the_subresource_not_the_node() {
    const ROLE: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "npd:status"}
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["nodes/status"]
    verbs: ["patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "npd:status"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "npd:status"}
subjects:
  - {kind: ServiceAccount, name: tend-cluster, namespace: tend-system}
"#;
    for version in KUBECTLS {
        let api = KubeApi::start_with(&["--token", &format!("{SA_TOKEN}={SA_USER}")]);
        let k = Kubectl::version(version, &api);
        eprintln!("--- kubectl {version} against {}", api.url());
        let out = k.apply(ROLE, &[]);
        assert!(out.success(), "{out:?}");
        api.seed_node("n1");
        let sa = |args: &[&str]| {
            k.run(
                &with_token(&api, SA_TOKEN, args)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            )
        };
        let out = sa(&[
            "patch",
            "node",
            "n1",
            "--subresource=status",
            "-p",
            DEADLOCK,
        ]);
        // kubectl reads the subresource before it patches it, which `patch` alone
        // does not allow (as on a real server)...
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr.contains(&format!(
                "User \"{SA_USER}\" cannot get resource \"nodes/status\" in API group \"\" at the cluster scope"
            )),
            "{out:?}"
        );
        // ...while one PATCH, what a client such as kube-rs's patch_status sends, is allowed.
        let auth = format!("Bearer {SA_TOKEN}");
        let patch_as_sa = |path: &str| {
            tend_e2e::http_call(
                api.port(),
                "PATCH",
                path,
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/strategic-merge-patch+json"),
                ],
                DEADLOCK,
                WITHIN,
            )
            .unwrap()
        };
        let (code, body) = patch_as_sa("/api/v1/nodes/n1/status");
        assert_eq!(code, 200, "{body}");
        let (code, body) = patch_as_sa("/api/v1/nodes/n1");
        assert_eq!(code, 403, "{body}");
        let node = k.json(&["get", "node", "n1"]);
        assert_eq!(condition(&node, "KernelDeadlock")["status"], "True");
        let forbidden = format!(
            "nodes \"n1\" is forbidden: User \"{SA_USER}\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        );
        for patch in [DEADLOCK, r#"{"metadata":{"labels":{"a":"b"}}}"#] {
            let out = sa(&["patch", "node", "n1", "-p", patch]);
            assert_eq!(out.code, Some(1), "{out:?}");
            assert!(
                out.stderr
                    .contains(&format!("Error from server (Forbidden): {forbidden}")),
                "{out:?}"
            );
        }
        let out = sa(&["label", "node", "n1", "a=b"]);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert_eq!(k.json(&["get", "node", "n1"]), node, "a refusal wrote");
    }
}

/// `KubeApi::writes_to` counts the write requests (POST, PUT, PATCH) under one
/// path from the server's request log, whatever their answer, and no read.
#[test]
fn writes_to_counts_write_requests_per_path() {
    let api = KubeApi::start();
    let k = Kubectl::version("1.33", &api);
    api.seed_node("n1");
    api.seed_node("n10");
    for _ in 0..2 {
        k.ok(&[
            "patch",
            "node",
            "n1",
            "--subresource=status",
            "-p",
            DEADLOCK,
        ]);
    }
    k.ok(&["label", "node", "n1", "a=b"]);
    k.ok(&[
        "patch",
        "node",
        "n10",
        "--subresource=status",
        "-p",
        DEADLOCK,
    ]);
    // A refused write is still a write request.
    let out = k.run(&[
        "patch",
        "node",
        "n10",
        "--subresource=status",
        "-p",
        r#"{"status":{"conditions":[{"status":"x"}]}}"#,
    ]);
    assert_eq!(out.code, Some(1), "{out:?}");
    k.ok(&["get", "node", "n1"]);
    k.ok(&["get", "nodes", "-o", "json"]);
    assert_eq!(api.writes_to("/api/v1/nodes/n1/status"), 2);
    assert_eq!(api.writes_to("/api/v1/nodes/n1"), 3);
    assert_eq!(api.writes_to("/api/v1/nodes/n10/status"), 2);
    assert_eq!(api.writes_to("/api/v1/nodes/n10/"), 2);
    assert_eq!(api.writes_to("/api/v1/nodes"), 7, "{}", api.log());
    assert_eq!(api.writes_to("/api/v1/pods"), 0);
}
