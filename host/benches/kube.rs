//! The Kubernetes capability against the project's API fake
//! (tests/peers/kube-apiserver.py, in the venv `cargo xtask test` makes):
//! numbers go to docs/benchmarks.md.
//!
//!   cargo bench -p tend --bench kube
//!
//! - API requests per cached read of 5000 Nodes (target 0);
//! - watch event -> change delivered to a trigger subscriber (the part of
//!   "watch event -> reconcile" the cache owns);
//! - memory of the cache holding 5000 Node objects.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tend::capabilities::kube::{KubeBackend, KubeSettings, ListQuery, RealKube};

const NODES: usize = 5000;

struct Fake(Child);

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn start_fake(dir: &Path) -> Fake {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join("target/venv/bin/python");
    assert!(
        python.exists(),
        "run `cargo xtask test` first: it makes the venv with the fake's packages"
    );
    let child = Command::new(python)
        .arg(root.join("tests/peers/kube-apiserver.py"))
        .args(["0", "--state-dir"])
        .arg(dir)
        .args(["--history", "20000"])
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !dir.join("kubeconfig").exists() || !dir.join("port").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the fake did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Fake(child)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let _fake = start_fake(dir.path());
    let kubeconfig = dir.path().join("kubeconfig");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let client = tend::capabilities::kube::connect(Some(&kubeconfig), "tend-bench").await.unwrap();
        let nodes: Api<Node> = Api::all(client);
        let created = Instant::now();
        for i in 0..NODES {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": format!("node-{i:05}"), "labels": {"tend.dev/pool": format!("pool-{}", i % 10)}},
                "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256)},
                "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "nodeInfo": {"kubeletVersion": "v1.34.0"}},
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap();
        }
        println!("created {NODES} Nodes in {:.1} s", created.elapsed().as_secs_f64());

        let settings = KubeSettings {
            kubeconfig: Some(kubeconfig.clone()),
            ..KubeSettings::default()
        };
        let backend = RealKube::new(&settings, "node-00000");
        let info = backend.resolve("v1", "Node").await.unwrap();
        let before = rss_kib();
        let first = Instant::now();
        let list = backend.list(&info, None, &ListQuery::default()).await.unwrap();
        assert_eq!(list.items.len(), NODES);
        let first = first.elapsed();
        drop(list);
        let after = rss_kib();
        println!(
            "watch cache of {NODES} Nodes: first read (list + watch + copy out) {:.0} ms; RSS +{:.1} MiB (the store, plus what the allocator kept from the copy)",
            first.as_secs_f64() * 1e3,
            (after.saturating_sub(before)) as f64 / 1024.0
        );

        let requests = backend.requests();
        let mut reads = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let list = backend.list(&info, None, &ListQuery::default()).await.unwrap();
            reads.push(started.elapsed());
            assert_eq!(list.items.len(), NODES);
        }
        reads.sort();
        println!(
            "cached read of {NODES} Nodes: {} API requests in 20 reads; p50 {:.1} ms (JSON copies of every object)",
            backend.requests() - requests,
            reads[10].as_secs_f64() * 1e3
        );

        let mut changes = backend.watch(&info, None, None, None).await.unwrap();
        let mut latencies = Vec::new();
        for i in 0..50 {
            let patch = json!({"metadata": {"labels": {"tend.dev/round": i.to_string()}}});
            let name = format!("node-{:05}", i * 97);
            let sent = Instant::now();
            nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            loop {
                let change = changes.recv().await.unwrap();
                if change.name == name {
                    break;
                }
            }
            latencies.push(sent.elapsed());
        }
        latencies.sort();
        println!(
            "patch -> change at the trigger subscriber (API round trip + watch event): p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms (n=50)",
            latencies[25].as_secs_f64() * 1e3,
            latencies[45].as_secs_f64() * 1e3,
            latencies[49].as_secs_f64() * 1e3
        );
    });
}
