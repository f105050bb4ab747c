use super::*;
use crate::capabilities::http::UrlPattern;

const GOOD: &str = r#"
[host]
plugins-dir = "plugins"
state-dir = "state"
node-name = "node-a"

[plugins.mirror-gate]
interval = "10s"
watch = ["/etc/containerd/certs.d"]
[plugins.mirror-gate.grants]
files = [{ path = "/etc/containerd/certs.d", write = true }]
http = ["http://127.0.0.1:*/*"]
[plugins.mirror-gate.limits]
memory = "32MiB"
timeout = "5s"
[plugins.mirror-gate.config]
certs-dir = "/etc/containerd/certs.d"
[[plugins.mirror-gate.config.caches]]
upstream = "docker.io"
endpoint = "http://127.0.0.1:5000"
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("/srv/tend/tend.toml"), text)
}

fn error_of(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn resolves_paths_defaults_and_plugin_config() {
    let config = parse(GOOD).unwrap();
    assert_eq!(config.host.plugins_dir, Path::new("/srv/tend/plugins"));
    assert_eq!(config.host.cache_dir, Path::new("/srv/tend/state/cache"));
    assert_eq!(config.host.precompiled_dir, None, "none unless named");
    let named = GOOD.replacen("[host]\n", "[host]\nprecompiled-dir = \"built\"\n", 1);
    let named = parse(&named).unwrap().host.precompiled_dir;
    assert_eq!(named.as_deref(), Some(Path::new("/srv/tend/built")));
    assert_eq!(config.host.node_name, "node-a");
    let plugin = &config.plugins["mirror-gate"];
    assert!(plugin.enabled);
    assert_eq!(plugin.file, Path::new("/srv/tend/plugins/mirror-gate.wasm"));
    assert_eq!(plugin.interval, Some(Duration::from_secs(10)));
    assert_eq!(plugin.limits.memory, ByteSize(32 << 20));
    assert_eq!(plugin.limits.timeout, Duration::from_secs(5));
    assert!(plugin.grants.files[0].write);
    let json: serde_json::Value = serde_json::from_str(&plugin.config_json).unwrap();
    assert_eq!(json["caches"][0]["upstream"], "docker.io");
}

#[test]
fn a_bare_file_name_resolves_against_the_working_directory() {
    let config = Config::parse(Path::new("tend.toml"), GOOD).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(config.host.plugins_dir, cwd.join("plugins"));
    assert_eq!(config.host.cache_dir, cwd.join("state/cache"));
}

#[test]
fn limits_default_to_64mib_and_30s() {
    let config = parse("[host]\nplugins-dir='p'\nstate-dir='s'\n[plugins.a]\n").unwrap();
    assert_eq!(config.plugins["a"].limits, Limits::default());
    assert_eq!(config.plugins["a"].limits.memory, ByteSize(64 << 20));
    assert_eq!(config.plugins["a"].config_json, "{}");
}

#[test]
fn each_capabilitys_limits_go_to_its_own_type_and_the_rest_are_the_plugins() {
    let text = "[host]\nplugins-dir='p'\nstate-dir='s'\n[plugins.a.limits]\n\
        memory = '8MiB'\nlog-lines = 7\nlog-bytes-per-minute = '1KiB'\nstate-keys = 3\n\
        kube-qps = 9\nkube-cache-bytes = '1MiB'\ncloud-burst = 4\n";
    let plugin = &parse(text).unwrap().plugins["a"];
    let limits = plugin.limits;
    assert_eq!(limits.memory, ByteSize(8 << 20));
    let own = plugin.capability_limits;
    assert_eq!(
        (own.log.lines, own.log.bytes_per_minute),
        (7, ByteSize(1024))
    );
    assert_eq!((own.state.keys, own.kube.qps, own.cloud.burst), (3, 9, 4));
    assert_eq!(own.kube.cache_bytes, ByteSize(1 << 20));
    // What was not written keeps its default.
    assert_eq!(
        own.kube.burst,
        crate::capabilities::kube::KubeLimits::default().burst
    );
    assert_eq!(limits.timeout, Limits::default().timeout);
}

#[test]
fn a_wrong_limit_names_its_line_and_what_its_owner_expects() {
    let with = |line: &str| {
        error_of(&format!(
            "[host]\nplugins-dir='p'\nstate-dir='s'\n[plugins.a.limits]\nmemory = '8MiB'\n{line}\n"
        ))
    };
    let err = with("kube-qpz = 1");
    assert!(err.starts_with("/srv/tend/tend.toml:6:"), "{err}");
    assert!(
        err.contains("unknown field `kube-qpz`, expected one of `kube-qps`, `kube-burst`, `kube-caches`, `kube-cache-bytes`"),
        "{err}"
    );
    let err = with("cloud-qps = 'fast'");
    assert!(err.starts_with("/srv/tend/tend.toml:6:"), "{err}");
    assert!(err.contains("u32"), "{err}");
    // A capability without limits of its own has no such key.
    let err = with("files-read = 1");
    assert!(
        err.contains("unknown field `files-read`, there are no fields"),
        "{err}"
    );
    // An unknown key of the plugin's own says where a capability's would go.
    let err = with("qps = 1");
    assert!(err.starts_with("/srv/tend/tend.toml:6:"), "{err}");
    assert!(
        err.contains("unknown field `qps`, expected one of `memory`"),
        "{err}"
    );
    assert!(err.contains("named after it (`kube-qps`"), "{err}");
}

#[test]
fn unknown_key_is_an_error_with_line_and_column() {
    let text = GOOD.replace("interval = \"10s\"", "intervall = \"10s\"");
    let err = error_of(&text);
    assert!(
        err.starts_with("/srv/tend/tend.toml:8:1: unknown field `intervall`"),
        "{err}"
    );
    assert!(err.contains("expected one of"), "{err}");
}

#[test]
fn bad_values_point_at_their_own_line() {
    let err = error_of(&GOOD.replace("\"10s\"", "\"soon\""));
    assert!(
        err.starts_with("/srv/tend/tend.toml:8:12: invalid duration \"soon\""),
        "{err}"
    );
    let err = error_of(&GOOD.replace("\"32MiB\"", "\"lots\""));
    assert!(
        err.starts_with("/srv/tend/tend.toml:14:10: invalid size \"lots\""),
        "{err}"
    );
    let err = error_of(&GOOD.replace("http://127.0.0.1:*/*", "127.0.0.1"));
    assert!(
        err.contains(":12:") && err.contains("expected scheme://host"),
        "{err}"
    );
    let err = error_of(&GOOD.replace(
        "files = [{ path = \"/etc/containerd/certs.d\"",
        "files = [{ path = \"etc/containerd\"",
    ));
    assert!(
        err.contains(":11:") && err.contains("must be absolute"),
        "{err}"
    );
}

#[test]
fn plugin_names_and_watch_paths_are_checked() {
    let err = error_of(&GOOD.replace("[plugins.mirror-gate]", "[plugins.Mirror_Gate]"));
    assert!(
        err.contains(":7:") && err.contains("invalid plugin name"),
        "{err}"
    );
    let err = error_of(&GOOD.replace(
        "watch = [\"/etc/containerd/certs.d\"]",
        "watch = [\"/var\"]",
    ));
    assert!(
        err.contains(":9:") && err.contains("outside every files grant"),
        "{err}"
    );
}

#[test]
fn missing_host_section_says_so() {
    let err = error_of("[plugins.a]\n");
    assert!(err.contains("missing field `host`"), "{err}");
}

#[test]
fn url_patterns_parse_into_parts() {
    let p = UrlPattern::parse("http://127.0.0.1:*/*").unwrap();
    assert_eq!(
        (p.host.as_str(), p.port, p.path.as_str()),
        ("127.0.0.1", None, "/*")
    );
    let p = UrlPattern::parse("https://Registry.example.com").unwrap();
    assert_eq!(
        (p.host.as_str(), p.port, p.path.as_str()),
        ("registry.example.com", Some(443), "/*")
    );
    assert!(UrlPattern::parse("ftp://x/").is_err());
    assert!(UrlPattern::parse("http://user@x/").is_err());
    assert!(UrlPattern::parse("http://x:http/").is_err());
}

#[test]
fn listen_and_cache_size_parse_and_bad_addresses_are_located() {
    let text = "[host]\nplugins-dir = 'p'\nstate-dir = 's'\nlisten = '127.0.0.1:9464'\ncache-max-size = '256MiB'\n";
    let config = parse(text).unwrap();
    assert_eq!(
        config.host.listen,
        Some(Listen::Addr("127.0.0.1:9464".parse().unwrap()))
    );
    assert_eq!(config.host.cache_max_size, ByteSize(256 << 20));
    assert_eq!(
        parse("[host]\nplugins-dir = 'p'\nstate-dir = 's'\n")
            .unwrap()
            .host
            .listen,
        None
    );
    let err = error_of("[host]\nplugins-dir = 'p'\nstate-dir = 's'\nlisten = 'localhost'\n");
    assert!(
        err.starts_with("/srv/tend/tend.toml:4:10: invalid socket address"),
        "{err}"
    );
    let err = error_of("[host]\nplugins-dir = 'p'\nstate-dir = 's'\nlisten = '$POD_IP'\n");
    assert!(
        err.starts_with("/srv/tend/tend.toml:4:10: \"$POD_IP\": expected \"$VAR:PORT\""),
        "{err}"
    );
}

#[test]
fn node_name_is_the_configured_one_else_node_name_from_the_environment_else_the_hostname() {
    let host = || "host-a".to_string();
    assert_eq!(
        node_name(Some("set".into()), Some("env".into()), host),
        "set"
    );
    assert_eq!(node_name(None, Some("node-7".into()), host), "node-7");
    assert_eq!(node_name(None, Some(" ".into()), host), "host-a");
    assert_eq!(node_name(None, None, host), "host-a");
}

const HOST: &str = "[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\n";

#[test]
fn budgets_are_parsed_with_their_rules() {
    let text = format!(
        "{HOST}[host.budgets.file-removals]\noperations = [\"files.remove\", \"files.write\"]\nmax = 20\nper = \"10m\"\nmin-interval-per-target = \"30s\"\n[host.budgets.posts]\noperations = [\"http.send\"]\nmax = 1\nper = \"1h\"\n"
    );
    let config = parse(&text).unwrap();
    let rules = &config.host.budgets;
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].name, "file-removals");
    assert_eq!(rules[0].operations, ["files.remove", "files.write"]);
    assert_eq!((rules[0].max, rules[0].per), (20, Duration::from_secs(600)));
    assert_eq!(rules[0].min_interval_per_target, Duration::from_secs(30));
    assert_eq!(rules[1].min_interval_per_target, Duration::ZERO);
}

#[test]
fn a_budget_naming_an_unknown_or_reading_operation_says_what_exists() {
    let text =
        format!("{HOST}[host.budgets.x]\noperations = [\"files.read\"]\nmax = 1\nper = \"1m\"\n");
    let err = error_of(&text);
    assert!(err.starts_with("/srv/tend/tend.toml:5:15: unknown operation \"files.read\": a budget can name files.write, files.remove, http.send"), "{err}");
    let zero =
        format!("{HOST}[host.budgets.x]\noperations = [\"files.remove\"]\nmax = 0\nper = \"1m\"\n");
    assert!(
        error_of(&zero).contains(":6:7: max must be at least 1"),
        "{}",
        error_of(&zero)
    );
    let missing = format!("{HOST}[host.budgets.x]\noperations = [\"files.remove\"]\nmax = 1\n");
    assert!(
        error_of(&missing).contains("missing field `per`"),
        "{}",
        error_of(&missing)
    );
}

#[test]
fn capability_settings_and_grants_are_checked_per_capability() {
    let settings = format!("{HOST}[host.files]\nroot = \"/\"\n");
    let err = error_of(&settings);
    assert!(
        err.contains(":4:1: this capability takes no [host] settings"),
        "{err}"
    );
    let grants = format!("{HOST}[plugins.a.grants]\nstate = true\n");
    let err = error_of(&grants);
    assert!(
        err.contains("this capability is always granted to every plugin: remove this key"),
        "{err}"
    );
    let unknown = format!("{HOST}[plugins.a.grants]\ngpu = []\n");
    let err = error_of(&unknown);
    assert!(
        err.contains(
            "unknown field `gpu`, expected one of `log`, `state`, `files`, `http`, `systemd`, `cri`, `metrics`, `kube`, `cloud`"
        ),
        "{err}"
    );
}

#[test]
fn cluster_scope_needs_a_lease_that_lapses_after_its_holder_gives_up() {
    let cluster = format!("{HOST}[plugins.a]\nscope = \"cluster\"\n");
    let err = error_of(&cluster);
    assert!(
        err.contains("add [host.leader-election] with namespace and name"),
        "{err}"
    );
    let election = |durations: &str| {
        HOST.replace("[host]\n", &format!("[host.leader-election]\nnamespace = \"tend-system\"\nname = \"tend\"\n{durations}\n[host]\n"))
    };
    let ok = parse(&format!(
        "{}[plugins.a]\nscope = \"cluster\"\n",
        election("")
    ))
    .unwrap();
    assert_eq!(ok.plugins["a"].scope, crate::config::Scope::Cluster);
    assert_eq!(
        ok.host.leader_election.unwrap().renew_deadline,
        std::time::Duration::from_secs(10)
    );
    let err = error_of(&election(
        "lease-duration = \"5s\"\nrenew-deadline = \"10s\"",
    ));
    assert!(
        err.contains("retry-period < renew-deadline < lease-duration"),
        "{err}"
    );
}

#[test]
fn cloud_settings_grants_and_limits_parse_and_a_bad_provider_names_its_line() {
    let text = "[host]\nplugins-dir='p'\nstate-dir='s'\n[host.cloud]\nprovider = \"openstack\"\ncloud = \"prod\"\nqps = 4\n\
        [plugins.reaper.grants]\ncloud = { operations = [\"list-instances\", \"delete-instance\"], instances = [{ tag = \"kubernetes.io/cluster/a\", value = \"owned\" }] }\n\
        [plugins.reaper.limits]\ncloud-qps = 2\n";
    let config = parse(text).unwrap();
    let cloud = &config.host.capabilities.cloud;
    assert_eq!(
        cloud.provider,
        Some(crate::capabilities::cloud::Provider::OpenStack)
    );
    assert_eq!((cloud.qps, cloud.burst), (4, 20));
    let reaper = &config.plugins["reaper"];
    assert_eq!(
        reaper.grants.cloud.instances[0].tag,
        "kubernetes.io/cluster/a"
    );
    assert_eq!(
        (
            reaper.capability_limits.cloud.qps,
            reaper.capability_limits.cloud.burst
        ),
        (2, 10)
    );
    let err = error_of(&text.replace("\"openstack\"", "\"gce\""));
    assert!(
        err.starts_with("/srv/tend/tend.toml:5:12: unknown cloud provider \"gce\": expected \"openstack\" or \"aws\""),
        "{err}"
    );
    let err = error_of(&text.replace("qps = 4", "endpoint = \"keystone:5000\""));
    assert!(
        err.contains(":7:") && err.contains("expected an http:// or https:// URL"),
        "{err}"
    );
    let err = error_of(&text.replace("qps = 4", "regoin = \"x\""));
    assert!(err.contains(":7:1: unknown field `regoin`"), "{err}");
}

#[test]
fn oci_references_are_validated_where_they_are_written() {
    let host = "[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\n";
    let digest = format!("sha256:{}", "ab".repeat(32));
    let config = parse(&format!(
        "{host}[host.oci]\ninsecure-registries = [\"127.0.0.1:5000\"]\ndocker-config = \"auth.json\"\n\
         [plugins.a]\nfile = \"oci://127.0.0.1:5000/tend/a@{digest}\"\nverify = {{ key = \"keys/cosign.pub\" }}\n\
         [plugins.b]\nfile = \"oci://registry.example.com/tend/b:1.0\"\n"
    ))
    .unwrap();
    let a = &config.plugins["a"];
    assert_eq!(
        a.file,
        Path::new(&format!("oci://127.0.0.1:5000/tend/a@{digest}"))
    );
    let source = a.oci.as_ref().unwrap();
    assert_eq!(source.reference.digest(), Some(digest.as_str()));
    assert_eq!(
        source.key.as_deref(),
        Some(Path::new("/srv/tend/keys/cosign.pub"))
    );
    assert_eq!(config.host.oci.insecure_registries, ["127.0.0.1:5000"]);
    assert_eq!(
        config.host.oci.docker_config.as_deref(),
        Some(Path::new("/srv/tend/auth.json"))
    );
    assert!(config.plugins["b"].oci.as_ref().unwrap().key.is_none());
    assert!(
        config.plugins["b"]
            .oci
            .as_ref()
            .unwrap()
            .reference
            .digest()
            .is_none()
    );

    let e = error_of(&format!(
        "{host}[plugins.a]\nfile = \"oci://registry/Tend/a:1\"\n"
    ));
    assert!(
        e.starts_with("/srv/tend/tend.toml:5:8: invalid reference"),
        "{e}"
    );
    assert!(
        e.contains("expected oci://REGISTRY/REPOSITORY@sha256:DIGEST"),
        "{e}"
    );
    let e = error_of(&format!(
        "{host}[plugins.a]\nverify = {{ key = \"cosign.pub\" }}\n"
    ));
    assert!(
        e.starts_with("/srv/tend/tend.toml:5:10: verify checks"),
        "{e}"
    );
    // One reference, pulled once: every plugin naming it needs the same key.
    let same = format!(
        "{host}[plugins.a]\nfile = \"oci://r.example/t/x:1\"\n\
         [plugins.b]\nfile = \"oci://r.example/t/x:1\"\nverify = {{ key = \"k.pub\" }}\n"
    );
    let e = error_of(&same);
    assert!(
        e.starts_with("/srv/tend/tend.toml:8:10: plugin b names oci://r.example/t/x:1 like plugin a but with another verify"),
        "{e}"
    );
    parse(&same.replace(
        "[plugins.a]\n",
        "[plugins.a]\nverify = { key = \"k.pub\" }\n",
    ))
    .unwrap();
    let e = error_of(&format!("{host}[host.oci]\ninsecure = true\n"));
    assert!(e.contains("unknown field `insecure`"), "{e}");
}

#[test]
fn plugins_pulling_one_component_must_ask_for_one_verify_key() {
    let at = |_: Option<std::ops::Range<usize>>, message: String| ConfigError::Invalid {
        path: "tend.toml".into(),
        line: 1,
        column: 1,
        message,
    };
    let plugin: RawPlugin = toml::from_str("file = 'oci://127.0.0.1:5000/x:v1'").unwrap();
    let source = |key: Option<&str>| crate::oci::Source {
        reference: crate::oci::Reference::parse("oci://127.0.0.1:5000/x:v1").unwrap(),
        key: key.map(PathBuf::from),
    };
    let mut keys = VerifyKeys::new();
    let mut check = |name: &str, file: &str, key| {
        one_key_per_component(&mut keys, name, Path::new(file), &source(key), &plugin, &at)
    };
    check("a", "x", Some("cosign.pub")).unwrap();
    check("b", "x", Some("cosign.pub")).unwrap();
    let err = check("c", "x", None).unwrap_err().to_string();
    assert!(err.contains("plugin c names x like plugin a"), "{err}");
    // Another component may ask for another key.
    check("d", "y", None).unwrap();
}

#[test]
fn a_condition_type_has_one_owner_and_the_kubelets_are_nobodys() {
    let two = r#"
[host]
plugins-dir = "p"
state-dir = "s"
[host.conditions]
heartbeat = "1m"
[plugins.a.grants]
conditions = ["KernelDeadlock"]
[plugins.b]
enabled = false
[plugins.b.grants]
conditions = [{ condition = "KernelDeadlock", taint-on = { effect = "NoSchedule" } }]
"#;
    let error = error_of(two);
    assert!(error.contains("tend.toml:9:"), "{error}");
    assert!(error.contains("granted to both \"a\" and \"b\""), "{error}");
    let one = two.replace(
        "conditions = [{ condition = \"KernelDeadlock\"",
        "conditions = [{ condition = \"Other\"",
    );
    let config = parse(&one).unwrap();
    assert_eq!(
        config.host.capabilities.conditions.heartbeat,
        Duration::from_secs(60)
    );
    let ready = error_of(&two.replace(
        "conditions = [\"KernelDeadlock\"]",
        "conditions = [\"Ready\"]",
    ));
    assert!(
        ready.contains("tend.toml:8") && ready.contains("kubelet"),
        "{ready}"
    );
}

#[test]
fn fleet_classes_are_parsed_and_their_leases_are_tends_own() {
    let text = format!(
        "{HOST}[host.fleet]\nnamespace = \"tend-system\"\nkured = \"kube-system/kured\"\n[host.fleet.classes.runtime-restart]\noperations = [\"systemd.restart\"]\nshare = 0.05\nrate = {{ max = 3, per = \"10m\" }}\nwindows = [{{ cron = \"0 2 * * 1-5\", duration = \"3h\", timezone = \"Europe/Berlin\" }}]\nexclude = [\"2026-12-24\"]\n[host.fleet.classes.runtime-restart.settle]\nready-for = \"5m\"\nconditions = [\"KernelDeadlock\"]\n"
    );
    let config = parse(&text).unwrap();
    let fleet = config.host.fleet.as_ref().unwrap();
    assert_eq!(fleet.namespace, "tend-system");
    assert_eq!(fleet.liveness, Duration::from_secs(120));
    assert_eq!(fleet.kured, Some(("kube-system".into(), "kured".into())));
    let class = &fleet.classes[0].rule;
    assert_eq!((class.share, class.min), (0.05, 1));
    assert_eq!(class.rate, Some((3, Duration::from_secs(600))));
    assert_eq!(class.ready_for, Duration::from_secs(300));
    assert!(!fleet.classes[0].windows.always());
    // The kube capability refuses plugin writes to the fleet's Leases.
    assert_eq!(
        config.host.capabilities.kube.fleet_namespace.as_deref(),
        Some("tend-system")
    );
}

#[test]
fn fleet_errors_name_the_line_and_what_is_expected() {
    let class = |body: &str| {
        format!(
            "{HOST}[host.fleet]\nnamespace = \"tend-system\"\n[host.fleet.classes.reboot]\n{body}"
        )
    };
    let twice = format!(
        "{HOST}[host.fleet]\nnamespace = \"tend-system\"\n[host.fleet.classes.a]\noperations = [\"systemd.restart\"]\nshare = 0.1\n[host.fleet.classes.b]\noperations = [\"systemd.restart\"]\nshare = 0.1\n"
    );
    for (text, expected) in [
        (
            class("operations = [\"files.read\"]\nshare = 0.1\n"),
            ":7:15: [host.fleet]: unknown operation \"files.read\": a class can name",
        ),
        (
            class("operations = [\"systemd.restart\"]\nshare = 5\n"),
            ":8:9: [host.fleet]: share 5: expected a fraction of the nodes from 0 to 1",
        ),
        (
            twice,
            ":10:15: [host.fleet]: operation \"systemd.restart\" is in classes \"a\" and \"b\"",
        ),
        (
            class("operations = [\"kube.cordon\"]\nshare = 0.1\n"),
            ":6:21: [host.fleet]: class \"reboot\" names one of kube.cordon and kube.evict: a drain does both, so name both",
        ),
        (
            class(
                "operations = [\"systemd.restart\"]\nshare = 0.1\nwindows = [{ cron = \"0 25 * * *\", duration = \"1h\" }]\n",
            ),
            "[host.fleet]: class \"reboot\": window 1: cron \"0 25 * * *\": hour 25 is out of range",
        ),
        (
            class("operations = [\"systemd.restart\"]\nshare = 0.1\nsettle = { alerts = [\"NodeDown\"] }\n"),
            "[host.fleet]: class \"reboot\": settle alerts need [host.fleet] prometheus = ",
        ),
        (
            class("operations = [\"systemd.restart\"]\nshare = 0.1\nsettle = { alerts = [\"a b\"] }\n")
                .replace("[host.fleet]\n", "[host.fleet]\nprometheus = \"http://p:9090\"\n"),
            "settle alert \"a b\": expected an alert's name",
        ),
        (
            class("operations = [\"systemd.restart\"]\nshare = 0.1\n")
                .replace("[host.fleet]\n", "[host.fleet]\nprometheus = \"http://user:pw@p:9090\"\n"),
            ":5:14: [host.fleet]: prometheus \"http://user:pw@p:9090\": expected the http(s) URL of a Prometheus, with no credentials",
        ),
    ] {
        let err = error_of(&text);
        assert!(err.contains(expected), "{err}");
    }
}

#[test]
fn a_rollout_section_takes_defaults_and_its_errors_name_the_line() {
    let fleet = |body: &str| {
        format!(
            "{HOST}[host.fleet]\nnamespace = \"tend-system\"\n[host.fleet.rollout]\n{body}{ELECTION}"
        )
    };
    let config = parse(&fleet("")).unwrap();
    let rollout = config.host.fleet.unwrap().rollout.unwrap();
    assert_eq!(rollout.steps, crate::fleet::cohort::default_steps());
    assert_eq!(rollout.rules, crate::fleet::verdict::Rules::default());
    let config = parse(&fleet(
        "steps = [\"1\", \"3\", \"50%\", \"100%\"]\nbake = \"2m\"\npatience = \"5m\"\nmargin = 0.1\nmin-runs = 4\n",
    ))
    .unwrap();
    let rollout = config.host.fleet.unwrap().rollout.unwrap();
    assert_eq!(rollout.steps.len(), 4);
    assert_eq!(
        (
            rollout.rules.bake,
            rollout.rules.margin,
            rollout.rules.min_runs
        ),
        (Duration::from_secs(120), 0.1, 4)
    );
    for (body, expected) in [
        (
            "steps = [\"1\", \"0%\"]\n",
            ":7:9: [host.fleet]: a step is a number of nodes",
        ),
        (
            "steps = [\"10%\", \"2%\"]\n",
            ":7:9: [host.fleet]: expected 1 to 20 steps that widen",
        ),
        ("steps = [\"10%\", \"1\"]\n", "steps that widen"),
        ("steps = []\n", "steps that widen"),
        (
            "margin = 1.5\n",
            ":7:10: [host.fleet]: margin 1.5: expected a fraction of runs",
        ),
        (
            "bake = \"1h\"\npatience = \"10m\"\n",
            "a patience no shorter than the bake",
        ),
        ("canary = 1\n", "unknown field `canary`"),
    ] {
        let err = error_of(&fleet(body));
        assert!(err.contains(expected), "{body}: {err}");
    }
    let cluster = format!(
        "{}[plugins.c]\nfile = \"c.wasm\"\nscope = \"cluster\"\n",
        fleet("")
    );
    assert!(
        error_of(&cluster).contains("run cluster-scope plugins in a tend of their own"),
        "{}",
        error_of(&cluster)
    );
    let alone = fleet("").replace(ELECTION, "");
    assert!(
        error_of(&alone).contains(":6:1: [host.fleet.rollout] is judged by the cluster's leader: add [host.leader-election]"),
        "{}",
        error_of(&alone)
    );
}

const ELECTION: &str =
    "[host.leader-election]\nnamespace = \"tend-system\"\nname = \"tend-leader\"\n";
