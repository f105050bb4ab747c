//! The cluster half of `cargo xtask demo`: tend with examples/cluster/tend.toml
//! against the project's Kubernetes API fake (one Node) and OpenStack fake (the
//! cluster's instances and security group), both on loopback and stopped on
//! exit. node-reaper, in report mode, names the instance that never became a
//! Node and deletes nothing; secgroup-guard adds the pod network's rules and
//! the missing membership. [`ScriptPeer`] starts the node demo's registry too.

use crate::{outcomes, root, run, step, wait_for};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where examples/cluster/tend.toml expects the peers.
const KUBE_PORT: u16 = 5060;
const OPENSTACK_PORT: u16 = 5061;
const WORK: &str = "/tmp/tend-cluster";
/// The languages of the starter plugin (`tend-author new`) the demo runs.
const LANGS: [&str; 5] = ["rust", "python", "js", "c", "go"];
/// The cluster's security group, pinned by ID in the example's grants.
const GROUP: &str = "5ec6a0a1-0000-4000-8000-00000000de70";
/// The instances: registered (a Node names it), never registered (its pool's
/// 5 s timeout counts from node-reaper's first pass: reported a confirmation
/// minute later) and young (pool `gpu`, whose timeout is 45 minutes).
const REGISTERED: &str = "0b3c1f4e-1111-4a1a-9a1a-000000000001";
const NEVER_REGISTERED: &str = "0b3c1f4e-2222-4a1a-9a1a-000000000002";
const YOUNG: &str = "0b3c1f4e-3333-4a1a-9a1a-000000000003";

/// A peer started by one of the project's scripts (`<script> start DIR PORT`,
/// which prints its URL if it has one), stopped by PID on drop (`<script>
/// stop DIR`). The node demo's registry is one too.
pub struct ScriptPeer {
    script: PathBuf,
    dir: PathBuf,
    url: String,
    /// The token seeding requests carry, if the peer needs one.
    bearer: Option<&'static str>,
}

/// The Kubernetes fake's fixture admin (tests/peers/kube-apiserver.py ADMIN_TOKEN).
pub(crate) const KUBE_ADMIN_TOKEN: &str = "tend-fake-admin-token";

impl ScriptPeer {
    /// `example` (the config expecting the peer on `port`) is named when the
    /// port is taken.
    pub fn start(script: &str, dir: &Path, port: u16, example: &str) -> Result<Self> {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            bail!(
                "127.0.0.1:{port} is in use; {example} expects {script}'s peer there: free the port and try again"
            );
        }
        let script = root().join("tests/peers").join(script);
        let _ = Command::new(&script).arg("stop").arg(dir).status();
        let output = Command::new(&script)
            .arg("start")
            .arg(dir)
            .arg(port.to_string())
            .output()?;
        let peer = ScriptPeer {
            script,
            dir: dir.to_path_buf(),
            url: String::from_utf8_lossy(&output.stdout).trim().to_string(),
            bearer: None,
        };
        if !output.status.success() {
            bail!(
                "{} did not start: {}",
                peer.script.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(peer)
    }

    /// Seed as the bearer of `token` (the Kubernetes fake refuses anonymous
    /// requests, as a real API server does; its fixtures' admin token).
    pub(crate) fn seeding_as(mut self, token: &'static str) -> Self {
        self.bearer = Some(token);
        self
    }

    /// POST `body` (JSON) to `path`, as the seeding scripts of a test would.
    pub(crate) fn post(&self, path: &str, body: &serde_json::Value) -> Result<()> {
        let auth = self.bearer.map(|t| format!("authorization: Bearer {t}"));
        run(Command::new("curl")
            .args(["-fsS", "-o", "/dev/null", "-X", "POST"])
            .args(auth.iter().flat_map(|h| ["-H", h.as_str()]))
            .args(["-H", "content-type: application/json", "--data-binary"])
            .arg(body.to_string())
            .arg(format!("{}{path}", self.url)))
        .with_context(|| format!("seeding {path}"))
    }

    pub(crate) fn get(&self, path: &str) -> Result<serde_json::Value> {
        let auth = self.bearer.map(|t| format!("authorization: Bearer {t}"));
        let output = Command::new("curl")
            .args(["-fsS"])
            .args(auth.iter().flat_map(|h| ["-H", h.as_str()]))
            .arg(format!("{}{path}", self.url))
            .output()?;
        Ok(serde_json::from_slice(&output.stdout)?)
    }
}

impl Drop for ScriptPeer {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// tend's kubeconfig for the Kubernetes fake on `port` (the demo configs name
/// it): the fake's plain-HTTP port with a bearer token, which kube-rs sends
/// over HTTP too.
pub(crate) fn write_kubeconfig(path: &Path, port: u16) -> Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: tend\n  user:\n    token: {KUBE_ADMIN_TOKEN}\ncontexts:\n- name: fake\n  context:\n\
             \x20   cluster: fake\n    user: tend\ncurrent-context: fake\n"
        ),
    )?;
    Ok(())
}

fn server(
    id: &str,
    name: &str,
    age_seconds: u64,
    address: &str,
    groups: &[&str],
) -> serde_json::Value {
    let pool = if id == YOUNG { "gpu" } else { "general" };
    serde_json::json!({
        "id": id,
        "name": name,
        "age_seconds": age_seconds,
        "metadata": {"kubernetes-cluster": "demo", "pool": pool},
        "addresses": {"private": [address]},
        "security_groups": groups,
    })
}

pub fn run_demo(tend: &Path) -> Result<()> {
    // The fakes run on the project's venv (aiohttp).
    crate::venv()?;
    let config = root().join("examples/cluster/tend.toml");
    let work = Path::new(WORK);
    let _ = std::fs::remove_dir_all(work.join("state"));
    step(&format!(
        "starting the project's Kubernetes API fake on 127.0.0.1:{KUBE_PORT} and its OpenStack fake (Keystone, Nova, Neutron) on 127.0.0.1:{OPENSTACK_PORT}"
    ));
    const EXAMPLE: &str = "examples/cluster/tend.toml";
    let kube = ScriptPeer::start("kube-apiserver.sh", &work.join("kube"), KUBE_PORT, EXAMPLE)?
        .seeding_as(KUBE_ADMIN_TOKEN);
    write_kubeconfig(&work.join("kube/tend.kubeconfig"), KUBE_PORT)?;
    let cloud = ScriptPeer::start(
        "openstack.sh",
        &work.join("openstack"),
        OPENSTACK_PORT,
        EXAMPLE,
    )?;
    kube.post(
        "/api/v1/nodes",
        &serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "demo-node-1"},
            "spec": {"providerID": format!("openstack:///{REGISTERED}")},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.11"}],
            },
        }),
    )?;
    // This host's own Node, which the starter plugins look up.
    kube.post(
        "/api/v1/nodes",
        &serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "cluster-demo"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }),
    )?;
    for lang in LANGS {
        std::fs::create_dir_all(work.join("reports").join(lang))?;
    }
    cloud.post(
        "/fake/security-groups",
        &serde_json::json!({
            "id": GROUP, "name": "demo-nodes",
            "rules": [{"direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
                       "port_range_min": 22, "port_range_max": 22,
                       "remote_ip_prefix": "10.244.0.0/16", "description": "ssh only"}],
        }),
    )?;
    cloud.post(
        "/fake/servers",
        &server(REGISTERED, "demo-node-1", 3600, "10.0.0.11", &[GROUP]),
    )?;
    cloud.post(
        "/fake/servers",
        &server(NEVER_REGISTERED, "demo-node-2", 1800, "10.0.0.12", &[GROUP]),
    )?;
    cloud.post(
        "/fake/servers",
        &server(YOUNG, "demo-node-3", 60, "10.0.0.13", &[]),
    )?;
    step(
        "the cloud: demo-node-1 (a Node), demo-node-2 (30 min old, no Node), demo-node-3 (1 min old, not in the group); the group demo-nodes has only a tcp/22 rule from the pod CIDR",
    );

    let clouds_yaml = work.join("openstack/clouds.yaml");
    let tend_cmd = |args: &[&str]| {
        let mut cmd = Command::new(tend);
        cmd.args(args)
            .arg("-c")
            .arg(&config)
            .env("OS_CLIENT_CONFIG_FILE", &clouds_yaml);
        cmd
    };
    step("tend check: the cluster config is valid and every plugin compiles");
    run(&mut tend_cmd(&["check"]))?;

    step(
        "tend run: until node-reaper has reported twice, secgroup-guard has repaired the group and the starter plugin has run in every language",
    );
    let log_path = root().join("target/demo/tend-cluster.log");
    let mut daemon = tend_cmd(&["run"])
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()?;
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let reported = || {
        outcomes(&log(), "node-reaper")
            .iter()
            .any(|m| m.contains(&format!("would delete {NEVER_REGISTERED}")))
    };
    let guarded = || {
        outcomes(&log(), "secgroup-guard")
            .iter()
            .any(|m| m.contains("added"))
    };
    let probed = || {
        LANGS.iter().all(|lang| {
            outcomes(&log(), &format!("{lang}-probe"))
                .iter()
                .any(|m| m.starts_with("healthy: "))
        })
    };
    // node-reaper confirms a candidate a minute after it first sees one.
    let done = wait_for(&mut daemon, Duration::from_secs(150), || {
        reported() && guarded() && probed()
    })?;
    run(Command::new("kill").args(["-TERM", &daemon.id().to_string()]))?;
    let status = daemon.wait()?;
    let state = cloud.get("/fake/state")?;
    drop(cloud);
    drop(kube);

    step("what happened in the cluster");
    let text = log();
    let probes = LANGS.map(|lang| format!("{lang}-probe"));
    let plugins = ["node-reaper", "secgroup-guard"]
        .into_iter()
        .chain(probes.iter().map(String::as_str));
    for plugin in plugins {
        eprintln!("{plugin}:");
        for outcome in outcomes(&text, plugin) {
            eprintln!("  {outcome}");
        }
    }
    eprintln!("node-reaper's reasons (its log and its Event):");
    for line in text.lines().filter(|l| l.contains("would delete")) {
        if let Some((_, said)) = line
            .split_once("log::backend: ")
            .or_else(|| line.split_once("did kube.emit-event "))
        {
            eprintln!("  {}", said.trim_end_matches(" plugin=\"node-reaper\""));
        }
    }
    let servers: Vec<&str> = state["servers"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    eprintln!(
        "instances still in the cloud (report mode deletes nothing): {}",
        servers.join(", ")
    );
    let rules = state["security_groups"]
        .as_array()
        .and_then(|groups| groups.iter().find(|g| g["id"] == GROUP))
        .and_then(|g| g["security_group_rules"].as_array())
        .map_or(0, Vec::len);
    eprintln!("the group demo-nodes now holds {rules} rules");
    if !done || servers.len() != 3 {
        bail!(
            "the cluster part of the demo did not complete; see the log {}",
            log_path.display()
        );
    }
    eprintln!(
        "tend stopped on SIGTERM with {status}. The config is {}",
        config.display()
    );
    Ok(())
}
