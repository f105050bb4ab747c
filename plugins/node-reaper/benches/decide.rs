//! node-reaper's decision over a large cluster, natively (numbers go to
//! docs/benchmarks.md; the same pass inside the sandbox is `cargo bench -p tend
//! --bench cloud`):
//!
//!   cargo bench -p node-reaper
//!
//! - parsing 10,000 Node objects (JSON, as the kube capability hands them over)
//!   into what matching needs;
//! - deciding over 10,000 instances and 10,000 Nodes (matched by provider ID,
//!   name and address through hash maps), plus 10 instances that never
//!   registered.

use node_reaper::decide::{Memory, Nodes, Pass, Policy, decide};
use node_reaper::nodes::NodeInfo;
use std::time::{Duration, Instant};
use tend_sdk::{Instance, InstanceState, OwnerTag};

const CLUSTER: &str = "kubernetes.io/cluster/bench";
const MINUTE_MS: u64 = 60_000;
const T0: u64 = 1_800_000_000_000;

fn instance(n: u32) -> Instance {
    Instance {
        created_at_ms: T0 as i64,
        private_addresses: vec![format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255)],
        ..Instance::new(
            &format!("i-{n:017x}"),
            &format!("ip-{n}"),
            InstanceState::Running,
        )
    }
    .with_tag(CLUSTER, "owned")
}

/// Node `n` as the API server lists it: half found by provider ID, the other
/// half by name (their provider IDs name no instance).
fn node_object(n: u32) -> serde_json::Value {
    let provider = if n.is_multiple_of(2) {
        format!("aws:///us-east-1a/i-{n:017x}")
    } else {
        format!("aws:///us-east-1a/i-{:017x}", n + 1_000_000)
    };
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("ip-{n}"), "labels": {"kubernetes.io/os": "linux"}},
        "spec": {"providerID": provider},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.0.2.1"}],
        },
    })
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let count = 10_000;
    let objects: Vec<serde_json::Value> = (1..=count).map(node_object).collect();
    let mut nodes = Vec::new();
    let parse = median(21, || {
        nodes = objects.iter().filter_map(NodeInfo::from_object).collect();
    });
    assert_eq!(nodes.len(), count as usize);
    let mut instances: Vec<Instance> = (1..=count).map(instance).collect();
    instances.extend((count + 1..=count + 10).map(instance));
    let policy = Policy::new(OwnerTag::new(CLUSTER, "owned"));
    let memory = Memory {
        api_healthy_since_ms: Some(0),
        ..Memory::default()
    };
    let pass = Pass {
        now_ms: T0 + 60 * MINUTE_MS,
        first: false,
    };
    let mut registered = 0;
    let decision = median(21, || {
        let d = decide(&policy, &memory, &instances, Nodes::Listed(&nodes), pass);
        registered = d.counts.registered;
    });
    assert_eq!(registered, count as usize);
    println!(
        "node-reaper, {count} instances + {count} Nodes (native, median of 21): parse Nodes {:.2} ms, decide {:.2} ms",
        parse.as_secs_f64() * 1e3,
        decision.as_secs_f64() * 1e3
    );
}
