//! `tend reconcile --record` and `tend replay`: a real reconcile of
//! mirror-gate against a real registry, recorded in-process and by the
//! daemon, replayed with the registry gone and the node untouched; and a
//! reconcile mutating through kube, cloud, systemd and the CRI, recorded
//! against the real peers and replayed with every peer watched: none of
//! them sees a request.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tend_e2e::cloud::{CloudPeer, Provider};
use tend_e2e::{
    ContainerdPeer, KubeApi, Kubectl, Registry, Sandbox, SandboxState, SystemdPeer, tend_bin,
};

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

/// `tend replay FILE [ARGS]`: (success, stdout and stderr). Once it loaded
/// the component, its compile cache (the user's, here beside FILE) holds it.
fn replay(file: &Path, args: &[&str]) -> (bool, String) {
    let cache_home = file.parent().unwrap().join("cache-home");
    let output = Command::new(tend_bin())
        .arg("replay")
        .arg(file)
        .args(args)
        .env("TEND_LOG", "warn")
        .env("XDG_CACHE_HOME", &cache_home)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let cached = std::fs::read_dir(cache_home.join("tend"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| entry.path().extension().is_some_and(|e| e == "cwasm"));
    assert!(
        cached || !text.contains("replaying "),
        "the replay compiled into its cache: {text}"
    );
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
    record_with_env(sandbox, "mirror-gate", name, &[])
}

/// [`record`] of `plugin`, with `env` for tend.
fn record_with_env(
    sandbox: &Sandbox,
    plugin: &str,
    name: &str,
    env: &[(&str, &str)],
) -> (PathBuf, serde_json::Value, Vec<String>, String) {
    let file = sandbox.path(name);
    let file_arg = file.display().to_string();
    let run = sandbox.tend_with_env(&["reconcile", plugin, "--record", &file_arg], env);
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

// ---------------------------------------------------------------------------
// kube, cloud, systemd and the CRI: recorded at the real peers, replayed
// with each peer watched.
// ---------------------------------------------------------------------------

const NODE: &str = "replay-node";
const OWNER_TAG: &str = "kubernetes.io/cluster/e2e";
const UNIT: &str = "tend-replay.service";
const LABEL: &str = "tend.dev/replayed";

/// The peers of the recorded reconcile, started at once: the Kubernetes API
/// fake (which checks the ServiceAccount token and the RBAC `tend rbac`
/// renders), moto behind its proxy, a real systemd and a real containerd
/// with its registry.
struct Peers {
    kube: KubeApi,
    kubectl: Kubectl,
    cloud: CloudPeer,
    systemd: SystemdPeer,
    cri: ContainerdPeer,
}

impl Peers {
    fn start() -> Peers {
        std::thread::scope(|s| {
            let cloud = s.spawn(|| CloudPeer::start(Provider::Aws));
            let systemd = s.spawn(SystemdPeer::start);
            let cri = s.spawn(ContainerdPeer::start);
            let kube = KubeApi::start();
            let kubectl = Kubectl::version("1.33", &kube);
            Peers {
                kube,
                kubectl,
                cloud: cloud.join().unwrap(),
                systemd: systemd.join().unwrap(),
                cri: cri.join().unwrap(),
            }
        })
    }

    /// What the replay must leave as it is: tend's peers as they answer now.
    fn mark(&self) -> Mark {
        self.cloud.clear_requests();
        // The test's own CRI calls come before containerd's log is measured.
        let sandboxes = sandboxes(&self.cri);
        Mark {
            kube_seq: self.kube.request_seq(),
            containerd_log: self.cri.containerd_log().len(),
            registry_log: self.cri.registry_log().len(),
            sandboxes,
        }
    }
}

/// Where each peer's log stood, and the sandboxes, before a replay.
struct Mark {
    kube_seq: u64,
    containerd_log: usize,
    registry_log: usize,
    sandboxes: Vec<(String, bool)>,
}

fn sandboxes(cri: &ContainerdPeer) -> Vec<(String, bool)> {
    let mut all: Vec<(String, bool)> = cri
        .sandboxes()
        .into_iter()
        .map(|s| (s.id, s.state == SandboxState::Ready))
        .collect();
    all.sort();
    all
}

/// The chaos plugin doing one mutation through each capability, in one
/// reconcile: label its Node (and an Event), terminate an owned instance,
/// enable a unit, stop a pod sandbox, pull an image.
fn configure_steps(sandbox: &Sandbox, peers: &Peers, instance: &str, pod: &str, image: &str) {
    sandbox.add_plugin("chaos", "chaos");
    let host = format!(
        "{}[host.systemd]\nbus = \"{}\"\n[host.cri]\nendpoint = \"{}\"\n{}",
        peers.kube.host_kube(sandbox),
        peers.systemd.bus_address(),
        peers.cri.endpoint(),
        peers.cloud.host_config(),
    );
    let plugins = format!(
        r#"[plugins.chaos]
[plugins.chaos.grants]
kube = [{{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }}]
cloud = {{ operations = ["delete-instance"], instances = [{{ tag = "{OWNER_TAG}", value = "owned" }}] }}
systemd = {{ units = ["{UNIT}"], operations = ["enable"] }}
cri = {{ read = true, operations = ["stop-pod-sandbox", "pull-image"], images = ["{image}"] }}
[plugins.chaos.config]
mode = "steps"
[[plugins.chaos.config.steps]]
mode = "kube-label"
node = "{NODE}"
key = "{LABEL}"
value = "yes"
[[plugins.chaos.config.steps]]
mode = "cloud-calls"
calls = [{{ op = "delete-instance", id = "{instance}" }}]
[[plugins.chaos.config.steps]]
mode = "unit-files"
op = "enable"
units = ["{UNIT}"]
[[plugins.chaos.config.steps]]
mode = "cri-sandboxes"
op = "stop"
ids = ["{pod}"]
[[plugins.chaos.config.steps]]
mode = "pull"
image = "{image}"
timeout-ms = 10000
"#
    );
    sandbox.config_on_node(NODE, &host, &plugins);
    peers.kube.grant_rbac(sandbox);
}

/// tend's Node (its ServiceAccount and RBAC: [`KubeApi::grant_rbac`]).
fn seed_kube(kubectl: &Kubectl) {
    let node = format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\n");
    assert!(kubectl.apply(&node, &[]).success());
}

fn label(kubectl: &Kubectl) -> Value {
    kubectl.json(&["get", "node", NODE])["metadata"]["labels"][LABEL].clone()
}

/// Whether the unit is enabled: its link in the peer's /etc/systemd/system
/// (where enable links, apart from the unit path).
fn unit_enabled(systemd: &SystemdPeer) -> bool {
    let wants = format!("etc-systemd/peer.target.wants/{UNIT}");
    std::fs::symlink_metadata(systemd.dir().join(wants)).is_ok()
}

/// Every peer as `mark` saw it, the undone mutations still undone: no
/// request reached the Kubernetes API, the cloud or the registry; containerd
/// logged no CRI call; the sandboxes, the unit, the label and the image are
/// as they were.
fn untouched_since(peers: &Peers, mark: &Mark, image: &str) {
    // Read before the checks below make CRI calls of their own.
    let containerd = peers.cri.containerd_log();
    let kube = peers.kube.requests_since(mark.kube_seq);
    assert!(kube.is_empty(), "the Kubernetes API saw: {kube:#?}");
    assert_eq!(label(&peers.kubectl), Value::Null, "the label is back");
    let cloud = peers.cloud.request_count();
    assert_eq!(cloud, 0, "the cloud saw {cloud} requests");
    assert!(!unit_enabled(&peers.systemd), "{UNIT} was enabled again");
    let since = &containerd[mark.containerd_log..];
    for call in ["PodSandbox", "PullImage"] {
        assert!(!since.contains(call), "containerd logged {call}: {since}");
    }
    assert_eq!(sandboxes(&peers.cri), mark.sandboxes);
    assert!(!peers.cri.image_present(image), "{image} was pulled again");
    let registry = peers.cri.registry_log();
    assert_eq!(
        registry.len(),
        mark.registry_log,
        "the registry saw: {}",
        &registry[mark.registry_log..]
    );
}

#[test]
fn a_recording_of_kube_cloud_systemd_and_cri_mutations_replays_without_reaching_a_peer() {
    let peers = Peers::start();
    seed_kube(&peers.kubectl);
    let instance = peers
        .cloud
        .add_instance("node-1", &[(OWNER_TAG, "owned")])
        .id;
    let units = peers.systemd.units_dir();
    std::fs::write(
        units.join(UNIT),
        "[Unit]\nDescription=tend e2e\n[Service]\nExecStart=/bin/sleep 1000\n[Install]\nWantedBy=peer.target\n",
    )
    .unwrap();
    let pod = peers.cri.run_sandbox("web-0", "default", "uid-web", 0);
    let image = format!("{}/library/pause:3.9", peers.cri.registry());
    let sandbox = Sandbox::new();
    configure_steps(&sandbox, &peers, &instance, &pod, &image);
    let env = peers.cloud.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let (file, recorded, names, out) = record_with_env(&sandbox, "chaos", "steps.json", &env);
    // Each mutation was done, at its peer.
    let message = recorded["outcome"]["returned"]["message"].as_str().unwrap();
    let done = format!(
        "1: labeled {NODE} {LABEL}=yes; 2: delete-instance {instance}: ok; 3: ok; 4: {pod}: ok; 5: 1 sandboxes; pulled sha256:"
    );
    assert!(message.starts_with(&done), "{out}");
    for call in [
        "kube.patch",
        "kube.emit-event",
        "cloud.delete-instance",
        "systemd.enable",
        "cri.stop-pod-sandbox",
        "cri.pull-image",
    ] {
        assert!(names.contains(&call.to_string()), "{call} in {names:?}");
    }
    assert_eq!(label(&peers.kubectl), "yes");
    assert_eq!(peers.cloud.deletes(Some(&instance)), 1);
    assert!(unit_enabled(&peers.systemd));
    assert!(peers.cri.image_present(&image));
    assert!(
        peers
            .cri
            .sandboxes()
            .iter()
            .any(|s| s.id == pod && s.state == SandboxState::NotReady)
    );

    // The undoable mutations undone: a replay that reached a peer would do
    // them again where it shows.
    let unlabel = format!("{LABEL}-");
    peers.kubectl.ok(&["label", "node", NODE, &unlabel]);
    peers
        .systemd
        .manager(&["DisableUnitFiles", "asb", "1", UNIT, "false"]);
    assert!(!unit_enabled(&peers.systemd));
    peers.cri.remove_image(&image);
    let mark = peers.mark();

    let (same, out) = replay(&file, &[]);
    assert!(same, "{out}");
    assert!(
        out.contains(&format!(
            "replayed {} calls identically; outcome matches",
            names.len()
        )),
        "{out}"
    );

    tampered_replays_tell(&sandbox, &recorded, &names);
    untouched_since(&peers, &mark, &image);
}

/// Recordings tampered with tell, as README says a replay does: another unit
/// in the config diverges at the systemd call, naming both units; another
/// answer from the cloud changes the outcome.
fn tampered_replays_tell(sandbox: &Sandbox, recorded: &Value, names: &[String]) {
    let mut elsewhere = recorded.clone();
    let config = elsewhere["context"]["config"].as_str().unwrap();
    elsewhere["context"]["config"] = config.replace(UNIT, "tend-other.service").into();
    let (same, out) = replay_of(sandbox, "elsewhere.json", &elsewhere);
    let enable = names.iter().position(|n| n == "systemd.enable").unwrap() + 1;
    assert!(!same, "{out}");
    assert!(
        out.contains(&format!(
            "diverged at call {enable}: expected systemd.enable("
        )),
        "{out}"
    );
    assert!(
        out.contains(UNIT) && out.contains("tend-other.service"),
        "{out}"
    );

    let mut refused = recorded.clone();
    let delete = names
        .iter()
        .position(|n| n == "cloud.delete-instance")
        .unwrap();
    refused["calls"][delete]["answer"] = serde_json::json!({"Err": {"Unavailable": "tampered"}});
    let (same, out) = replay_of(sandbox, "refused.json", &refused);
    assert!(!same, "{out}");
    assert!(
        out.contains(&format!(
            "replayed {} calls identically; outcome differs: expected healthy",
            names.len()
        )),
        "{out}"
    );
    assert!(out.contains("tampered"), "{out}");
}

/// `tend replay` of `recording` written to `name` in `sandbox`.
fn replay_of(sandbox: &Sandbox, name: &str, recording: &Value) -> (bool, String) {
    let file = sandbox.path(name);
    std::fs::write(&file, recording.to_string()).unwrap();
    replay(&file, &[])
}
