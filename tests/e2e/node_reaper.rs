//! node-reaper end to end, against both providers: the real `tend` (cluster
//! scope, leader election on the Kubernetes API fake), the real
//! node-reaper.wasm, Nodes in the Kubernetes API fake, and the OpenStack fake
//! or moto behind its proxy. Each test body is written once over
//! [`CloudPeer`] and runs for each provider (AWS has no ERROR state, so
//! those cases are OpenStack's only). Every deletion is counted at the peer,
//! not taken from tend's word; where something must not happen, the test
//! first waits for the passes that would have done it.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tend_e2e::cloud::{CloudPeer, ListingFault, Provider, Seeded};
use tend_e2e::{Daemon, KubeApi, Sandbox, free_port, plugin_status, wait_for_plugin, wait_until};

const WITHIN: Duration = Duration::from_secs(30);
/// node-reaper's `confirm-after` in these tests, its floor: a candidate is
/// deleted no sooner than this after a pass first found it one.
const CONFIRM: Duration = Duration::from_secs(60);
/// How long to wait for what needs a confirmation (a deletion, a breaker
/// holding back a confirmed candidate).
const CONFIRMED_WITHIN: Duration = Duration::from_secs(100);
const REAPER: &str = "node-reaper";
/// The leader election's Lease, which node-reaper's Events are about.
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE: &str = "tend";
/// The cluster's ownership tag (key and value) in most tests.
const OWNER: (&str, &str) = ("kubernetes.io/cluster/a", "owned");

/// A cluster: the Kubernetes API fake, a cloud peer, and (once started) a
/// daemon running node-reaper. The daemon drops first: it prints its log
/// from the sandbox when a test fails.
struct Cluster {
    daemon: Option<Daemon>,
    /// The leader election's timings (`[host.leader-election]` lines).
    lease_timings: &'static str,
    port: u16,
    sandbox: Sandbox,
    api: KubeApi,
    cloud: CloudPeer,
}

impl Cluster {
    fn start(provider: Provider) -> Cluster {
        Cluster {
            daemon: None,
            lease_timings: "lease-duration = \"6s\"\nrenew-deadline = \"4s\"\nretry-period = \"1s\"\n",
            port: free_port(),
            sandbox: Sandbox::new(),
            api: KubeApi::start(),
            cloud: CloudPeer::start(provider),
        }
    }

    /// Write the config: `host` lines (keys of `[host]` first, then its
    /// tables) before the kube, leader-election and cloud sections, then
    /// `plugins`; tend gets exactly the RBAC `tend rbac` renders for it. The
    /// leader election only when a plugin is in the cluster scope: one tend
    /// is one ServiceAccount, and `tend rbac` binds the elector's Lease to
    /// tend-cluster, a node-scope plugin's grants to tend-node.
    fn configure(&self, host: &str, plugins: &str) {
        let host = self.host_config(&self.sandbox, self.port, host, plugins);
        self.sandbox.config_on_node("tend-0", &host, plugins);
        self.api.grant_rbac(&self.sandbox);
    }

    /// `[host]` of a replica in `sandbox` listening on `port`, `host` lines
    /// first, running `plugins`.
    fn host_config(&self, sandbox: &Sandbox, port: u16, host: &str, plugins: &str) -> String {
        let election = match plugins.contains("scope = \"cluster\"") {
            true => format!(
                "[host.leader-election]\nnamespace = \"{LEASE_NAMESPACE}\"\nname = \"{LEASE}\"\n{}",
                self.lease_timings
            ),
            false => String::new(),
        };
        format!(
            "listen = \"127.0.0.1:{port}\"\n{host}{}{election}{}",
            self.api.host_kube(sandbox),
            self.cloud.host_config(),
        )
    }

    /// A second replica on node `node` with the same `host` lines and
    /// `plugins` (the reaper), started: its sandbox, port and daemon.
    fn replica(&self, node: &str, host: &str, plugins: &str) -> (Sandbox, u16, Daemon) {
        let (sandbox, port) = (Sandbox::new(), free_port());
        sandbox.add_plugin(REAPER, REAPER);
        let config = self.host_config(&sandbox, port, host, plugins);
        sandbox.config_on_node(node, &config, plugins);
        self.api.grant_rbac(&sandbox);
        let daemon = self.with_cloud_env(|env| sandbox.daemon_with_env(env));
        (sandbox, port, daemon)
    }

    /// Configure, copy the plugin under each of `names`, start `tend run`.
    fn run(&mut self, host: &str, names: &[&str], plugins: &str) {
        for name in names {
            self.sandbox.add_plugin(REAPER, name);
        }
        self.configure(host, plugins);
        self.restart();
    }

    /// Start `tend run` (again) on the sandbox's config and state.
    fn restart(&mut self) {
        let daemon = self.with_cloud_env(|env| self.sandbox.daemon_with_env(env));
        self.daemon = Some(daemon);
    }

    /// `run` given the environment tend needs for the cloud's credentials.
    fn with_cloud_env<T>(&self, run: impl FnOnce(&[(&str, &str)]) -> T) -> T {
        let env = self.cloud.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run(&env)
    }

    /// A pass now (`tend reconcile`, through the daemon, which allows one a
    /// second): what it printed.
    fn reconcile_now(&self) -> String {
        let mut printed = String::new();
        wait_until(WITHIN, "a manual reconcile", || {
            let out = self.tend(&["reconcile", REAPER]);
            printed = format!("{}{}", out.stdout, out.stderr);
            !printed.contains("429 Too Many Requests")
        });
        printed
    }

    /// Run `tend ARGS` to completion with the cloud's credentials.
    fn tend(&self, args: &[&str]) -> tend_e2e::Outcome {
        self.with_cloud_env(|env| self.sandbox.tend_with_env(args, env))
    }

    fn stop(&mut self) {
        let daemon = self.daemon.take().expect("a running daemon");
        assert!(daemon.terminate(WITHIN), "tend did not exit cleanly");
    }

    /// A Ready Node `name`, with `spec.providerID` and an InternalIP when given.
    fn add_node(&self, name: &str, provider_id: Option<&str>, internal_ip: Option<&str>) {
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        });
        if let Some(id) = provider_id {
            node["spec"] = json!({"providerID": id});
        }
        if let Some(ip) = internal_ip {
            node["status"]["addresses"] = json!([{"type": "InternalIP", "address": ip}]);
        }
        let (code, body) = self.api.call("POST", "/api/v1/nodes", Some(&node));
        assert_eq!(code, 201, "create Node {name}: {body}");
    }

    /// Set Node `name`'s Ready condition (its status subresource, as the
    /// kubelet does).
    fn set_ready(&self, name: &str, ready: bool) {
        let status = if ready { "True" } else { "False" };
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
        let (code, body) = (self.api)
            .call_raw(
                "PATCH",
                &format!("/api/v1/nodes/{name}/status"),
                "application/merge-patch+json",
                &patch.to_string(),
                None,
                WITHIN,
            )
            .unwrap();
        assert_eq!(code, 200, "Node {name} Ready={status}: {body}");
    }

    fn delete_node(&self, name: &str) {
        let (code, body) = self
            .api
            .call("DELETE", &format!("/api/v1/nodes/{name}"), None);
        assert_eq!(code, 200, "delete Node {name}: {body}");
    }

    /// An instance of the cluster in pool `pool` ("" for none), with no Node.
    fn unregistered(&self, name: &str, pool: &str) -> Seeded {
        self.cloud.add_instance(name, &owned_in(pool))
    }

    /// An instance of the cluster with a Node of its name.
    fn registered(&self, name: &str) -> Seeded {
        let seeded = self.cloud.add_instance(name, &owned_in(""));
        self.add_node(name, None, None);
        seeded
    }

    fn status(&self, plugin: &str) -> Value {
        plugin_status(self.port, plugin)
    }

    fn reconciles(&self, plugin: &str) -> u64 {
        self.status(plugin)["reconciles"].as_u64().unwrap_or(0)
    }

    /// Wait until `plugin`'s last outcome message satisfies `condition`
    /// (a confirmation may be part of the wait).
    fn wait_outcome(&self, plugin: &str, what: &str, condition: impl Fn(&str) -> bool) -> String {
        let mut message = String::new();
        wait_until(CONFIRMED_WITHIN, what, || {
            let status = self.status(plugin);
            message = status["last"]["message"].as_str().unwrap_or("").to_string();
            condition(&message)
        });
        message
    }

    /// Wait for `passes` more reconciles of `plugin`; the last outcome message.
    fn wait_passes(&self, plugin: &str, passes: u64) -> String {
        let until = self.reconciles(plugin) + passes;
        let status = wait_for_plugin(self.port, plugin, &format!("{passes} more passes"), |p| {
            p["reconciles"].as_u64().unwrap_or(0) >= until
        });
        status["last"]["message"].as_str().unwrap_or("").to_string()
    }

    fn wait_gone(&self, instance: &Seeded) {
        let what = format!("{} to be deleted", instance.name);
        wait_until(CONFIRMED_WITHIN, &what, || {
            !self.cloud.live_ids().contains(&instance.id)
        });
    }

    /// The outcomes the reapers logged, in order.
    fn outcomes(&self) -> Vec<String> {
        let daemon = self.daemon.as_ref().expect("a running daemon");
        (daemon.log().lines())
            .filter(|l| l.contains("enforce mode: ") || l.contains("report mode: "))
            .map(str::to_string)
            .collect()
    }

    /// Assert the peer got exactly one delete for each of `deleted`, none for
    /// any of `kept`, and still holds every one of `kept`.
    fn assert_deletes(&self, deleted: &[&Seeded], kept: &[&Seeded]) {
        let live = self.cloud.live_ids();
        for instance in deleted {
            assert_eq!(
                self.cloud.deletes(Some(&instance.id)),
                1,
                "deletes of {}",
                instance.name
            );
            assert!(
                !live.contains(&instance.id),
                "{} still exists",
                instance.name
            );
        }
        for instance in kept {
            assert_eq!(
                self.cloud.deletes(Some(&instance.id)),
                0,
                "deletes of {}",
                instance.name
            );
            assert!(live.contains(&instance.id), "{} is gone", instance.name);
        }
        assert_eq!(self.cloud.deletes(None), deleted.len(), "deletes in all");
    }
}

/// The IDs an outcome line says its pass deleted ("N candidate(s), deleted
/// A, B, skipped: ...").
fn deleted_in(line: &str) -> Vec<&str> {
    let Some((_, deleted)) = line.split_once(" candidate(s), deleted ") else {
        return vec![];
    };
    let clause = deleted.split(';').next().unwrap_or_default();
    (clause.split(", "))
        .take_while(|part| !part.starts_with("skipped: "))
        .filter_map(|part| part.split(' ').next())
        .collect()
}

/// The owner tag, and `pool = <pool>` unless `pool` is empty.
fn owned_in(pool: &str) -> Vec<(&str, &str)> {
    let mut tags = vec![OWNER];
    if !pool.is_empty() {
        tags.push(("pool", pool));
    }
    tags
}

/// `[plugins.NAME]` running node-reaper for the cluster `owner` (tag key,
/// value "owned") every `interval`: `config` lines after short timeouts and
/// no max-fraction breaker (1.0), each unless `config` sets it.
fn reaper(name: &str, owner: &str, interval: &str, config: &str) -> String {
    // The keys `config` sets before its tables (a pool's own timeout is not one).
    let set = config.split("\n[").next().unwrap_or_default();
    let defaults: String = [
        ("registration-timeout", "\"2s\""),
        ("error-grace", "\"2s\""),
        ("confirm-after", "\"1m\""),
        ("max-fraction", "1.0"),
    ]
    .iter()
    .filter(|(key, _)| !set.contains(&format!("{key} =")))
    .map(|(key, value)| format!("{key} = {value}\n"))
    .collect();
    format!(
        r#"[plugins.{name}]
scope = "cluster"
interval = "{interval}"
[plugins.{name}.grants]
cloud = {{ operations = ["list-instances", "delete-instance"], instances = [{{ tag = "{owner}", value = "owned" }}] }}
kube = [
  {{ resource = "nodes", verbs = ["get", "list", "watch"] }},
  {{ group = "coordination.k8s.io", resource = "leases", verbs = ["get"], namespaces = ["{LEASE_NAMESPACE}"], names = ["{LEASE}"] }},
]
[plugins.{name}.config]
owner = {{ tag = "{owner}", value = "owned" }}
pool-tag = "pool"
{defaults}{config}
"#
    )
}

/// The reaper's registration timeout in `pool`: a table, so last.
fn pool_timeout(pool: &str, timeout: &str) -> String {
    format!("[plugins.{REAPER}.config.pools.{pool}]\nregistration-timeout = \"{timeout}\"\n")
}

/// `plugins` run on every host, not only the leader (and with no leader
/// election: see [`Cluster::configure`]): a test where tend's requests fail
/// for longer than the renew deadline (the watch cache's grace is longer)
/// would otherwise see the leader step down instead.
fn node_scoped(plugins: &str) -> String {
    plugins.replace("scope = \"cluster\"\n", "")
}

/// The reaper of cluster `a`, every second, `config` lines added.
fn reaper_a(config: &str) -> String {
    reaper(REAPER, OWNER.0, "1s", config)
}

/// Each test body, run once per provider (`openstack::NAME`, `aws::NAME`).
/// Each body as `openstack::NAME` and `aws::NAME`.
macro_rules! for_each_provider {
    ($($name:ident),* $(,)?) => {
        vec![
            $( trial(concat!("openstack::", stringify!($name)), || $name(Provider::OpenStack)), )*
            $( trial(concat!("aws::", stringify!($name)), || $name(Provider::Aws)), )*
        ]
    };
}
/// Tests at once, unless `--test-threads` says otherwise: most of each test
/// is waiting out `confirm-after`'s one-minute floor with the machine idle,
/// and libtest would run only as many as there are cores.
const AT_ONCE: usize = 8;

fn main() -> std::process::ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads.get_or_insert(AT_ONCE);
    let mut trials = for_each_provider!(
        only_instances_that_never_registered_are_deleted,
        an_empty_node_listing_deletes_nothing,
        a_listing_failing_between_pages_deletes_nothing,
        too_many_candidates_open_the_max_fraction_breaker,
        the_first_pass_after_a_start_deletes_nothing,
        the_cap_and_the_budget_bound_deletions_across_passes_and_a_restart,
        report_mode_and_tend_plan_delete_nothing,
        pool_a_and_pool_ab_never_touch_each_others_instances,
        a_slow_delete_is_sent_once,
        a_deleted_node_reconciles_the_reaper_at_once,
        an_api_server_failing_for_a_while_deletes_nothing,
        a_node_cache_never_synced_deletes_nothing,
        the_first_pass_after_leading_again_deletes_nothing,
        a_cloud_clock_an_hour_behind_never_shortens_the_registration_timeout,
        a_node_missing_for_a_while_costs_no_instance,
        an_instance_listed_twice_counts_once,
        a_leader_killed_as_it_deletes_leaves_its_spend_to_the_next,
        not_ready_nodes_hold_deletions_but_unregistered_instances_never_count,
        the_churn_guard_latches_across_a_restart_until_breaker_reset_is_reloaded,
        protected_errored_and_few_candidates_as_configured,
        a_replace_request_deletes_the_instance_of_a_cordoned_node_only,
    );
    trials.push(trial(
        "a_listing_truncated_between_pages_deletes_nothing",
        a_listing_truncated_between_pages_deletes_nothing,
    ));
    libtest_mimic::run(&args, trials).exit_code()
}

/// A test named `name` (a panic fails it, as under libtest).
fn trial(name: &str, test: impl FnOnce() + Send + 'static) -> libtest_mimic::Trial {
    libtest_mimic::Trial::test(name, move || {
        test();
        Ok(())
    })
}

/// An instance past its registration timeout with no Node is deleted; a
/// young one and one matched by any key (every providerID form, the name, an
/// InternalIP) are kept. OpenStack: one in ERROR that never registered is
/// deleted after the grace; one that was a Node is reported, not deleted.
fn only_instances_that_never_registered_are_deleted(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let cloud = &cluster.cloud;
    let doomed = cluster.unregistered("doomed", "");
    let young = cluster.unregistered("young", "young");
    let mut kept = vec![young.clone()];
    let by_id = cloud.add_instance("by-provider-id", &owned_in(""));
    for (i, provider_id) in by_id.provider_ids.iter().enumerate() {
        // One instance per form: each Node names only its own.
        let instance = match i {
            0 => by_id.clone(),
            _ => cloud.add_instance(&format!("by-provider-id-{i}"), &owned_in("")),
        };
        let provider_id = provider_id.replace(&by_id.id, &instance.id);
        cluster.add_node(&format!("node-{i}"), Some(&provider_id), None);
        kept.push(instance);
    }
    kept.push(cluster.registered("by-name"));
    let by_ip = cloud.add_instance("by-ip", &owned_in(""));
    cluster.add_node("other-name", None, Some(&by_ip.private_ip));
    kept.push(by_ip);
    let mut deleted = vec![doomed.clone()];
    let once_a_node = (provider == Provider::OpenStack).then(|| {
        deleted.push(cloud.add_errored_instance("errored", &owned_in("errors")));
        cluster.registered("once-a-node")
    });
    let config = format!(
        "mode = \"enforce\"\nmax-deletions-per-pass = 5\n{}",
        pool_timeout("young", "1h")
    );
    cluster.run("", &[REAPER], &reaper_a(&config));

    for instance in &deleted {
        cluster.wait_gone(instance);
    }
    if let Some(instance) = &once_a_node {
        // A Node, then in ERROR and its Node gone: reported, never deleted.
        cluster.cloud.set_errored(&instance.id);
        cluster.delete_node(&instance.name);
        cluster.wait_outcome(REAPER, "the errored former Node reported", |m| {
            m.contains("1 in error that once were Nodes (reported, not deleted)")
        });
        kept.push(instance.clone());
    }
    cluster.wait_passes(REAPER, 3);
    let deleted: Vec<&Seeded> = deleted.iter().collect();
    cluster.assert_deletes(&deleted, &kept.iter().collect::<Vec<_>>());
}

/// Instances but no Node at all: the listing is taken for false, nothing is
/// deleted, and the outcome says why; a Node appearing lets the reaper act.
fn an_empty_node_listing_deletes_nothing(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let doomed = cluster.unregistered("doomed", "");
    cluster.run("", &[REAPER], &reaper_a("mode = \"enforce\""));
    let message = cluster.wait_outcome(REAPER, "the confirmed candidate held back", |m| {
        m.contains("skipped: 1 breaker")
    });
    assert!(
        message.contains(
            "breakers open: no_nodes: the Node listing is empty while 1 instance(s) exist"
        ),
        "{message}"
    );
    cluster.wait_passes(REAPER, 2);
    cluster.assert_deletes(&[], &[&doomed]);

    cluster.add_node("unrelated", None, None);
    cluster.wait_gone(&doomed);
}

/// A listing answered 5xx between its pages: nothing is deleted, and the
/// outcome says the listing failed; once it pages again, the reaper acts.
fn a_listing_failing_between_pages_deletes_nothing(provider: Provider) {
    a_listing_failing_between_pages(provider, ListingFault::ServerError);
}

/// The same for a page cut short (OpenStack: the proxy in front of moto
/// cuts none).
fn a_listing_truncated_between_pages_deletes_nothing() {
    a_listing_failing_between_pages(Provider::OpenStack, ListingFault::Truncated);
}

/// The reaper runs hourly: its passes come from its own requeues (a
/// timeout or a confirmation due) and from the test (`tend reconcile`), so
/// the fault is switched on between passes, never in the middle of one.
fn a_listing_failing_between_pages(provider: Provider, fault: ListingFault) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let pages = cluster.cloud.page_listings_by_two();
    let doomed = cluster.cloud.add_instances(pages, &owned_in(""));
    // So many launches that never registered would latch the churn guard.
    let config = format!("mode = \"enforce\"\nchurn-min-failures = {}", pages + 1);
    let plugin = reaper(REAPER, OWNER.0, "1h", &config);
    cluster.run("", &[REAPER], &plugin);
    cluster.wait_passes(REAPER, 1);

    cluster.cloud.fail_listings_after_the_first_page(fault);
    let failing_since = Instant::now();
    let failed = "deleted nothing: listing the cluster's instances failed";
    let message = cluster.wait_outcome(REAPER, "the listing failing", |m| m.starts_with(failed));
    assert!(message.contains("(page 2"), "{message}");
    // Past the registration timeout and a confirmation, failing all along.
    wait_until(WITHIN, "the timeouts to pass", || {
        failing_since.elapsed() > Duration::from_secs(4)
    });
    for _ in 0..2 {
        let printed = cluster.reconcile_now();
        assert!(printed.contains(failed), "{printed}");
    }
    assert_eq!(
        cluster.cloud.deletes(None),
        0,
        "deleted while the listing failed"
    );

    cluster.cloud.clear_faults();
    // Timed out while the listing failed: candidates now, first seen as such
    // by this pass, so they wait for their confirmation.
    let printed = cluster.reconcile_now();
    assert!(
        printed.contains(&format!("{pages} candidate(s)")),
        "{printed}"
    );
    wait_until(CONFIRMED_WITHIN, "a deletion once listings work", || {
        cluster.cloud.deletes(None) > 0
    });
    let live = cluster.cloud.live_ids();
    assert!(live.contains(&registered.id));
    assert!(doomed.iter().any(|id| !live.contains(id)));
}

/// More candidates than max-fraction of the cluster: nothing is deleted,
/// the breaker is reported (and latched).
fn too_many_candidates_open_the_max_fraction_breaker(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let doomed: Vec<Seeded> = (0..4)
        .map(|i| cluster.unregistered(&format!("doomed-{i}"), &format!("p{i}")))
        .collect();
    let config = "mode = \"enforce\"\nmax-fraction = 0.5\nmax-deletions-per-pass = 4";
    cluster.run("", &[REAPER], &reaper_a(config));
    let message = cluster.wait_outcome(REAPER, "the breaker holding back every candidate", |m| {
        m.contains("skipped: 4 breaker")
    });
    assert!(
        message.contains("breakers open: max_fraction: 4 candidate(s) of 5 instance(s), over max-fraction = 0.5 (latched"),
        "{message}"
    );
    cluster.wait_passes(REAPER, 2);
    let mut kept: Vec<&Seeded> = doomed.iter().collect();
    kept.push(&registered);
    cluster.assert_deletes(&[], &kept);
}

/// A candidate confirmed before a restart is not deleted by the first pass
/// after it (report mode first, then enforce on the same state), only by a
/// later one.
fn the_first_pass_after_a_start_deletes_nothing(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    cluster.registered("registered");
    let doomed = cluster.unregistered("doomed", "");
    cluster.run(
        "",
        &[REAPER],
        &reaper(REAPER, OWNER.0, "1h", "mode = \"report\""),
    );
    cluster.wait_outcome(REAPER, "a confirmed candidate", |m| {
        m.contains(&format!("would delete {}", doomed.id))
    });
    cluster.stop();

    cluster.configure("", &reaper(REAPER, OWNER.0, "1h", "mode = \"enforce\""));
    cluster.restart();
    let first = wait_for_plugin(cluster.port, REAPER, "the first pass", |p| {
        p["reconciles"] == 1
    });
    // Its clock starts anew: a sighting from before the restart is not ours.
    let message = first["last"]["message"].as_str().unwrap();
    assert!(
        message.contains("1 registered, 1 unregistered, 0 long-unregistered"),
        "{first:#}"
    );
    assert_eq!(cluster.cloud.deletes(None), 0, "the first pass deleted");
    cluster.wait_gone(&doomed);
    assert_eq!(cluster.cloud.deletes(None), 1);
}

/// Four candidates (in four pools), two deletions a pass, a budget of
/// three an hour: two go in one pass, one in the next, the last is refused
/// by the budget, also after a restart on the same state.
fn the_cap_and_the_budget_bound_deletions_across_passes_and_a_restart(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let doomed: Vec<Seeded> = (0..4)
        .map(|i| cluster.unregistered(&format!("doomed-{i}"), &format!("p{i}")))
        .collect();
    let budget = "[host.budgets.instance-deletions]\noperations = [\"cloud.delete-instance\"]\nmax = 3\nper = \"1h\"\n";
    let config = "mode = \"enforce\"\nmax-deletions-per-pass = 2";
    cluster.run(budget, &[REAPER], &reaper_a(config));
    let refused = |m: &str| m.contains("deletions stopped by the host budget");
    cluster.wait_outcome(REAPER, "the budget spent", refused);
    wait_until(WITHIN, "three deletions", || {
        cluster.cloud.deletes(None) == 3
    });
    let per_pass: Vec<usize> = (cluster.outcomes().iter())
        .map(|line| deleted_in(line).len())
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(
        per_pass,
        [2, 1],
        "deletions per pass: {:#?}",
        cluster.outcomes()
    );

    cluster.stop();
    cluster.restart();
    let message = cluster.wait_outcome(REAPER, "the budget refusing after the restart", refused);
    assert!(message.contains("skipped: 1 budget"), "{message}");
    cluster.wait_passes(REAPER, 2);
    let live = cluster.cloud.live_ids();
    assert_eq!(cluster.cloud.deletes(None), 3, "the budget was spent again");
    let left: Vec<&Seeded> = doomed.iter().filter(|d| live.contains(&d.id)).collect();
    assert_eq!(left.len(), 1, "{live:?}");
    assert!(live.contains(&registered.id));
}

/// Report mode names every candidate it would delete (two in one pool: no
/// "in flight" in a report), sends an `InstanceWouldDelete` Event about the
/// leader's Lease for each, and deletes nothing; so does `tend plan` on an
/// enforcing config, from live data and the saved state.
fn report_mode_and_tend_plan_delete_nothing(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let doomed = cluster.unregistered("doomed", "");
    let also = cluster.unregistered("also-doomed", "");
    let events_about = format!(
        "events-about = {{ api-version = \"coordination.k8s.io/v1\", kind = \"Lease\", namespace = \"{LEASE_NAMESPACE}\", name = \"{LEASE}\" }}"
    );
    cluster.run("", &[REAPER], &reaper_a(&events_about));
    let would = format!("would delete {}", doomed.id);
    let listed = |m: &str| {
        [&doomed, &also]
            .iter()
            .all(|d| m.contains(&format!("{} (registration_timeout)", d.id)))
    };
    let message = cluster.wait_outcome(REAPER, "both reported deletions", |m| {
        m.starts_with("report mode: ") && listed(m)
    });
    assert!(!message.contains("in flight"), "{message}");
    let lease = cluster.api.call(
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE}"),
        None,
    );
    let uid = lease.1["metadata"]["uid"].clone();
    let events = |id: &str| -> Vec<Value> {
        let (code, list) = cluster.api.call(
            "GET",
            &format!("/apis/events.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/events"),
            None,
        );
        assert_eq!(code, 200, "{list}");
        (list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter())
        .filter(|e| e["reason"] == "InstanceWouldDelete")
        .filter(|e| e["note"].as_str().is_some_and(|n| n.contains(id)))
        .collect()
    };
    for instance in [&doomed, &also] {
        let mut found = vec![];
        wait_until(WITHIN, "an InstanceWouldDelete Event", || {
            found = events(&instance.id);
            !found.is_empty()
        });
        let regarding = &found[0]["regarding"];
        assert_eq!(regarding["kind"], "Lease", "{regarding}");
        assert_eq!(regarding["name"], LEASE, "{regarding}");
        assert_eq!(
            regarding["uid"], uid,
            "about the Lease that exists: {regarding}"
        );
    }
    cluster.wait_passes(REAPER, 2);
    cluster.assert_deletes(&[], &[&doomed, &also, &registered]);
    cluster.stop();

    cluster.configure("", &reaper_a("mode = \"enforce\""));
    let plan = cluster.tend(&["plan", REAPER]);
    assert!(plan.success, "{}{}", plan.stdout, plan.stderr);
    // Enforcing, one deletion a pass: one would go, the other is named as held.
    let (first, second) = match plan.stdout.contains(&would) {
        true => (&doomed, &also),
        false => (&also, &doomed),
    };
    assert!(
        plan.stdout.contains("enforce mode: ")
            && plan.stdout.contains(&format!("would delete {}", first.id))
            && plan
                .stdout
                .contains(&format!("held: {} (registration_timeout: ", second.id)),
        "{}",
        plan.stdout
    );
    cluster.assert_deletes(&[], &[&doomed, &also, &registered]);
}

/// Two clusters whose names are prefixes of each other (`a`, `ab`), each
/// with a reaper owning its tag: each deletes its own unregistered
/// instance and never one of the other's.
fn pool_a_and_pool_ab_never_touch_each_others_instances(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let cloud = &cluster.cloud;
    let owner_ab = ("kubernetes.io/cluster/ab", "owned");
    let a_doomed = cluster.unregistered("a-doomed", "");
    let a_kept = cluster.registered("a-kept");
    let ab_doomed = cloud.add_instance("ab-doomed", &[owner_ab]);
    let ab_kept = cloud.add_instance("ab-kept", &[owner_ab]);
    cluster.add_node("ab-kept", None, None);
    let plugins = reaper("reaper-a", OWNER.0, "1s", "mode = \"enforce\"")
        + &reaper("reaper-ab", owner_ab.0, "1s", "mode = \"enforce\"");
    cluster.run("", &["reaper-a", "reaper-ab"], &plugins);
    cluster.wait_gone(&a_doomed);
    cluster.wait_gone(&ab_doomed);
    for plugin in ["reaper-a", "reaper-ab"] {
        cluster.wait_passes(plugin, 2);
    }
    cluster.assert_deletes(&[&a_doomed, &ab_doomed], &[&a_kept, &ab_kept]);
    let journal = tend_e2e::journal(&cluster.sandbox);
    for (plugin, own, other) in [
        ("reaper-a", &a_doomed, &ab_doomed),
        ("reaper-ab", &ab_doomed, &a_doomed),
    ] {
        let targets: Vec<&str> = (journal.iter())
            .filter(|e| e["plugin"] == plugin)
            .filter_map(|e| e["target"].as_str())
            .collect();
        assert!(
            targets.iter().any(|t| t.contains(&own.id)),
            "{plugin}: {targets:#?}"
        );
        assert!(
            !targets.iter().any(|t| t.contains(&other.id)),
            "{plugin}: {targets:#?}"
        );
    }
}

/// While a deletion is under way (OpenStack: "deleting" for a while; AWS:
/// TerminateInstances held by the proxy), the passes that follow send no
/// second delete.
fn a_slow_delete_is_sent_once(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let doomed = cluster.unregistered("doomed", "");
    cluster.cloud.slow_deletes(6);
    cluster.run("", &[REAPER], &reaper_a("mode = \"enforce\""));
    wait_until(CONFIRMED_WITHIN, "the delete", || {
        cluster.cloud.deletes(None) == 1
    });
    cluster.wait_passes(REAPER, 3);
    if provider == Provider::OpenStack {
        let server = cluster.cloud.live_ids();
        assert!(server.contains(&doomed.id), "those passes saw it deleting");
    }
    cluster.wait_gone(&doomed);
    cluster.wait_passes(REAPER, 2);
    cluster.assert_deletes(&[&doomed], &[&registered]);
}

/// A Node deleted at the API server reconciles the reaper (its interval is
/// an hour: the pass's trigger names the deleted Node): the instance it stood for, once a Node, is deleted
/// after its lost-node grace (here the 2s registration timeout) and a
/// confirmation, not before.
fn a_deleted_node_reconciles_the_reaper_at_once(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    cluster.registered("stays");
    let leaving = cluster.registered("leaving");
    cluster.run(
        "",
        &[REAPER],
        &reaper(REAPER, OWNER.0, "1h", "mode = \"enforce\""),
    );
    wait_for_plugin(cluster.port, REAPER, "the first pass", |p| {
        p["reconciles"] == 1
    });
    wait_until(WITHIN, "tend's watch on Nodes", || {
        cluster.api.open_watches("nodes") > 0
    });

    let deleted_at = Instant::now();
    cluster.delete_node(&leaving.name);
    let woken = wait_for_plugin(cluster.port, REAPER, "a pass for the deletion", |p| {
        p["last"]["triggers"].as_array().is_some_and(|t| {
            t.iter().any(|t| {
                t.as_str()
                    .is_some_and(|t| t.starts_with("kube:nodes") && t.contains("leaving"))
            })
        })
    });
    // Its trigger names the deleted Node: the watch ran it, not the hour.
    eprintln!(
        "woken {:?} after the deletion: {}",
        deleted_at.elapsed(),
        woken["last"]["triggers"]
    );
    cluster.wait_gone(&leaving);
    assert!(
        deleted_at.elapsed() >= CONFIRM,
        "deleted {:?} after its Node, within the grace and a confirmation",
        deleted_at.elapsed()
    );
    assert_eq!(cluster.cloud.deletes(None), 1);
}

/// The API server failing for longer than the watch cache's grace: the
/// Node listing fails (never a stale list), nothing is deleted, and once it
/// answers again the registration timeout counts from then.
fn an_api_server_failing_for_a_while_deletes_nothing(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let config = format!("mode = \"enforce\"\n{}", pool_timeout("slow", "5s"));
    cluster.run("", &[REAPER], &node_scoped(&reaper_a(&config)));
    cluster.wait_passes(REAPER, 1);
    wait_until(WITHIN, "tend's watch on Nodes", || {
        cluster.api.open_watches("nodes") > 0
    });

    cluster.api.outage(120.0, Some("tend/"));
    let message = cluster.wait_outcome(REAPER, "the Node listing refused", |m| {
        m.contains("node_listing")
    });
    assert!(message.contains("listing Nodes failed"), "{message}");
    let doomed = cluster.unregistered("doomed", "slow");
    let failing_since = Instant::now();
    wait_until(WITHIN, "the outage to outlast the timeouts", || {
        failing_since.elapsed() > Duration::from_secs(7)
    });
    cluster.wait_passes(REAPER, 1);
    assert_eq!(cluster.cloud.deletes(None), 0, "deleted during the outage");

    cluster.api.end_outage();
    let healthy_since = Instant::now();
    cluster.wait_gone(&doomed);
    assert!(
        healthy_since.elapsed() >= Duration::from_secs(5),
        "deleted {:?} after the API server answered again, within the 5s registration timeout",
        healthy_since.elapsed()
    );
    cluster.assert_deletes(&[&doomed], &[&registered]);
}

/// The API server failing from the start: the Node cache never syncs, the
/// Node listing fails, nothing is deleted; once it answers, the reaper acts.
fn a_node_cache_never_synced_deletes_nothing(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let doomed = cluster.unregistered("doomed", "");
    cluster.api.outage(120.0, Some("tend/"));
    let plugins = node_scoped(&reaper_a("mode = \"enforce\""));
    cluster.run("", &[REAPER], &plugins);
    let message = cluster.wait_outcome(REAPER, "the Node listing refused", |m| {
        m.contains("node_listing")
    });
    assert!(message.contains("listing Nodes failed"), "{message}");
    let failing_since = Instant::now();
    wait_until(WITHIN, "the outage to outlast the timeouts", || {
        failing_since.elapsed() > Duration::from_secs(4)
    });
    let message = cluster.wait_passes(REAPER, 1);
    assert!(message.contains("node_listing"), "{message}");
    assert_eq!(
        cluster.cloud.deletes(None),
        0,
        "deleted with no Node listing"
    );

    cluster.api.end_outage();
    cluster.wait_gone(&doomed);
    cluster.assert_deletes(&[&doomed], &[&registered]);
}

/// A host that stops leading and leads again: its first pass as the leader
/// again deletes nothing, although its memory holds a candidate the pass
/// would otherwise confirm; a later pass deletes it. Meanwhile `tend plan`
/// through this daemon says it would delete it, and neither deletes nor
/// counts a deletion.
fn the_first_pass_after_leading_again_deletes_nothing(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    cluster.registered("registered");
    let doomed = cluster.unregistered("doomed", "");
    let config = "mode = \"enforce\"";
    cluster.run("", &[REAPER], &reaper(REAPER, OWNER.0, "1h", config));
    cluster.wait_outcome(REAPER, "a candidate seen", |m| {
        m.contains("skipped: 1 unconfirmed")
    });
    let seen = Instant::now();

    // Another writer holds the Lease: this host stops leading, and takes it
    // back once the other has not renewed it for lease-duration.
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tend";
    let hand_the_lease_away = || {
        let (code, mut lease) = cluster.api.call("GET", path, None);
        assert_eq!(code, 200, "{lease}");
        lease["spec"]["holderIdentity"] = json!("another-host");
        let now = humantime::format_rfc3339_micros(std::time::SystemTime::now());
        lease["spec"]["renewTime"] = json!(now.to_string());
        let (code, body) = cluster.api.call("PUT", path, Some(&lease));
        assert_eq!(code, 200, "{body}");
    };
    hand_the_lease_away();
    let leading = || tend_e2e::status(cluster.port)["leader"]["leading"] == true;
    wait_until(WITHIN, "this host to stop leading", || !leading());
    // The other writer renews while the confirmation comes due.
    let mut renewed = Instant::now();
    wait_until(CONFIRMED_WITHIN, "the confirmation to be due", || {
        if renewed.elapsed() > Duration::from_secs(2) {
            hand_the_lease_away();
            renewed = Instant::now();
        }
        seen.elapsed() > CONFIRM + Duration::from_millis(500)
    });
    hand_the_lease_away();
    let plan = cluster.tend(&["plan", REAPER]);
    let would = format!("would delete {}", doomed.id);
    assert!(
        plan.stdout.contains(&would),
        "{}{}",
        plan.stdout,
        plan.stderr
    );
    assert!(!leading(), "the plan ran on a leader");
    let deletions = || tend_e2e::metric(cluster.port, "tend_plugin_deletions_total");
    assert_eq!(cluster.cloud.deletes(None), 0, "the plan deleted");
    assert_eq!(deletions(), None, "the plan counted a deletion");

    let passes = cluster.reconciles(REAPER);
    let again = wait_for_plugin(cluster.port, REAPER, "the pass on leading again", |p| {
        p["reconciles"].as_u64().unwrap_or(0) > passes
    });
    let triggers = &again["last"]["triggers"];
    assert!(
        triggers
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == "leader")),
        "{again:#}"
    );
    // Its clock starts anew: the sighting from before the gap is not trusted.
    let message = again["last"]["message"].as_str().unwrap();
    assert!(
        message.contains("1 registered, 1 unregistered, 0 long-unregistered"),
        "{again:#}"
    );
    assert_eq!(
        cluster.cloud.deletes(None),
        0,
        "the first pass as the leader again deleted"
    );
    cluster.wait_gone(&doomed);
    assert_eq!(cluster.cloud.deletes(None), 1);
    // The instance is gone as the delete returns; the count is published when
    // that reconcile ends.
    wait_until(WITHIN, "the deletion counted", || deletions() == Some(1.0));
}

/// Hole 4, the attack: an instance that appears after the first pass with a
/// creation time an hour old (the cloud's clock behind tend's) is not deleted
/// within its registration timeout of its first sighting, nor before a
/// confirmation; after them, it is.
fn a_cloud_clock_an_hour_behind_never_shortens_the_registration_timeout(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let config = "mode = \"enforce\"\nregistration-timeout = \"20s\"";
    cluster.run("", &[REAPER], &reaper_a(config));
    cluster.wait_passes(REAPER, 1);
    let appeared = Instant::now();
    let booting = cluster
        .cloud
        .add_aged_instance("booting", &owned_in(""), 3600);
    let message = cluster.wait_outcome(REAPER, "its first sighting", |m| {
        m.contains("1 unregistered")
    });
    assert!(message.contains("0 long-unregistered"), "{message}");
    assert_eq!(cluster.cloud.deletes(None), 0, "deleted at first sight");
    cluster.wait_gone(&booting);
    assert!(
        appeared.elapsed() >= Duration::from_secs(20) + CONFIRM,
        "deleted {:?} after it appeared: within its timeout and a confirmation",
        appeared.elapsed()
    );
    cluster.assert_deletes(&[&booting], &[&registered]);
}

/// Hole 10c, the attack: a healthy instance's Node missing from the listing
/// for longer than a confirmation (the old rule deleted it then) but less
/// than its lost-node grace: never a candidate, never deleted.
fn a_node_missing_for_a_while_costs_no_instance(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let healthy = cluster.registered("healthy");
    cluster.registered("other");
    let config = "mode = \"enforce\"\nlost-node-grace = \"3m\"";
    cluster.run("", &[REAPER], &reaper_a(config));
    cluster.wait_outcome(REAPER, "both matched", |m| m.contains("2 registered"));
    cluster.delete_node(&healthy.name);
    let missing = Instant::now();
    cluster.wait_outcome(REAPER, "the Node missed", |m| m.contains("1 unregistered"));
    wait_until(
        CONFIRMED_WITHIN,
        "a confirmation and the timeout to pass",
        || missing.elapsed() > CONFIRM + Duration::from_secs(5),
    );
    cluster.wait_passes(REAPER, 2);
    cluster.add_node(&healthy.name, None, None);
    cluster.wait_outcome(REAPER, "the Node back", |m| m.contains("2 registered"));
    cluster.wait_passes(REAPER, 2);
    let candidates: Vec<String> = (cluster.outcomes().into_iter())
        .filter(|line| line.contains("candidate(s)"))
        .collect();
    assert!(candidates.is_empty(), "{candidates:#?}");
    assert_eq!(cluster.cloud.deletes(None), 0);
    assert!(cluster.cloud.live_ids().contains(&healthy.id));
}

/// Hole 10d, the attack: the listing names an unregistered instance twice.
/// Counted twice, 2 candidates of 3 would latch max-fraction (0.5, above 1)
/// and it would never be deleted; counted once (1 of 2) it is not, the
/// duplicate holds deletions while it lasts, and once the listing names it
/// once, it is deleted.
fn an_instance_listed_twice_counts_once(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let doomed = cluster.unregistered("doomed", "");
    cluster.cloud.list_twice(&doomed.id);
    let config = "mode = \"enforce\"\nmax-fraction = 0.5\nmin-breaker-candidates = 1";
    cluster.run("", &[REAPER], &reaper_a(config));
    let message = cluster.wait_outcome(REAPER, "the confirmed candidate held back", |m| {
        m.contains("skipped: 1 breaker")
    });
    assert!(message.contains("2 instance(s)"), "{message}");
    let duplicate = format!(
        "duplicate_listing: the instance listing names 1 instance(s) more than once ({})",
        doomed.id
    );
    assert!(message.contains(&duplicate), "{message}");
    assert!(!message.contains("max_fraction"), "{message}");
    assert_eq!(cluster.cloud.deletes(None), 0);

    cluster.cloud.clear_faults();
    cluster.wait_gone(&doomed);
    cluster.assert_deletes(&[&doomed], &[&registered]);
}

/// A manual pass of the reaper on the replica of `sandbox` (interval 1h: only
/// these passes run after the first): what it printed.
fn reconcile_at(cluster: &Cluster, sandbox: &Sandbox) -> String {
    let mut printed = String::new();
    wait_until(WITHIN, "a manual reconcile", || {
        let out = cluster.with_cloud_env(|env| sandbox.tend_with_env(&["reconcile", REAPER], env));
        printed = format!("{}{}", out.stdout, out.stderr);
        !printed.contains("429 Too Many Requests")
    });
    printed
}

/// The cloud deletion budget (1 an hour) across a real fail-over: the
/// leader's Lease requests to the API server hang from shortly before its
/// pass that would delete (the reaper's own requeue at the confirmation), so its
/// Lease cannot carry the spend; the leader is then killed (SIGKILL). A
/// spend reaches the Lease before the act, so the leader acts not at all (it
/// stops leading first), and the replica taking over deletes one instance
/// and refuses the second. Were the act first, the leader's deletion would
/// be lost to its successor, which would delete a second within the hour.
fn a_leader_killed_as_it_deletes_leaves_its_spend_to_the_next(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    // The leader keeps leading for 20s without renewing: long enough for
    // its confirming pass to run inside the hang.
    cluster.lease_timings =
        "lease-duration = \"30s\"\nrenew-deadline = \"20s\"\nretry-period = \"1s\"\n";
    cluster.registered("registered");
    let doomed = [
        cluster.unregistered("doomed-1", "p1"),
        cluster.unregistered("doomed-2", "p2"),
    ];
    let budget = "[host.budgets.instance-deletions]\noperations = [\"cloud.delete-instance\"]\nmax = 1\nper = \"1h\"\n";
    let plugins = reaper(REAPER, OWNER.0, "1h", "mode = \"enforce\"");
    cluster.run(budget, &[REAPER], &plugins);
    let (other, other_port, other_daemon) = cluster.replica("tend-1", budget, &plugins);
    let leading = |port: u16| tend_e2e::status(port)["leader"]["leading"] == true;
    wait_until(WITHIN, "a leader", || {
        leading(cluster.port) || leading(other_port)
    });
    // Daemons first: each prints its log from its sandbox when a test fails.
    let (leader, leader_port, leader_sandbox, leader_node) = match leading(cluster.port) {
        true => (
            cluster.daemon.take().unwrap(),
            cluster.port,
            &cluster.sandbox,
            "tend-0",
        ),
        false => (other_daemon, other_port, &other, "tend-1"),
    };
    let (next_port, next_sandbox) = match leader_port == cluster.port {
        true => (other_port, &other),
        false => (cluster.port, &cluster.sandbox),
    };
    let candidates = |port: u16| {
        let message = plugin_status(port, REAPER)["last"]["message"].clone();
        (message.as_str()).is_some_and(|m| m.contains("skipped: 2 unconfirmed"))
    };
    wait_for_plugin(leader_port, REAPER, "the leader's first pass", |p| {
        p["reconciles"].as_u64().unwrap_or(0) >= 1
    });
    wait_until(WITHIN, "both candidates seen", || {
        reconcile_at(&cluster, leader_sandbox);
        candidates(leader_port)
    });
    let seen = Instant::now();
    wait_until(CONFIRMED_WITHIN, "the confirmation to be near", || {
        seen.elapsed() > CONFIRM - Duration::from_secs(10)
    });

    // Only its elector's requests (they say "(NODE/PID)", its plugins'
    // "(NODE)"): the Lease cannot carry the spend, the pass runs as ever.
    cluster
        .api
        .blackhole(120.0, Some(&format!("({leader_node}/")));
    wait_until(
        Duration::from_secs(60),
        "the leader to stop leading",
        || !leading(leader_port),
    );
    let reconciles = plugin_status(leader_port, REAPER)["reconciles"].clone();
    let log = std::fs::read_to_string(leader_sandbox.path("tend.log")).unwrap_or_default();
    assert_eq!(
        cluster.cloud.deletes(None),
        0,
        "the leader acted before its spend reached the Lease ({reconciles} passes):\n{log}"
    );
    // The confirming pass ran inside the hang: it spent, waited for the
    // Lease, and was refused when leadership ended (its journal says so),
    // or was stopped with the leadership while it waited (its log says so).
    // Either is written as the leadership ends, which /status may show a
    // moment before: waited for, then the leader is killed (SIGKILL).
    let mut seen = String::new();
    wait_until(
        Duration::from_secs(30),
        "the confirming pass to end with the leadership (in the journal or the log)",
        || {
            let log = std::fs::read_to_string(leader_sandbox.path("tend.log")).unwrap_or_default();
            if log.contains("stopped a cluster-scope reconcile in flight") {
                return true;
            }
            let journal = leader_sandbox.tend(&["journal", "--plugin", REAPER]);
            seen = format!("{}{}\n{log}", journal.stdout, journal.stderr);
            journal
                .stdout
                .contains("stopped leading before its budget spend reached the Lease")
        },
    );
    drop(leader);
    assert_eq!(cluster.cloud.deletes(None), 0, "{seen}");
    cluster.api.end_blackhole();

    wait_until(
        Duration::from_secs(60),
        "the other replica to take over",
        || leading(next_port),
    );
    wait_for_plugin(next_port, REAPER, "the new leader's first pass", |p| {
        p["reconciles"].as_u64().unwrap_or(0) >= 1
    });
    wait_until(WITHIN, "both candidates seen again", || {
        reconcile_at(&cluster, next_sandbox);
        candidates(next_port)
    });
    let seen = Instant::now();
    wait_until(CONFIRMED_WITHIN, "the confirmation to be due", || {
        seen.elapsed() > CONFIRM + Duration::from_millis(500)
    });
    reconcile_at(&cluster, next_sandbox);
    let refused = reconcile_at(&cluster, next_sandbox);
    assert!(
        refused.contains("deletions stopped by the host budget"),
        "{refused}"
    );
    let live = cluster.cloud.live_ids();
    let gone = doomed.iter().filter(|d| !live.contains(&d.id)).count();
    assert_eq!(
        (cluster.cloud.deletes(None), gone),
        (1, 1),
        "one deletion in the hour"
    );
}

/// One NotReady Node of three, and three instances that never registered:
/// were those unhealthy Nodes, 4 of 6 would open the NotReady breaker; they
/// are not, and go. Two of three NotReady: a new candidate is held, and the
/// outcome says why; Ready again (the breaker does not latch), it goes.
fn not_ready_nodes_hold_deletions_but_unregistered_instances_never_count(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered: Vec<Seeded> = (0..3)
        .map(|i| cluster.registered(&format!("node-{i}")))
        .collect();
    cluster.set_ready("node-0", false);
    let doomed: Vec<Seeded> = (0..3)
        .map(|i| cluster.unregistered(&format!("doomed-{i}"), &format!("p{i}")))
        .collect();
    let config = "mode = \"enforce\"\nmax-deletions-per-pass = 3";
    cluster.run("", &[REAPER], &reaper_a(config));
    for instance in &doomed {
        cluster.wait_gone(instance);
    }

    cluster.set_ready("node-1", false);
    let held = cluster.unregistered("held", "p9");
    let message = cluster.wait_outcome(REAPER, "the NotReady breaker holding a candidate", |m| {
        m.contains("skipped: 1 breaker")
    });
    assert!(
        message.contains(
            "breakers open: not_ready: 2 of 3 Node(s) are NotReady, over max-not-ready = 0.5"
        ),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "held: {} (registration_timeout: breaker not_ready is open)",
            held.id
        )),
        "{message}"
    );
    cluster.wait_passes(REAPER, 2);
    assert_eq!(
        cluster.cloud.deletes(Some(&held.id)),
        0,
        "deleted under the breaker"
    );

    cluster.set_ready("node-1", true);
    cluster.wait_gone(&held);
    let mut deleted: Vec<&Seeded> = doomed.iter().collect();
    deleted.push(&held);
    cluster.assert_deletes(&deleted, &registered.iter().collect::<Vec<_>>());
}

/// A pool whose three launches never registered latches the churn guard
/// (window 3, 2 failures): nothing in it is deleted, also after a restart of
/// tend, and also once the operator's fix makes new launches register. Only
/// a new `breaker-reset`, through a config reload of the running daemon,
/// clears it; then the pool's old failures go.
fn the_churn_guard_latches_across_a_restart_until_breaker_reset_is_reloaded(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let bad: Vec<Seeded> = (0..3)
        .map(|i| cluster.unregistered(&format!("bad-{i}"), "bad"))
        .collect();
    let config = |reset: &str| {
        reaper_a(&format!(
            "mode = \"enforce\"\nchurn-window = 3\nchurn-min-failures = 2\nmax-deletions-per-pass = 3\nbreaker-reset = \"{reset}\""
        ))
    };
    cluster.run("", &[REAPER], &config("first"));
    let latched = |m: &str| {
        m.contains("churn: 3 of the 3 most recent launches in pool bad never registered (latched; change breaker-reset to clear)")
    };
    cluster.wait_outcome(REAPER, "the churn guard latched", latched);

    cluster.stop();
    cluster.restart();
    let message =
        cluster.wait_outcome(REAPER, "the latch holding every confirmed candidate", |m| {
            latched(m) && m.contains("skipped: 3 breaker")
        });
    assert!(message.contains("breaker churn is open"), "{message}");
    // The fix: two new launches in the pool register. The latch stays.
    let fixed: Vec<Seeded> = (0..2)
        .map(|i| {
            let name = format!("good-{i}");
            let instance = cluster.cloud.add_instance(&name, &owned_in("bad"));
            cluster.add_node(&name, None, None);
            instance
        })
        .collect();
    cluster.wait_passes(REAPER, 3);
    let message = cluster.wait_passes(REAPER, 1);
    assert!(latched(&message), "{message}");
    assert_eq!(cluster.cloud.deletes(None), 0, "deleted under the latch");

    cluster.configure("", &config("fixed"));
    for instance in &bad {
        cluster.wait_gone(instance);
    }
    let mut kept: Vec<&Seeded> = fixed.iter().collect();
    kept.push(&registered);
    cluster.assert_deletes(&bad.iter().collect::<Vec<_>>(), &kept);
}

/// What the config says, end to end: an instance with the `protect-tag` is
/// never deleted (and named as held); `min-breaker-candidates = 3` keeps
/// the max-fraction breaker (0.3) shut for fewer candidates than that;
/// OpenStack: with `delete-errored = "all"`, an instance that was once a
/// Node and is now in ERROR is deleted too.
fn protected_errored_and_few_candidates_as_configured(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let registered = cluster.registered("registered");
    let mut doomed: Vec<Seeded> = (0..2)
        .map(|i| cluster.unregistered(&format!("doomed-{i}"), &format!("p{i}")))
        .collect();
    // Nova metadata keys take no '/': one key for both providers.
    let protected = (cluster.cloud).add_instance("protected", &[OWNER, ("tend-protect", "yes")]);
    let once_a_node = (provider == Provider::OpenStack).then(|| cluster.registered("once-a-node"));
    let config = "mode = \"enforce\"\nmax-deletions-per-pass = 5\nmax-fraction = 0.3\nmin-breaker-candidates = 3\nprotect-tag = \"tend-protect\"\ndelete-errored = \"all\"";
    cluster.run("", &[REAPER], &reaper_a(config));
    if let Some(instance) = once_a_node {
        // Matched once (remembered), then in ERROR with its Node gone.
        cluster.wait_passes(REAPER, 1);
        cluster.cloud.set_errored(&instance.id);
        cluster.delete_node(&instance.name);
        doomed.push(instance);
    }
    for instance in &doomed {
        cluster.wait_gone(instance);
    }
    let message = cluster.wait_passes(REAPER, 2);
    assert!(
        message.contains(&format!(
            "held: {} (registration_timeout: protected by its protect tag)",
            protected.id
        )),
        "{message}"
    );
    assert!(!message.contains("max_fraction"), "{message}");
    cluster.assert_deletes(
        &doomed.iter().collect::<Vec<_>>(),
        &[&registered, &protected],
    );
}

/// A Node asking to be replaced (node-remediator's last step: the
/// annotation tend.dev/replace-requested) loses its instance, named by its
/// providerID, once cordoned and confirmed a pass later; one still
/// schedulable keeps its instance and the outcome says why, as does one
/// matched by its name only (no providerID: the request names no instance);
/// without `replace-requests` nothing is done for any of them.
fn a_replace_request_deletes_the_instance_of_a_cordoned_node_only(provider: Provider) {
    let mut cluster = Cluster::start(provider);
    let asking = |name: &str, cordoned: bool| {
        let patch = json!({"metadata": {"annotations": {"tend.dev/replace-requested": "true"}},
            "spec": {"unschedulable": cordoned}});
        cluster
            .api
            .merge_patch(&format!("/api/v1/nodes/{name}"), &patch);
    };
    let seeded = |name: &str| {
        let instance = cluster.cloud.add_instance(name, &owned_in(""));
        let provider_id = &instance.provider_ids[0];
        // Its provider ID and its address: both name the instance.
        cluster.add_node(
            &format!("{name}-node"),
            Some(provider_id),
            Some(&instance.private_ip),
        );
        instance
    };
    let drained = seeded("drained");
    let schedulable = seeded("schedulable");
    let healthy = seeded("healthy");
    let by_name = cluster.registered("by-name");
    asking("drained-node", true);
    asking("schedulable-node", false);
    asking("by-name", true);
    cluster.run(
        "",
        &[REAPER],
        &reaper_a("mode = \"enforce\"\nmax-deletions-per-pass = 5\nreplace-requests = true\n"),
    );
    cluster.wait_gone(&drained);
    let message = cluster.wait_outcome(REAPER, "the schedulable Node held", |m| {
        m.contains(&format!(
            "{} (replace_requested: its Node asks to be replaced but is schedulable",
            schedulable.id
        ))
    });
    assert!(!message.contains(&by_name.id), "{message}");
    cluster.wait_passes(REAPER, 2);
    cluster.assert_deletes(&[&drained], &[&schedulable, &healthy, &by_name]);
}
