//! The sight part of `cargo xtask demo`: tend with examples/sight/tend.toml,
//! the project's Kubernetes API fake (this host's Node, with the kubelet's
//! conditions), a real systemd with its real journald, and a kernel log file
//! in the `/dev/kmsg` record format. A hung task written into the kernel log
//! and a fatal containerd error written into the journal (by a failing
//! `containerd.service` of that systemd) become NodeConditions on the Node;
//! they clear when they stop recurring, and leave the Node when
//! problem-detector is disabled. node-remediator answers KernelDeadlock with
//! its ladder's first step (restarting a `kubelet.service` stand-in) and
//! verifies it once the condition has stayed clear.

use crate::cluster_demo::ScriptPeer;
use crate::{DemoSystemd, outcomes, root, run, step, wait_for};
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const KUBE_PORT: u16 = 5062;
const WORK: &str = "/tmp/tend-sight";
const NODE: &str = "sight-demo";
const HUNG: &str = "INFO: task jbd2/sda1-8:312 blocked for more than 120 seconds.";

pub fn run_demo(tend: &Path) -> Result<()> {
    crate::venv()?;
    let work = Path::new(WORK);
    let systemd_dir = work.join("systemd");
    // A systemd left running by an interrupted demo goes first.
    drop(DemoSystemd(systemd_dir.clone()));
    let _ = std::fs::remove_dir_all(work.join("state"));
    std::fs::create_dir_all(work)?;
    step(&format!(
        "sight: the Kubernetes API fake on 127.0.0.1:{KUBE_PORT} (Node {NODE}), a real systemd with its journald, and a kernel log file in the /dev/kmsg format"
    ));
    let kube = ScriptPeer::start(
        "kube-apiserver.sh",
        &work.join("kube"),
        KUBE_PORT,
        "examples/sight/tend.toml",
    )?
    .seeding_as(crate::cluster_demo::KUBE_ADMIN_TOKEN);
    crate::cluster_demo::write_kubeconfig(&work.join("kube/tend.kubeconfig"), KUBE_PORT)?;
    kube.post("/api/v1/nodes", &kubelet_node())?;
    let systemd = DemoSystemd::start(&systemd_dir)?;
    std::fs::create_dir_all(work.join("boot"))?;
    std::fs::write(
        work.join("boot/boot_id"),
        "5d1c0ffe-0000-4000-8000-00000000d3a0\n",
    )?;
    start_kubelet(&systemd)?;
    std::fs::write(work.join("kmsg"), kmsg(1, 6, "Linux version 6.1.0 (demo)"))?;
    // A copy whose disabling the demo can write; its paths stay the example's.
    let config = work.join("tend.toml");
    let example = std::fs::read_to_string(root().join("examples/sight/tend.toml"))?;
    let plugins = root().join("target/plugins");
    let cache = root().join("target/quickstart-cache");
    let enabled = example
        .replace(
            "\"../../target/plugins\"",
            &format!("{:?}", plugins.display().to_string()),
        )
        .replace(
            "\"../../target/quickstart-cache\"",
            &format!("{:?}", cache.display().to_string()),
        );
    std::fs::write(&config, &enabled)?;

    step("tend run: problem-detector follows the kernel log and containerd's journal");
    let log_path = root().join("target/demo/tend-sight.log");
    let mut daemon = Daemon(
        Command::new(tend)
            .args(["run", "-c"])
            .arg(&config)
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()?,
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let node = || {
        kube.get(&format!("/api/v1/nodes/{NODE}"))
            .unwrap_or_default()
    };
    let following = wait_for(&mut daemon.0, Duration::from_secs(60), || {
        let log = log();
        log.contains("following the kernel log") && log.contains("following the journal")
    })?;

    step("a hung task in the kernel log, a fatal containerd error in the journal");
    let written = Instant::now();
    append(&work.join("kmsg"), &kmsg(2, 3, HUNG))?;
    fail_containerd(&systemd)?;
    let seen = following
        && wait_for(&mut daemon.0, Duration::from_secs(30), || {
            let node = node();
            status(&node, "KernelDeadlock") == Some("True")
                && status(&node, "ContainerRuntimeUnhealthy") == Some("True")
        })?;
    eprintln!("  on the Node after {:?}:", written.elapsed());
    show(&node());
    step(
        "node-remediator: KernelDeadlock calls for its ladder's first step, restarting kubelet.service",
    );
    let remedied = seen
        && wait_for(&mut daemon.0, Duration::from_secs(30), || {
            outcomes(&log(), "node-remediator")
                .iter()
                .any(|o| o.contains("took step 1/2 (restart kubelet.service)"))
        })?;

    step("no recurrence for their TTL (20 s here): the conditions clear, the taint goes");
    let cleared = remedied
        && wait_for(&mut daemon.0, Duration::from_secs(60), || {
            let node = node();
            status(&node, "KernelDeadlock") == Some("False")
                && status(&node, "ContainerRuntimeUnhealthy") == Some("False")
        })?;
    show(&node());
    step(
        "KernelDeadlock stayed clear for the settle time: node-remediator verifies its step (no reboot)",
    );
    let verified = cleared
        && wait_for(&mut daemon.0, Duration::from_secs(30), || {
            outcomes(&log(), "node-remediator")
                .iter()
                .any(|o| o.contains("(restart kubelet.service) verified"))
        })?;

    step("problem-detector disabled: its conditions leave the Node; the kubelet's stay");
    std::fs::write(
        &config,
        enabled.replace(
            "[plugins.problem-detector]\n",
            "[plugins.problem-detector]\nenabled = false\n",
        ),
    )?;
    let gone = verified
        && wait_for(&mut daemon.0, Duration::from_secs(30), || {
            status(&node(), "KernelDeadlock").is_none()
        })?;
    show(&node());
    run(Command::new("kill").args(["-TERM", &daemon.0.id().to_string()]))?;
    let exit = daemon.0.wait()?;
    drop(systemd);
    drop(kube);
    for plugin in ["problem-detector", "node-remediator"] {
        eprintln!("{plugin}:");
        for outcome in outcomes(&log(), plugin) {
            eprintln!("  {outcome}");
        }
    }
    if !gone {
        bail!(
            "the sight part of the demo did not complete; see the log {}",
            log_path.display()
        );
    }
    eprintln!("tend stopped on SIGTERM with {exit}. The config is examples/sight/tend.toml");
    Ok(())
}

/// tend, killed if the demo ends early (its peers stop with the demo).
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Node as the kubelet registers it: its five conditions.
fn kubelet_node() -> Value {
    let condition = |kind: &str, status: &str, reason: &str| serde_json::json!({"type": kind, "status": status, "reason": reason, "message": "kubelet"});
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE},
        "status": {"conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("NetworkUnavailable", "False", "RouteCreated"),
            condition("Ready", "True", "KubeletReady"),
        ]},
    })
}

fn status<'a>(node: &'a Value, kind: &str) -> Option<&'a str> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

/// The Node's conditions and taints, one line each.
fn show(node: &Value) {
    for c in node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        eprintln!(
            "    condition {} = {} ({}): {}",
            c["type"].as_str().unwrap_or_default(),
            c["status"].as_str().unwrap_or_default(),
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        );
    }
    for t in node["spec"]["taints"].as_array().into_iter().flatten() {
        eprintln!(
            "    taint {}:{}",
            t["key"].as_str().unwrap_or_default(),
            t["effect"].as_str().unwrap_or_default()
        );
    }
}

/// One record in the `/dev/kmsg` format: `prio,seq,usec,flags;message`.
fn kmsg(seq: u64, priority: u8, message: &str) -> String {
    format!("{priority},{seq},{},-;{message}\n", seq * 1_000_000)
}

fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

/// A `kubelet.service` of the demo's systemd (a sleeper standing in for
/// the kubelet), for node-remediator's first step to restart.
fn start_kubelet(systemd: &DemoSystemd) -> Result<()> {
    systemd
        .busctl(&[
            "--",
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            "ssa(sv)a(sa(sv))",
            "kubelet.service",
            "replace",
            "1",
            "ExecStart",
            "a(sasb)",
            "1",
            "/bin/sleep",
            "2",
            "/bin/sleep",
            "100000",
            "false",
            "0",
        ])
        .map(drop)
}

/// A `containerd.service` of the demo's systemd that logs a fatal error
/// and exits 1: its output reaches journald as the unit's.
fn fail_containerd(systemd: &DemoSystemd) -> Result<()> {
    let fatal = "echo 'level=fatal msg=\"failed to start containerd: failed to load plugin io.containerd.grpc.v1.cri\"'; exit 1";
    systemd
        .busctl(&[
            "--",
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            "ssa(sv)a(sa(sv))",
            "containerd.service",
            "replace",
            "3",
            "Type",
            "s",
            "oneshot",
            "StandardOutput",
            "s",
            "journal",
            "ExecStart",
            "a(sasb)",
            "1",
            "/bin/sh",
            "3",
            "/bin/sh",
            "-c",
            fatal,
            "false",
            "0",
        ])
        .context("starting the failing containerd.service")?;
    Ok(())
}
