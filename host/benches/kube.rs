//! The Kubernetes capability against the project's API fake
//! (tests/peers/kube-apiserver.py, in the venv `cargo xtask test` makes):
//! numbers go to docs/benchmarks.md.
//!
//!   cargo bench -p tend --bench kube
//!   cargo bench --profile dev -p tend --bench kube   (no release build)
//!
//! - API requests per cached read of 5000 Nodes (target 0);
//! - watch event -> change delivered to a trigger subscriber (the part of
//!   "watch event -> reconcile" the cache owns);
//! - memory of the cache holding 5000 Node objects: the bytes it keeps
//!   allocated (counted by this binary's allocator) against the objects'
//!   JSON size.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Instant;
use tend::capabilities::kube::{KubeBackend, KubeSettings, ListParams, RealKube};
use tend_e2e::{KUBE_ADMIN_TOKEN, KubeApi, rss_kib};

const NODES: usize = 5000;

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size() as i64, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> i64 {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

fn main() {
    let api = KubeApi::start_with(&["--history", "20000"]);
    // As the admin, over plain HTTP: the bench creates its 5000 Nodes itself
    // and measures the cache, not RBAC (the e2e tests hold tend to RBAC).
    let kubeconfig = api.dir().join("bench-kubeconfig");
    api.write_kubeconfig(&kubeconfig, KUBE_ADMIN_TOKEN);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let client = tend::capabilities::kube::connect(Some(&kubeconfig), "tend-bench", true).await.unwrap();
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
        let before = rss_kib(std::process::id());
        let allocated = live_bytes();
        let first = Instant::now();
        let list = backend.list(&info, None, &ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), NODES);
        let first = first.elapsed();
        let json: usize = list.items.iter().map(|o| o.json.len()).sum();
        drop(list);
        // What stays allocated is the cache (and the client's few buffers).
        let held = live_bytes() - allocated;
        let after = rss_kib(std::process::id());
        println!(
            "watch cache of {NODES} Nodes: first read (list + watch) {:.0} ms; holds {:.2} MiB for {:.2} MiB of JSON ({:.2}x); RSS +{:.1} MiB",
            first.as_secs_f64() * 1e3,
            held as f64 / (1 << 20) as f64,
            json as f64 / (1 << 20) as f64,
            held as f64 / json as f64,
            (after.saturating_sub(before)) as f64 / 1024.0
        );

        let requests = backend.requests();
        let mut reads = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let list = backend.list(&info, None, &ListParams::default()).await.unwrap();
            reads.push(started.elapsed());
            assert_eq!(list.items.len(), NODES);
        }
        reads.sort();
        println!(
            "cached read of {NODES} Nodes: {} API requests in 20 reads; p50 {:.2} ms (each object's JSON shared, not copied)",
            backend.requests() - requests,
            reads[10].as_secs_f64() * 1e3
        );
        // What the adapter adds: each object's summary parsed for the grant's re-check.
        let mut checked = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let list = backend.list(&info, None, &ListParams::default()).await.unwrap();
            let named = list.items.iter().filter(|o| o.view()["metadata"]["name"].is_string()).count();
            checked.push(started.elapsed());
            assert_eq!(named, NODES);
        }
        checked.sort();
        println!(
            "cached read of {NODES} Nodes with every summary parsed (as a plugin's list re-checks them): p50 {:.2} ms",
            checked[10].as_secs_f64() * 1e3
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
