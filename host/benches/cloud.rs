//! The cloud capability and its plugins (numbers go to docs/benchmarks.md).
//! Needs `cargo xtask plugins` first, and the venv `cargo xtask test` makes
//! (moto, the Kubernetes and OpenStack fakes).
//!
//!   cargo bench -p tend --bench cloud [-- sandbox|openstack|aws]
//!
//! - node-reaper in the sandbox over 10,000 instances and 10,000 Nodes (the
//!   host's in-memory cloud and Kubernetes backends): one whole reconcile,
//!   listing both across the WIT boundary, parsing, deciding, reporting;
//! - API requests of one node-reaper pass, counted at the peer (the OpenStack
//!   fake, moto behind its proxy);
//! - idle RSS of the release `tend run` with the cloud capability (each
//!   provider) and node-reaper loaded.

mod common;
use common::{bench_config, timed_reconcile};
use serde_json::json;
use std::time::Duration;
use tend::capabilities::Services;
use tend::capabilities::cloud::FakeCloud;
use tend::runtime::Runtime;
use tend_e2e::cloud::{CloudPeer, Provider};
use tend_e2e::peers::openstack::OpenStackFake;
use tend_e2e::{KubeApi, Sandbox, plugin_status, rss_kib, time_until};

const COUNT: usize = 10_000;
const OWNER: (&str, &str) = ("kubernetes-cluster", "bench");

fn reaper_config(extra_host: &str) -> String {
    format!(
        "{extra_host}[plugins.node-reaper]\nscope = \"cluster\"\ninterval = \"1h\"\n\
         [plugins.node-reaper.grants]\n\
         cloud = {{ operations = [\"list-instances\", \"delete-instance\"], instances = [{{ tag = \"{0}\", value = \"{1}\" }}] }}\n\
         kube = [{{ resource = \"nodes\", verbs = [\"get\", \"list\", \"watch\"] }}]\n\
         [plugins.node-reaper.limits]\nread-per-reconcile = \"256MiB\"\nread-per-call = \"128MiB\"\n\
         [plugins.node-reaper.config]\nowner = {{ tag = \"{0}\", value = \"{1}\" }}\nmode = \"report\"\n",
        OWNER.0, OWNER.1
    )
}

/// One node-reaper reconcile over 10,000 instances and Nodes, in process.
fn reaper_in_the_sandbox() {
    let config = bench_config(&format!(
        "[host.leader-election]\nnamespace = \"kube-system\"\nname = \"bench\"\n{}",
        reaper_config("")
    ));
    // The same cloud and cluster for every build measured, afresh.
    let services = || {
        let (services, fakes) = Services::fake();
        // A cloud lists in no order of its own (EC2 by reservation), the API
        // server by name: the instances are added scrambled, the Nodes in order.
        let scrambled = |n: usize| n * 7919 % COUNT;
        for n in 0..COUNT {
            let id = format!("i-{:017x}", scrambled(n));
            let mut instance = FakeCloud::instance(&id, &format!("ip-{n}"), &[OWNER]);
            instance.created_at_ms = 1_000;
            instance.private_addresses =
                vec![format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255)];
            fakes.cloud.add_instance(instance);
            fakes.kube.put(
                "nodes",
                json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": format!("ip-{n}"), "uid": format!("u-{n}")},
                    "spec": {"providerID": format!("aws:///us-east-1a/{id}")},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }),
            );
        }
        services
    };
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Built here for this machine, as a node compiles it (in memory, and
    // mapped from its cache file as a restart loads it); and as the image
    // ships it, made ahead of time for x86-64-v2 CPUs.
    let plugin_config = &config.plugins["node-reaper"];
    let ahead = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(&plugin_config.file).unwrap();
    let build = tend::runtime::precompile(&wasm, tend::runtime::CpuLevel::portable()).unwrap();
    let digest = tend::runtime::sha256_digest(&wasm);
    tend::runtime::write_precompiled(ahead.path(), &digest, &build).unwrap();
    let cache = tempfile::tempdir().unwrap();
    Runtime::new(Some(cache.path()), 4)
        .unwrap()
        .load(&plugin_config.file)
        .unwrap();
    let builds = [
        ("built here", Runtime::new(None, 4).unwrap()),
        ("cached", Runtime::new(Some(cache.path()), 4).unwrap()),
        (
            "precompiled",
            Runtime::new(None, 4)
                .unwrap()
                .with_precompiled(Some(ahead.path())),
        ),
    ];
    for (built, runtime) in builds {
        // Fresh: the host's request-rate bounds would otherwise slow the
        // later builds' passes (some 200 ms each after 16 passes).
        let services = &services();
        let plugin = runtime.load(&plugin_config.file).unwrap();
        let expected = match built {
            "built here" => tend::runtime::CacheOutcome::Miss,
            "cached" => tend::runtime::CacheOutcome::Hit,
            _ => tend::runtime::CacheOutcome::Precompiled,
        };
        assert_eq!(plugin.cache, expected, "{built}");
        let mut times = Vec::new();
        let mut message = String::new();
        tokio.block_on(async {
            for _ in 0..11 {
                let (elapsed, report) =
                    timed_reconcile(&runtime, &plugin, plugin_config, services).await;
                message = report.result.expect("node-reaper reconciles").message;
                times.push(elapsed);
            }
        });
        times.sort();
        println!(
            "node-reaper ({built}), {COUNT} instances + {COUNT} Nodes, one reconcile in the sandbox (median of 11): {:.1} ms (min {:.1}, max {:.1})\n  outcome: {message}",
            times[5].as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[10].as_secs_f64() * 1e3,
        );
    }
}

/// The release daemon with node-reaper against `peer` (50 instances, one
/// Node each): the requests of one pass, counted at the peer, then idle RSS
/// of a daemon started on a warm compile cache (as a restarted node's is).
fn daemon_with(peer: CloudPeer) {
    let provider = match peer {
        CloudPeer::OpenStack(_) => Provider::OpenStack,
        CloudPeer::Aws(_) => Provider::Aws,
    };
    let instances = 50;
    let api = KubeApi::start();
    for (n, id) in peer.add_instances(instances, &[OWNER]).iter().enumerate() {
        let scheme = match provider {
            Provider::OpenStack => "openstack",
            Provider::Aws => "aws",
        };
        let node = json!({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": format!("node-{n}")},
                          "spec": {"providerID": format!("{scheme}:///{id}")},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let (code, body) = api.call("POST", "/api/v1/nodes", Some(&node));
        assert_eq!(code, 201, "{body}");
    }
    let sandbox = Sandbox::new();
    sandbox.add_plugin("node-reaper", "node-reaper");
    let port = tend_e2e::free_port();
    sandbox.config_with_host(
        &format!(
            "listen = \"127.0.0.1:{port}\"\n{}\n{}[host.leader-election]\nnamespace = \"kube-system\"\nname = \"bench\"\n",
            peer.host_config(),
            api.host_kube(&sandbox)
        ),
        &reaper_config(""),
    );
    api.grant_rbac(&sandbox);
    let env: Vec<(&str, String)> = peer.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let first_pass = || {
        time_until(Duration::from_secs(60), "node-reaper's first pass", || {
            plugin_status(port, "node-reaper")["reconciles"].as_u64() >= Some(1)
        })
    };
    let filling = sandbox.daemon_with_env(&env);
    first_pass();
    drop(filling); // the compile cache now holds node-reaper's Cranelift build
    let daemon = sandbox.daemon_with_env(&env);
    first_pass();
    peer.clear_requests();
    sandbox.tend_with_env(&["reconcile", "node-reaper"], &env);
    let requests = peer.request_count();
    std::thread::sleep(Duration::from_secs(5));
    println!(
        "{provider:?}, {instances} instances and Nodes: one node-reaper pass made {requests} requests; idle RSS of tend {} KiB",
        rss_kib(daemon.pid())
    );
}

fn main() {
    // SAFETY: no other thread runs yet. The harness runs `tend` from TEND_BIN:
    // here the release build cargo made for this bench.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    // `-- sandbox` (or `openstack`, `aws`) runs that part alone, for a profile.
    const PARTS: [&str; 3] = ["sandbox", "openstack", "aws"];
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let runs = |part: &str| only.as_deref().is_none_or(|o| part.contains(o));
    assert!(
        PARTS.into_iter().any(runs),
        "{only:?} names no part of this bench: give one of {PARTS:?}, or none for all"
    );
    if runs("sandbox") {
        reaper_in_the_sandbox();
    }
    if runs("openstack") {
        // The OpenStack fake with Nova's and Neutron's usual page size (1000).
        daemon_with(CloudPeer::OpenStack(OpenStackFake::start()));
    }
    if runs("aws") {
        daemon_with(CloudPeer::start(Provider::Aws));
    }
}
