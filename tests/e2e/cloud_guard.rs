//! secgroup-guard, and the `cloud` capability under a hostile plugin, end to
//! end for both providers: the real `tend` (`tend reconcile` / `tend plan`),
//! the real secgroup-guard.wasm and chaos.wasm (its `cloud-calls` mode), the
//! OpenStack fake and moto behind the logging proxy. Each test body is written
//! once against [`Cloud`] and run for each provider (the `both!` modules at the
//! end). What a test says did not happen is read at the peer (its request log,
//! its state) after the reconcile's outcome came back.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Instant;
use tend_e2e::cloud::{CloudPeer, ListingFault, Provider};
use tend_e2e::peers::aws::AwsPeer;
use tend_e2e::{KubeApi, Kubectl, Sandbox, wait_until};

const OWNER_TAG: &str = "kubernetes.io/cluster/e2e";
const POD_V4: &str = "10.244.0.0/16";
const POD_V6: &str = "fd00:10:244::/56";

/// The shared harness's peer, with what these tests also need of it:
/// security groups and their rules, memberships, the request log.
struct Cloud(CloudPeer);

impl std::ops::Deref for Cloud {
    type Target = CloudPeer;
    fn deref(&self) -> &CloudPeer {
        &self.0
    }
}

/// An ingress rule as a test compares it: protocol ("tcp", "udp", "icmp",
/// "icmpv6", "any"), ports (None: all), CIDR.
type SeenRule = (String, Option<(i64, i64)>, String);

fn rule(protocol: &str, ports: Option<(i64, i64)>, cidr: &str) -> SeenRule {
    (protocol.to_string(), ports, cidr.to_string())
}

impl Cloud {
    fn start(provider: Provider) -> Cloud {
        Cloud(CloudPeer::start(provider))
    }

    /// A group named `name` holding these ingress rules (tcp over `ports`).
    fn add_group(&self, name: &str, tcp_rules: &[((i64, i64), &str)]) -> String {
        match &self.0 {
            CloudPeer::OpenStack(fake) => {
                let rules: Vec<Value> = tcp_rules
                    .iter()
                    .map(|((min, max), cidr)| {
                        json!({"direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
                               "port_range_min": min, "port_range_max": max,
                               "remote_ip_prefix": cidr})
                    })
                    .collect();
                fake.add_group(&json!({"name": name, "rules": rules}))
            }
            CloudPeer::Aws(aws) => {
                let id = aws.create_security_group(name);
                self.authorize_tcp(&id, tcp_rules);
                id
            }
        }
    }

    /// A second group named `name` where the provider allows one: AWS names
    /// are unique per VPC, so it goes into a new VPC there.
    fn add_group_elsewhere(&self, name: &str) -> String {
        match &self.0 {
            CloudPeer::OpenStack(_) => self.add_group(name, &[]),
            CloudPeer::Aws(aws) => {
                let vpc = aws.ec2(&["call", "create_vpc", r#"{"CidrBlock": "10.9.0.0/16"}"#]);
                let args = json!({"GroupName": name, "Description": "twin",
                                  "VpcId": vpc["Vpc"]["VpcId"]});
                aws.ec2(&["call", "create_security_group", &args.to_string()])["GroupId"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        }
    }

    fn authorize_tcp(&self, group: &str, tcp_rules: &[((i64, i64), &str)]) {
        let CloudPeer::Aws(aws) = &self.0 else {
            unreachable!("AWS only")
        };
        for ((min, max), cidr) in tcp_rules {
            let args = json!({"GroupId": group, "IpPermissions": [{"IpProtocol": "tcp",
                "FromPort": min, "ToPort": max, "IpRanges": [{"CidrIp": cidr}]}]});
            aws.ec2(&[
                "call",
                "authorize_security_group_ingress",
                &args.to_string(),
            ]);
        }
    }

    /// A running instance tagged `tag` = `value`, member of `groups`.
    fn add_instance_in(&self, name: &str, (tag, value): (&str, &str), groups: &[&str]) -> String {
        match &self.0 {
            CloudPeer::OpenStack(fake) => fake.add_server(&json!({
                "name": name, "metadata": {tag: value}, "security_groups": groups})),
            CloudPeer::Aws(aws) => {
                let tags = [format!("{tag}={value}"), format!("Name={name}")];
                let mut args = vec!["run-instances", "--count", "1"];
                for t in &tags {
                    args.extend(["--tag", t]);
                }
                for g in groups {
                    args.extend(["--group", g]);
                }
                aws.ec2(&args)[0].as_str().unwrap().to_string()
            }
        }
    }

    fn delete_group(&self, group: &str) {
        match &self.0 {
            CloudPeer::OpenStack(fake) => {
                let path = format!("/network/v2.0/security-groups/{group}");
                let (status, body) = fake.call("DELETE", &path, Some(&fake.token()), None);
                assert_eq!(status, 204, "DELETE {path}: {body}");
            }
            CloudPeer::Aws(aws) => {
                let args = json!({"GroupId": group}).to_string();
                aws.ec2(&["call", "delete_security_group", &args]);
            }
        }
    }

    /// The groups `instance` is in, as the provider has them: those every one
    /// of its interfaces is in (OpenStack: its ports; AWS: its ENIs, as
    /// DescribeNetworkInterfaces has them).
    fn groups_of(&self, instance: &str) -> BTreeSet<String> {
        let interfaces: Vec<BTreeSet<String>> = match &self.0 {
            CloudPeer::OpenStack(fake) => fake.state()["ports"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["device_id"] == instance)
                .map(|p| {
                    let groups = p["security_groups"].as_array().unwrap().iter();
                    groups.map(|g| g.as_str().unwrap().to_string()).collect()
                })
                .collect(),
            CloudPeer::Aws(aws) => aws
                .interfaces(instance)
                .into_iter()
                .map(|(_, groups)| groups)
                .collect(),
        };
        let (first, rest) = interfaces
            .split_first()
            .unwrap_or_else(|| panic!("instance {instance} has no interface at the peer"));
        first
            .iter()
            .filter(|g| rest.iter().all(|other| other.contains(*g)))
            .cloned()
            .collect()
    }

    /// The ingress rules of `group`, full port ranges as None.
    fn ingress_rules(&self, group: &str) -> BTreeSet<SeenRule> {
        let full = |protocol: &str, ports: Option<(i64, i64)>| match (protocol, ports) {
            ("tcp" | "udp", Some((0 | 1, 65535))) | ("icmp" | "icmpv6", Some((-1, -1))) => None,
            _ => ports,
        };
        match &self.0 {
            CloudPeer::OpenStack(fake) => {
                let state = fake.state();
                let group = state["security_groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|g| g["id"] == group)
                    .unwrap_or_else(|| panic!("no group {group} in the fake"))
                    .clone();
                group["security_group_rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["direction"] == "ingress")
                    .map(|r| {
                        let protocol = match r["protocol"].as_str() {
                            None => "any",
                            Some("ipv6-icmp") => "icmpv6",
                            Some(p) => p,
                        };
                        let ports = r["port_range_min"]
                            .as_i64()
                            .zip(r["port_range_max"].as_i64());
                        let cidr = r["remote_ip_prefix"].as_str().unwrap_or_default();
                        rule(protocol, full(protocol, ports), cidr)
                    })
                    .collect()
            }
            CloudPeer::Aws(aws) => {
                let args = json!({"GroupIds": [group]}).to_string();
                let groups = aws.ec2(&["call", "describe_security_groups", &args]);
                let mut rules = BTreeSet::new();
                for p in groups["SecurityGroups"][0]["IpPermissions"]
                    .as_array()
                    .unwrap()
                {
                    let protocol = match p["IpProtocol"].as_str().unwrap() {
                        "-1" => "any",
                        "58" => "icmpv6",
                        other => other,
                    };
                    let ports = p["FromPort"].as_i64().zip(p["ToPort"].as_i64());
                    let v4 = p["IpRanges"].as_array().into_iter().flatten();
                    let v6 = p["Ipv6Ranges"].as_array().into_iter().flatten();
                    for cidr in v4.map(|r| &r["CidrIp"]).chain(v6.map(|r| &r["CidrIpv6"])) {
                        let cidr = cidr.as_str().unwrap();
                        rules.insert(rule(protocol, full(protocol, ports), cidr));
                    }
                }
                rules
            }
        }
    }

    /// Mutating requests the peer saw: rules created (either way),
    /// memberships changed.
    fn mutations(&self) -> usize {
        let (rules, memberships) = self.rule_creates_and_memberships();
        rules + memberships + self.egress_rule_creates()
    }

    /// (rules created, memberships changed) at the peer.
    fn rule_creates_and_memberships(&self) -> (usize, usize) {
        match &self.0 {
            CloudPeer::OpenStack(fake) => {
                let requests = fake.requests();
                (requests.rule_creates(), requests.port_updates(None))
            }
            CloudPeer::Aws(aws) => (
                aws.count("AuthorizeSecurityGroupIngress"),
                aws.count("ModifyNetworkInterfaceAttribute") + aws.count("ModifyInstanceAttribute"),
            ),
        }
    }

    /// Egress rules created at the peer (OpenStack counts them with the
    /// ingress ones in [`Cloud::rule_creates_and_memberships`]).
    fn egress_rule_creates(&self) -> usize {
        match &self.0 {
            CloudPeer::OpenStack(_) => 0,
            CloudPeer::Aws(aws) => aws.count("AuthorizeSecurityGroupEgress"),
        }
    }

    /// Every request the peer's log holds (Keystone's too).
    fn requests(&self) -> Vec<String> {
        match &self.0 {
            CloudPeer::OpenStack(fake) => fake
                .requests()
                .iter()
                .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
                .collect(),
            CloudPeer::Aws(aws) => aws
                .requests()
                .iter()
                .map(|r| format!("{} {:?} {}", r.method, r.action, r.params))
                .collect(),
        }
    }

    /// Requests for the compute or network API (not Keystone's tokens).
    fn api_requests(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| !r.contains("/identity/"))
            .count()
    }

    /// A well-formed group ID the provider does not have.
    fn unknown_group(&self) -> &'static str {
        match &self.0 {
            CloudPeer::OpenStack(_) => "6f1c2b1e-3d4a-4b5c-8d9e-0a1b2c3d4e5f",
            CloudPeer::Aws(_) => "sg-0123456789abcdef0",
        }
    }
}

/// `tend ARGS` with the cloud's credentials: its stdout (the report), which
/// must be a reconcile that returned an outcome.
fn tend(sandbox: &Sandbox, cloud: &Cloud, args: &[&str]) -> String {
    let env = cloud.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = sandbox.tend_with_env(args, &env);
    assert!(
        out.success,
        "tend {args:?} failed:\n{}{}",
        out.stdout, out.stderr
    );
    out.stdout
}

/// `[plugins.NAME]` running `wasm` with a cloud grant (TOML inline table
/// fields) and config lines.
fn plugin(sandbox: &Sandbox, wasm: &str, name: &str, grant: &str, config: &str) -> String {
    plugin_granted(
        sandbox,
        wasm,
        name,
        &format!("cloud = {{ {grant} }}"),
        config,
    )
}

/// [`plugin`] with the whole `[plugins.NAME.grants]` table's lines.
fn plugin_granted(sandbox: &Sandbox, wasm: &str, name: &str, grants: &str, config: &str) -> String {
    sandbox.add_plugin(wasm, name);
    format!(
        "[plugins.{name}]\n[plugins.{name}.grants]\n{grants}\n[plugins.{name}.config]\n{config}\n"
    )
}

fn owner_grant(value: &str) -> String {
    format!("instances = [{{ tag = \"{OWNER_TAG}\", value = \"{value}\" }}]")
}

fn guard_grant(groups: &[&str]) -> String {
    format!(
        "operations = [\"list-instances\", \"list-security-groups\", \"ensure-rule\", \"add-to-group\"], {}, security-groups = {groups:?}, {}",
        owner_grant("owned"),
        pod_rules_grant()
    )
}

/// Rules from the pod CIDRs, every tcp/udp port (the examples' grant).
fn pod_rules_grant() -> String {
    format!("remotes = [\"{POD_V4}\", \"{POD_V6}\"], ports = [\"1-65535\"]")
}

/// A sandbox running secgroup-guard for `group` on `cloud`, its grant
/// naming that group only.
fn guarding(cloud: &Cloud, group: &str) -> Sandbox {
    let sandbox = Sandbox::new();
    let plugins = plugin(
        &sandbox,
        "secgroup-guard",
        "secgroup-guard",
        &guard_grant(&[group]),
        &guard_config(&format!("group-id = \"{group}\"")),
    );
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    sandbox
}

fn guard_config(group: &str) -> String {
    format!(
        "owner = {{ tag = \"{OWNER_TAG}\", value = \"owned\" }}\n{group}\npod-cidrs = [\"{POD_V4}\", \"{POD_V6}\"]"
    )
}

// ---------------------------------------------------------------------------
// secgroup-guard
// ---------------------------------------------------------------------------

fn guard_adds_what_is_missing_and_a_second_pass_changes_nothing(provider: Provider) {
    let cloud = Cloud::start(provider);
    let unrelated = rule("tcp", Some((443, 443)), "192.0.2.0/24");
    let ssh = rule("tcp", Some((22, 22)), POD_V4);
    let group = cloud.add_group(
        "cluster-nodes",
        &[((22, 22), POD_V4), ((443, 443), "192.0.2.0/24")],
    );
    let legacy = cloud.add_group("legacy", &[]);
    let outside = cloud.add_instance_in("node-outside", (OWNER_TAG, "owned"), &[&legacy]);
    let member = cloud.add_instance_in("node-member", (OWNER_TAG, "owned"), &[&group]);
    let stranger = cloud.add_instance_in("not-ours", (OWNER_TAG, "shared"), &[&legacy]);
    let sandbox = guarding(&cloud, &group);
    cloud.clear_requests();

    let plan = tend(&sandbox, &cloud, &["plan", "secgroup-guard"]);
    assert!(plan.contains("would add"), "{plan}");
    assert!(
        plan.contains(&format!("would cloud.add-to-group {outside}")),
        "{plan}"
    );
    assert_eq!(cloud.mutations(), 0, "a plan: {:#?}", cloud.requests());

    let first = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(first.contains("secgroup-guard: healthy"), "{first}");
    assert!(
        cloud.groups_of(&outside).contains(&group),
        "the instance outside the group became a member: {first}"
    );
    assert!(
        cloud.groups_of(&outside).contains(&legacy),
        "and kept its other group"
    );
    assert!(cloud.groups_of(&member).contains(&group));
    assert!(
        !cloud.groups_of(&stranger).contains(&group),
        "an instance of another owner is left alone"
    );
    let rules = cloud.ingress_rules(&group);
    let wanted = [
        rule("tcp", None, POD_V4),
        rule("udp", None, POD_V4),
        rule("icmp", None, POD_V4),
        rule("tcp", None, POD_V6),
        rule("udp", None, POD_V6),
        rule("icmpv6", None, POD_V6),
    ];
    for r in wanted.iter().chain([&ssh, &unrelated]) {
        assert!(rules.contains(r), "{r:?} missing from {rules:?}\n{first}");
    }
    assert_eq!(
        cloud.rule_creates_and_memberships(),
        (6, 1),
        "six rules (full-range tcp beside tcp/22 too) and one membership: {:#?}",
        cloud.requests()
    );

    cloud.clear_requests();
    let second = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(second.contains("secgroup-guard: healthy"), "{second}");
    assert!(second.contains("no changes"), "{second}");
    assert!(cloud.api_requests() > 0, "the second pass listed");
    assert_eq!(
        cloud.mutations(),
        0,
        "the second pass mutated: {:#?}",
        cloud.requests()
    );
    assert_eq!(
        cloud.ingress_rules(&group),
        rules,
        "nothing removed, nothing added"
    );
}

fn guard_resolves_a_group_name_and_refuses_an_ambiguous_one(provider: Provider) {
    let cloud = Cloud::start(provider);
    let group = cloud.add_group("cluster-nodes", &[]);
    let twin = cloud.add_group("twins", &[]);
    let other_twin = cloud.add_group_elsewhere("twins");
    let outside = cloud
        .add_instance("node-outside", &[(OWNER_TAG, "owned")])
        .id;
    let sandbox = Sandbox::new();
    let by_name = plugin(
        &sandbox,
        "secgroup-guard",
        "secgroup-guard",
        &guard_grant(&[&group]),
        &guard_config("group-name = \"cluster-nodes\""),
    );
    let ambiguous = plugin(
        &sandbox,
        "secgroup-guard",
        "ambiguous",
        &guard_grant(&[&twin, &other_twin]),
        &guard_config("group-name = \"twins\""),
    );
    sandbox.config_with_host(&cloud.host_config(), &(by_name + &ambiguous));

    let resolved = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(
        resolved.contains(&format!("secgroup-guard: healthy: group {group}")),
        "{resolved}"
    );
    assert!(cloud.groups_of(&outside).contains(&group), "{resolved}");

    cloud.clear_requests();
    let refused = tend(&sandbox, &cloud, &["reconcile", "ambiguous"]);
    assert!(refused.contains("ambiguous: degraded"), "{refused}");
    assert!(refused.contains("set group-id"), "{refused}");
    assert!(
        refused.contains(&twin) && refused.contains(&other_twin),
        "{refused}"
    );
    assert_eq!(cloud.mutations(), 0, "{:#?}", cloud.requests());
    assert!(!cloud.groups_of(&outside).contains(&twin));
    assert!(!cloud.groups_of(&outside).contains(&other_twin));
}

/// A remembered `group-name` resolution whose group was deleted (and made
/// again under the same name) is resolved again, not reported missing forever.
fn guard_resolves_the_name_again_when_the_remembered_group_is_gone(provider: Provider) {
    let cloud = Cloud::start(provider);
    let old = cloud.add_group("cluster-nodes", &[]);
    let sandbox = Sandbox::new();
    let configure = |groups: &[&str]| {
        let plugins = plugin(
            &sandbox,
            "secgroup-guard",
            "secgroup-guard",
            &guard_grant(groups),
            &guard_config("group-name = \"cluster-nodes\""),
        );
        sandbox.config_with_host(&cloud.host_config(), &plugins);
    };
    configure(&[&old]);
    let first = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(first.contains(&format!("healthy: group {old}")), "{first}");

    cloud.delete_group(&old);
    let new = cloud.add_group("cluster-nodes", &[]);
    configure(&[&old, &new]);
    let second = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(
        second.contains(&format!("healthy: group {new}")),
        "{second}"
    );
    assert!(
        cloud
            .ingress_rules(&new)
            .contains(&rule("tcp", None, POD_V4)),
        "{second}"
    );
}

/// Without `pod-cidrs` the pod CIDRs are kubeadm's; with `egress` the
/// rules hold both ways, and the extra rules (a port range, a group) too:
/// after one pass a second finds every one of them the same.
fn guard_reads_kubeadm_and_keeps_egress_and_extra_rules(provider: Provider) {
    let cloud = Cloud::start(provider);
    let api = KubeApi::start();
    let cluster_configuration = format!(
        "apiVersion: kubeadm.k8s.io/v1beta3\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: {POD_V4},{POD_V6}\n"
    );
    let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": cluster_configuration}});
    let (code, body) = api.call(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        Some(&map),
    );
    assert_eq!(code, 201, "{body}");
    let group = cloud.add_group("cluster-nodes", &[]);
    let peers = cloud.add_group("load-balancers", &[]);
    let sandbox = Sandbox::new();
    // The extra rules are part of the grant: their CIDR, their remote group
    // and the "any" protocol named.
    let grant = guard_grant(&[&group, &peers]).replace(
        "remotes = [",
        "protocols = [\"tcp\", \"udp\", \"icmp\", \"icmpv6\", \"any\"], remotes = [\"10.0.0.0/8\", ",
    );
    let grants = format!(
        "cloud = {{ {grant} }}\nkube = [{{ resource = \"configmaps\", verbs = [\"get\"], namespaces = [\"kube-system\"], names = [\"kubeadm-config\"] }}]"
    );
    let config = format!(
        "owner = {{ tag = \"{OWNER_TAG}\", value = \"owned\" }}\ngroup-id = \"{group}\"\negress = true\n\
         extra-rules = [{{ protocol = \"tcp\", ports = \"30000-32767\", cidr = \"10.0.0.0/8\" }}, {{ protocol = \"any\", group = \"{peers}\" }}]"
    );
    let plugins = plugin_granted(
        &sandbox,
        "secgroup-guard",
        "secgroup-guard",
        &grants,
        &config,
    );
    let host = format!("{}{}", cloud.host_config(), api.host_kube(&sandbox));
    sandbox.config_with_host(&host, &plugins);
    api.grant_rbac(&sandbox);
    cloud.clear_requests();

    let first = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(
        first.contains(&format!("group {group}: 14 rule(s) wanted")),
        "{first}"
    );
    let rules = cloud.ingress_rules(&group);
    for r in [
        rule("icmpv6", None, POD_V6),
        rule("tcp", Some((30000, 32767)), "10.0.0.0/8"),
    ] {
        assert!(rules.contains(&r), "{r:?} missing from {rules:?}\n{first}");
    }
    assert_eq!(
        cloud.rule_creates_and_memberships().0 + cloud.egress_rule_creates(),
        14,
        "{:#?}",
        cloud.requests()
    );

    cloud.clear_requests();
    let second = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(second.contains("secgroup-guard: healthy"), "{second}");
    assert!(second.contains("no changes"), "{second}");
    assert_eq!(cloud.mutations(), 0, "{second}\n{:#?}", cloud.requests());
}

/// What holds secgroup-guard's kube read at a real API server is the RBAC
/// `tend rbac` renders for its grant: applied without its kubeadm-config rule,
/// the guard's read is refused 403 at the API fake (as its ServiceAccount),
/// and the pass is degraded and changes nothing at the cloud; with the rule
/// back, the same pass succeeds.
fn guard_without_its_rbac_rule_is_refused_at_the_api_server(provider: Provider) {
    let cloud = Cloud::start(provider);
    let api = KubeApi::start();
    let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": format!("networking:\n  podSubnet: {POD_V4}\n")}});
    let (code, body) = api.call(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        Some(&map),
    );
    assert_eq!(code, 201, "{body}");
    let group = cloud.add_group("cluster-nodes", &[]);
    let sandbox = Sandbox::new();
    let grants = format!(
        "cloud = {{ {} }}\nkube = [{{ resource = \"configmaps\", verbs = [\"get\"], namespaces = [\"kube-system\"], names = [\"kubeadm-config\"] }}]",
        guard_grant(&[&group])
    );
    let config =
        format!("owner = {{ tag = \"{OWNER_TAG}\", value = \"owned\" }}\ngroup-id = \"{group}\"");
    let plugins = plugin_granted(
        &sandbox,
        "secgroup-guard",
        "secgroup-guard",
        &grants,
        &config,
    );
    sandbox.config_with_host(
        &format!("{}{}", cloud.host_config(), api.host_kube(&sandbox)),
        &plugins,
    );
    let user = api.grant_rbac(&sandbox);

    // The Role `tend rbac` made in kube-system, less its one configmaps rule.
    let kubectl = Kubectl::version("1.33", &api);
    let roles = kubectl.json(&[
        "get",
        "roles",
        "-n",
        "kube-system",
        "-l",
        "app.kubernetes.io/part-of=tend",
    ]);
    let role = &roles["items"][0];
    let index = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["resources"][0] == "configmaps")
        .unwrap_or_else(|| panic!("no configmaps rule in {roles:#}"));
    kubectl.ok(&[
        "patch",
        "role",
        role["metadata"]["name"].as_str().unwrap(),
        "-n",
        "kube-system",
        "--type",
        "json",
        "-p",
        &format!(r#"[{{"op": "remove", "path": "/rules/{index}"}}]"#),
    ]);

    cloud.clear_requests();
    let seq = api.request_seq();
    let env = cloud.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = sandbox.tend_with_env(&["reconcile", "secgroup-guard"], &env);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains(&format!(
            "secgroup-guard: degraded: changed nothing: denied: get configmaps/kubeadm-config: \
             configmaps \"kubeadm-config\" is forbidden: User \"{user}\" cannot get resource \
             \"configmaps\" in API group \"\" in the namespace \"kube-system\" (Forbidden)"
        )),
        "{said}"
    );
    let refused: Vec<Value> = api
        .requests_since(seq)
        .into_iter()
        .filter(|e| e["code"] == 403)
        .collect();
    assert!(!refused.is_empty(), "{said}");
    for e in &refused {
        assert_eq!(e["user"], user.as_str(), "{e:#}");
        assert_eq!(e["resource"], "configmaps", "{e:#}");
        assert_eq!(e["name"], "kubeadm-config", "{e:#}");
    }
    assert_eq!(cloud.mutations(), 0, "{said}\n{:#?}", cloud.requests());

    // The rule back: the same pass reads kubeadm's pod CIDR and adds the rules.
    api.grant_rbac(&sandbox);
    let again = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(again.contains("secgroup-guard: healthy"), "{again}");
    assert!(cloud.mutations() > 0, "{again}");
}

// ---------------------------------------------------------------------------
// A hostile plugin: chaos's `cloud-calls`
// ---------------------------------------------------------------------------

/// Chaos config lines making `calls` (JSON objects) in turn.
fn calls(calls: &[Value]) -> String {
    let calls: Vec<String> = calls.iter().map(toml_inline).collect();
    format!("mode = \"cloud-calls\"\ncalls = [{}]", calls.join(", "))
}

/// A JSON value as a TOML inline value (JSON's string escapes are TOML's).
fn toml_inline(value: &Value) -> String {
    match value {
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{} = {}", Value::from(k.as_str()), toml_inline(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(toml_inline).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// The result of the call `op` on `target` in a chaos report: its first line
/// is "chaos: healthy: RESULT; RESULT (N ms)".
fn result_of<'a>(report: &'a str, op: &str, target: &str) -> &'a str {
    let outcome = report.lines().next().unwrap_or_default();
    let outcome = outcome
        .rsplit_once(" (")
        .map_or(outcome, |(text, _took)| text);
    let head = format!("{op} {target}: ");
    let start = outcome
        .find(&head)
        .unwrap_or_else(|| panic!("no result of {head:?} in {report}"));
    let rest = &outcome[start + head.len()..];
    rest.split("; ").next().unwrap()
}

fn an_ungranted_operation_is_denied_naming_the_grant(provider: Provider) {
    let cloud = Cloud::start(provider);
    let instance = cloud.add_instance("node-1", &[(OWNER_TAG, "owned")]).id;
    let sandbox = Sandbox::new();
    let grant = format!("operations = [\"get-instance\"], {}", owner_grant("owned"));
    let config = calls(&[
        json!({"op": "delete-instance", "id": instance}),
        json!({"op": "get-instance", "id": instance}),
    ]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config);
    sandbox.config_with_host(&cloud.host_config(), &plugins);

    let out = tend(&sandbox, &cloud, &["reconcile", "chaos"]);
    let delete = result_of(&out, "delete-instance", &instance);
    assert!(delete.starts_with("denied"), "{out}");
    assert!(
        delete.contains("add \"delete-instance\" to operations in [plugins.chaos.grants] cloud"),
        "{out}"
    );
    assert_eq!(
        result_of(&out, "get-instance", &instance),
        "node-1",
        "{out}"
    );
    assert_eq!(cloud.deletes(None), 0, "{:#?}", cloud.requests());
    assert!(cloud.live_ids().contains(&instance));
}

fn instances_outside_the_owner_tag_are_denied(provider: Provider) {
    let cloud = Cloud::start(provider);
    let group = cloud.add_group("cluster-nodes", &[]);
    let other = cloud.add_group("other", &[]);
    let ours = cloud.add_instance_in("pool-a-1", ("pool", "a"), &[&other]);
    let theirs = cloud.add_instance_in("pool-ab-1", ("pool", "ab"), &[&other]);
    // A wildcard in a granted value is a literal: EC2 filters must not widen it.
    let starred = cloud.add_instance_in("tier-b-star", ("tier", "b*"), &[&other]);
    let widened = cloud.add_instance_in("tier-bx", ("tier", "bx"), &[&other]);
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"list-instances\", \"get-instance\", \"delete-instance\", \"add-to-group\"], instances = [{{ tag = \"pool\", value = \"a\" }}, {{ tag = \"tier\", value = \"b*\" }}], security-groups = [\"{group}\"]"
    );
    let config = calls(&[
        json!({"op": "list-instances", "tag": "pool", "value": "a"}),
        json!({"op": "get-instance", "id": theirs}),
        json!({"op": "delete-instance", "id": theirs}),
        json!({"op": "add-to-group", "id": theirs, "group": group}),
        json!({"op": "list-instances", "tag": "tier", "value": "b*"}),
        json!({"op": "get-instance", "id": widened}),
    ]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config);
    sandbox.config_with_host(&cloud.host_config(), &plugins);

    let out = tend(&sandbox, &cloud, &["reconcile", "chaos"]);
    assert_eq!(
        result_of(&out, "list-instances", "pool"),
        format!("[{ours}]"),
        "{out}"
    );
    assert_eq!(
        result_of(&out, "list-instances", "tier"),
        format!("[{starred}]"),
        "{out}"
    );
    for op in ["get-instance", "delete-instance", "add-to-group"] {
        let result = result_of(&out, op, &theirs);
        assert!(result.starts_with("denied"), "{op}: {out}");
    }
    let result = result_of(&out, "get-instance", &widened);
    assert!(result.starts_with("denied"), "{out}");
    assert_eq!(
        cloud.mutations() + cloud.deletes(None),
        0,
        "{:#?}",
        cloud.requests()
    );
    assert!(cloud.live_ids().contains(&theirs));
    assert!(!cloud.groups_of(&theirs).contains(&group));
}

fn hostile_identifiers_and_ungranted_targets_never_reach_the_peer(provider: Provider) {
    let cloud = Cloud::start(provider);
    let group = cloud.add_group("cluster-nodes", &[]);
    let ungranted = cloud.add_group("not-granted", &[]);
    let instance = cloud.add_instance("node-1", &[(OWNER_TAG, "owned")]).id;
    let uuid = "0b7c3f5e-8a9d-4e2f-9c1b-3d4e5f6a7b8c";
    let hostile_ids = [
        "i-0123456789abcdef0/../x".to_string(),
        "../servers".to_string(),
        format!("{uuid}/action"),
        format!("{uuid}?all_tenants=1"),
        "sg-1%2f".to_string(),
        format!("{uuid}#x"),
    ];
    // Batches of (call, op, target, refusal), one plugin each: an outcome
    // holds at most 4 KiB. `name` only labels a list-security-groups result.
    let mut batches: Vec<Vec<(Value, &str, String, &str)>> = Vec::new();
    for id in &hostile_ids {
        batches.push(vec![
            (
                json!({"op": "get-instance", "id": id}),
                "get-instance",
                id.clone(),
                "invalid",
            ),
            (
                json!({"op": "delete-instance", "id": id}),
                "delete-instance",
                id.clone(),
                "invalid",
            ),
            (
                json!({"op": "add-to-group", "id": id, "group": group}),
                "add-to-group",
                id.clone(),
                "invalid",
            ),
            (
                json!({"op": "ensure-rule", "group": id, "cidr": POD_V4}),
                "ensure-rule",
                id.clone(),
                "invalid",
            ),
            (
                json!({"op": "list-security-groups", "ids": [id], "name": id}),
                "list-security-groups",
                id.clone(),
                "invalid",
            ),
        ]);
    }
    let mut ungranted_targets = Vec::new();
    for target in [cloud.unknown_group().to_string(), ungranted.clone()] {
        ungranted_targets.extend([
            (
                json!({"op": "list-security-groups", "ids": [target], "name": target}),
                "list-security-groups",
                target.clone(),
                "denied",
            ),
            (
                json!({"op": "ensure-rule", "group": target, "cidr": POD_V4}),
                "ensure-rule",
                target.clone(),
                "denied",
            ),
        ]);
    }
    ungranted_targets.extend([
        (
            json!({"op": "add-to-group", "id": instance, "group": ungranted}),
            "add-to-group",
            instance.clone(),
            "denied",
        ),
        (
            json!({"op": "ensure-rule", "group": group, "cidr": "10.244.0.0/33"}),
            "ensure-rule",
            group.clone(),
            "invalid",
        ),
        (
            json!({"op": "list-instances", "tag": OWNER_TAG, "value": "shared"}),
            "list-instances",
            OWNER_TAG.to_string(),
            "denied",
        ),
    ]);
    batches.push(ungranted_targets);

    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"list-instances\", \"get-instance\", \"delete-instance\", \"list-security-groups\", \"ensure-rule\", \"add-to-group\"], {}, security-groups = [\"{group}\"]",
        owner_grant("owned")
    );
    let mut plugins = String::new();
    for (i, batch) in batches.iter().enumerate() {
        let batch_calls: Vec<Value> = batch.iter().map(|(call, ..)| call.clone()).collect();
        plugins += &plugin(
            &sandbox,
            "chaos",
            &format!("attack-{i}"),
            &grant,
            &calls(&batch_calls),
        );
    }
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    cloud.clear_requests();

    for (i, batch) in batches.iter().enumerate() {
        let out = tend(&sandbox, &cloud, &["reconcile", &format!("attack-{i}")]);
        for (call, op, target, refusal) in batch {
            let result = result_of(&out, op, target);
            assert!(result.starts_with(refusal), "{call}: {out}");
        }
    }
    assert_eq!(
        cloud.requests(),
        Vec::<String>::new(),
        "requests reached the peer"
    );
    assert!(cloud.live_ids().contains(&instance));
}

/// Issue 25, hole 2: a plugin granted one group and the pod network cannot
/// open that group wider than its grant: the whole internet, a wider network,
/// an ungranted group as the source, or ports outside its ranges are each
/// refused `denied` before the peer, and the group ends up holding only the
/// rule the grant allows.
fn rules_outside_the_grant_never_reach_the_group(provider: Provider) {
    let cloud = Cloud::start(provider);
    let group = cloud.add_group("cluster-nodes", &[]);
    let other = cloud.add_group("not-granted", &[]);
    let attacks = [
        (
            json!({"op": "ensure-rule", "group": group, "cidr": "0.0.0.0/0", "protocol": "any"}),
            "denied",
        ),
        (
            json!({"op": "ensure-rule", "group": group, "cidr": "10.0.0.0/8", "ports": "22-22"}),
            "denied",
        ),
        (
            json!({"op": "ensure-rule", "group": group, "from-group": other, "ports": "22-22"}),
            "denied",
        ),
        (
            json!({"op": "ensure-rule", "group": group, "cidr": POD_V4, "ports": "1-65535"}),
            "denied",
        ),
        // The control: what the grant allows reaches the group.
        (
            json!({"op": "ensure-rule", "group": group, "cidr": POD_V4, "ports": "22-22"}),
            "true",
        ),
    ];
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"ensure-rule\"], security-groups = [\"{group}\"], remotes = [\"{POD_V4}\"], ports = [\"22\"]"
    );
    let plugins: String = attacks
        .iter()
        .enumerate()
        .map(|(i, (call, _))| {
            plugin(
                &sandbox,
                "chaos",
                &format!("rule-{i}"),
                &grant,
                &calls(std::slice::from_ref(call)),
            )
        })
        .collect();
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    for (i, (call, expected)) in attacks.iter().enumerate() {
        let out = tend(&sandbox, &cloud, &["reconcile", &format!("rule-{i}")]);
        let result = result_of(&out, "ensure-rule", &group);
        assert!(result.starts_with(expected), "{call}: {out}");
        if *expected == "denied" {
            assert!(
                result.contains("[plugins.rule-"),
                "names the grant: {result}"
            );
        }
    }
    assert_eq!(
        cloud.ingress_rules(&group),
        std::collections::BTreeSet::from([rule("tcp", Some((22, 22)), POD_V4)]),
        "only the granted rule reached the group"
    );
    assert!(cloud.ingress_rules(&other).is_empty());
}

fn plan_names_the_instance_and_deletes_nothing(provider: Provider) {
    let cloud = Cloud::start(provider);
    let instance = cloud
        .add_instance("node-doomed", &[(OWNER_TAG, "owned")])
        .id;
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"get-instance\", \"delete-instance\"], {}",
        owner_grant("owned")
    );
    let config = calls(&[json!({"op": "delete-instance", "id": instance})]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config);
    sandbox.config_with_host(&cloud.host_config(), &plugins);

    let out = tend(&sandbox, &cloud, &["plan", "chaos"]);
    assert_eq!(result_of(&out, "delete-instance", &instance), "ok", "{out}");
    let planned = out
        .lines()
        .find(|l| {
            l.contains("delete-instance") && l.contains(&instance) && l.contains("node-doomed")
        })
        .unwrap_or_else(|| panic!("the plan names the instance: {out}"));
    assert!(planned.contains("would"), "{planned}");
    assert_eq!(cloud.deletes(None), 0, "{:#?}", cloud.requests());
    assert!(cloud.live_ids().contains(&instance));
}

fn the_plugin_request_rate_bounds_what_reaches_the_peer(provider: Provider) {
    let cloud = Cloud::start(provider);
    let instance = cloud.add_instance("node-1", &[(OWNER_TAG, "owned")]).id;
    let sandbox = Sandbox::new();
    let grant = format!("operations = [\"get-instance\"], {}", owner_grant("owned"));
    let many: Vec<Value> = (0..40)
        .map(|_| json!({"op": "get-instance", "id": instance}))
        .collect();
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &calls(&many))
        + "[plugins.chaos.limits]\ncloud-qps = 1\ncloud-burst = 2\ntimeout = \"3s\"\n";
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    cloud.clear_requests();

    let started = Instant::now();
    let out = tend(&sandbox, &cloud, &["reconcile", "chaos"]);
    let elapsed = started.elapsed().as_secs_f64();
    assert!(out.contains("timeout"), "{out}");
    assert!(out.contains("cloud-qps"), "{out}");
    let sent = cloud.api_requests();
    let bound = 2.0 + elapsed + 1.0;
    assert!(
        sent >= 2 && (sent as f64) <= bound,
        "{sent} requests in {elapsed:.1} s at cloud-qps 1, cloud-burst 2 (bound {bound:.1}): {out}"
    );
}

/// Issue 25, hole 5: a listing saw instance `moved` owned; while the plugin
/// waited on a slow read of another instance, `moved` went to another
/// cluster. The add-to-group and the delete that follow act on the owner the
/// peer reports just before them, not on the listing: both are denied and
/// nothing reaches the instance.
fn a_mutation_acts_on_the_owner_the_peer_reports_just_before_it(provider: Provider) {
    let cloud = Cloud::start(provider);
    let group = cloud.add_group("cluster-nodes", &[]);
    let moved = cloud.add_instance("node-moved", &[(OWNER_TAG, "owned")]).id;
    let slow = cloud.add_instance("node-slow", &[(OWNER_TAG, "owned")]).id;
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"list-instances\", \"get-instance\", \"add-to-group\", \"delete-instance\"], {}, security-groups = [\"{group}\"]",
        owner_grant("owned")
    );
    let config = calls(&[
        json!({"op": "list-instances", "tag": OWNER_TAG, "value": "owned"}),
        json!({"op": "get-instance", "id": slow}),
        json!({"op": "add-to-group", "id": moved, "group": group}),
        json!({"op": "delete-instance", "id": moved}),
    ]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config)
        + "[plugins.chaos.limits]\ntimeout = \"30s\"\n";
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    cloud.hold_reads_of(&slow);
    cloud.clear_requests();

    let out = std::thread::scope(|scope| {
        let reconcile = scope.spawn(|| tend(&sandbox, &cloud, &["reconcile", "chaos"]));
        // The listing is answered, the read of node-slow held: the instance
        // moves now, after the plugin saw it owned; then the read goes on.
        wait_until(
            std::time::Duration::from_secs(20),
            "the listing to be answered",
            || cloud.instance_listings() > 0,
        );
        cloud.retag(&moved, (OWNER_TAG, "another-cluster"));
        cloud.clear_faults();
        reconcile.join().unwrap()
    });
    let listed = result_of(&out, "list-instances", OWNER_TAG);
    assert!(listed.contains(&moved), "the listing saw it owned: {out}");
    assert_eq!(result_of(&out, "get-instance", &slow), "node-slow", "{out}");
    for op in ["add-to-group", "delete-instance"] {
        let result = result_of(&out, op, &moved);
        assert!(result.starts_with("denied"), "{op}: {out}");
    }
    assert_eq!(cloud.deletes(Some(&moved)), 0, "{:#?}", cloud.requests());
    assert!(cloud.live_ids().contains(&moved));
    assert!(
        !cloud.groups_of(&moved).contains(&group),
        "{:#?}",
        cloud.requests()
    );
}

// ---------------------------------------------------------------------------
// AWS: instances with several network interfaces (issue 26)
// ---------------------------------------------------------------------------

/// The AWS peer of `cloud`.
fn aws(cloud: &Cloud) -> &AwsPeer {
    let CloudPeer::Aws(aws) = &cloud.0 else {
        unreachable!("started for AWS")
    };
    aws
}

/// Each interface of `instance` at the peer: (its ID, its groups).
type Interfaces = Vec<(String, BTreeSet<String>)>;

/// The ModifyNetworkInterfaceAttribute requests the peer answered: the
/// interface each named and the groups it set.
fn interface_writes(aws: &AwsPeer) -> Vec<(String, BTreeSet<String>)> {
    aws.requests()
        .into_iter()
        .filter(|r| r.action.as_deref() == Some("ModifyNetworkInterfaceAttribute"))
        .map(|r| {
            let params = r.params.as_object().unwrap();
            let groups = params
                .iter()
                .filter(|(k, _)| k.starts_with("SecurityGroupId."))
                .map(|(_, v)| v.as_str().unwrap().to_string());
            let id = r.params["NetworkInterfaceId"].as_str().unwrap().to_string();
            (id, groups.collect())
        })
        .collect()
}

/// EC2 refuses ModifyInstanceAttribute's groups for an instance with more
/// than one ENI, and every VPC-CNI node gets a second one soon: secgroup-guard
/// puts each interface of instances with 1, 2 and 3 ENIs in the group, each
/// keeping its other groups, one ModifyNetworkInterfaceAttribute per
/// interface that lacked it and none at the instance level; an instance whose
/// primary ENI alone was in the group is completed; another owner's
/// interfaces are never named.
#[test]
fn guard_puts_every_network_interface_in_the_group() {
    let cloud = Cloud::start(Provider::Aws);
    let aws = aws(&cloud);
    let group = cloud.add_group("cluster-nodes", &[]);
    let base = cloud.add_group("node-base", &[]);
    let own: Vec<String> = (1..=2)
        .map(|k| cloud.add_group(&format!("eni-{k}"), &[]))
        .collect();
    let owned = [(OWNER_TAG, "owned")];
    let one = aws.run_instance_with_interfaces(&owned, &[&[&base]]);
    let two = aws.run_instance_with_interfaces(&owned, &[&[&base], &[&own[0]]]);
    let three =
        aws.run_instance_with_interfaces(&owned, &[&[&base], &[&own[0]], &[&own[1], &base]]);
    let partial = aws.run_instance_with_interfaces(&owned, &[&[&base, &group], &[&own[0]]]);
    let theirs =
        aws.run_instance_with_interfaces(&[(OWNER_TAG, "shared")], &[&[&base], &[&own[0]]]);
    let before: Vec<(String, Interfaces)> = [&one, &two, &three, &partial, &theirs]
        .into_iter()
        .map(|i| (i.clone(), aws.interfaces(i)))
        .collect();
    let counts: Vec<usize> = before.iter().map(|(_, enis)| enis.len()).collect();
    assert_eq!(counts, [1, 2, 3, 2, 2], "seeded: {before:#?}");
    assert!(
        !cloud.groups_of(&partial).contains(&group),
        "one interface of two in the group is not a member"
    );
    let sandbox = guarding(&cloud, &group);
    cloud.clear_requests();

    let first = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(first.contains("secgroup-guard: healthy"), "{first}");
    let mut expected_writes = Vec::new();
    for (instance, enis) in &before {
        let after = aws.interfaces(instance);
        let ours = instance != &theirs;
        let wanted: Interfaces = enis
            .iter()
            .map(|(id, groups)| {
                let mut groups = groups.clone();
                if ours && groups.insert(group.clone()) {
                    expected_writes.push((id.clone(), groups.clone()));
                }
                (id.clone(), groups)
            })
            .collect();
        assert_eq!(
            after, wanted,
            "instance {instance}: every interface in the group, its other groups kept (another owner's untouched)\n{first}"
        );
    }
    let mut writes = interface_writes(aws);
    writes.sort();
    expected_writes.sort();
    assert_eq!(
        writes, expected_writes,
        "one write per interface that lacked the group, naming exactly its groups plus the group"
    );
    assert_eq!(
        aws.count("ModifyInstanceAttribute"),
        0,
        "{:#?}",
        cloud.requests()
    );
    assert!(cloud.groups_of(&partial).contains(&group));

    cloud.clear_requests();
    let second = tend(&sandbox, &cloud, &["reconcile", "secgroup-guard"]);
    assert!(second.contains("no changes"), "{second}");
    assert_eq!(cloud.mutations(), 0, "{:#?}", cloud.requests());
}

/// The interfaces are read just before the act, from the instance EC2
/// describes: an ENI moved from an owned instance to another owner's after
/// the plugin listed it is not touched; the owned instance's remaining
/// interface is.
#[test]
fn an_interface_moved_to_another_instance_after_the_listing_is_not_touched() {
    let cloud = Cloud::start(Provider::Aws);
    let aws = aws(&cloud);
    let group = cloud.add_group("cluster-nodes", &[]);
    let base = cloud.add_group("node-base", &[]);
    let ours = aws.run_instance_with_interfaces(&[(OWNER_TAG, "owned")], &[&[&base], &[&base]]);
    let theirs = aws.run_instance_with_interfaces(&[(OWNER_TAG, "shared")], &[&[&base]]);
    let slow = cloud.add_instance("node-slow", &[(OWNER_TAG, "owned")]).id;
    let (moved, _) = aws.interfaces(&ours).remove(1);
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"list-instances\", \"get-instance\", \"add-to-group\"], {}, security-groups = [\"{group}\"]",
        owner_grant("owned")
    );
    let config = calls(&[
        json!({"op": "list-instances", "tag": OWNER_TAG, "value": "owned"}),
        json!({"op": "get-instance", "id": slow}),
        json!({"op": "add-to-group", "id": ours, "group": group}),
    ]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config)
        + "[plugins.chaos.limits]\ntimeout = \"30s\"\n";
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    cloud.hold_reads_of(&slow);
    cloud.clear_requests();

    let out = std::thread::scope(|scope| {
        let reconcile = scope.spawn(|| tend(&sandbox, &cloud, &["reconcile", "chaos"]));
        wait_until(
            std::time::Duration::from_secs(20),
            "the listing to be answered",
            || cloud.instance_listings() > 0,
        );
        let attachment = aws.ec2(&[
            "call",
            "describe_network_interfaces",
            &json!({"NetworkInterfaceIds": [moved]}).to_string(),
        ])["NetworkInterfaces"][0]["Attachment"]["AttachmentId"]
            .clone();
        let detach = json!({"AttachmentId": attachment});
        aws.ec2(&["call", "detach_network_interface", &detach.to_string()]);
        let attach = json!({"NetworkInterfaceId": moved, "InstanceId": theirs, "DeviceIndex": 1});
        aws.ec2(&["call", "attach_network_interface", &attach.to_string()]);
        cloud.clear_faults();
        reconcile.join().unwrap()
    });
    assert!(
        result_of(&out, "list-instances", OWNER_TAG).contains(&ours),
        "{out}"
    );
    assert_eq!(result_of(&out, "add-to-group", &ours), "true", "{out}");
    let written: Vec<String> = interface_writes(aws)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let (remaining, _) = aws.interfaces(&ours).remove(0);
    assert_eq!(written, [remaining], "{:#?}", cloud.requests());
    assert!(cloud.groups_of(&ours).contains(&group));
    let theirs_now = aws.interfaces(&theirs);
    assert!(
        theirs_now.iter().any(|(id, _)| *id == moved),
        "{theirs_now:?}"
    );
    assert!(
        theirs_now
            .iter()
            .all(|(_, groups)| !groups.contains(&group)),
        "another owner's interface was put in the group: {theirs_now:?}"
    );
}

/// EC2 answers a page token it does not honour with 400
/// InvalidPaginationToken (a client error): the listing fails at once,
/// naming the page, and the SDK does not send the same token again.
#[test]
fn an_invalid_page_token_fails_the_listing_without_a_retry() {
    let cloud = Cloud::start(Provider::Aws);
    let aws = aws(&cloud);
    cloud.add_instances(3, &[(OWNER_TAG, "owned")]);
    aws.fault(&json!({
        "max_results": {"action": "DescribeInstances", "value": 1, "times": -1},
        "corrupt_next_token": {"action": "DescribeInstances", "after": 0},
    }));
    let listed = list_owned(&cloud);
    assert!(
        listed.starts_with("unavailable") && listed.contains("InvalidPaginationToken"),
        "{listed}"
    );
    assert!(listed.contains("page 2 of the listing"), "{listed}");
    let statuses: Vec<u16> = aws
        .requests()
        .iter()
        .filter(|r| r.action.as_deref() == Some("DescribeInstances"))
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [200, 400], "a 4xx is not retried");
}

/// A 5xx between pages is EC2 failing: the SDK tries the page three times
/// in all, then the listing fails naming the page, never a partial list.
#[test]
fn a_server_error_between_pages_is_retried_then_fails_the_listing() {
    let cloud = Cloud::start(Provider::Aws);
    let aws = aws(&cloud);
    cloud.add_instances(3, &[(OWNER_TAG, "owned")]);
    aws.fault(&json!({
        "max_results": {"action": "DescribeInstances", "value": 1, "times": -1},
    }));
    cloud.fail_listings_after_the_first_page(ListingFault::ServerError);
    let listed = list_owned(&cloud);
    assert!(
        listed.starts_with("unavailable") && listed.contains("InternalError"),
        "{listed}"
    );
    assert!(listed.contains("page 2 of the listing"), "{listed}");
    let statuses: Vec<u16> = aws
        .requests()
        .iter()
        .filter(|r| r.action.as_deref() == Some("DescribeInstances"))
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [200, 500, 500, 500], "three attempts of page 2");
}

/// OpenStack: a token the cloud expires while tend still holds it (a token
/// expiring mid-pass) costs one 401, one new token and one retry of the
/// request: the call succeeds.
#[test]
fn an_openstack_token_expired_under_tend_is_renewed_and_the_call_retried() {
    let cloud = Cloud::start(Provider::OpenStack);
    let CloudPeer::OpenStack(fake) = &cloud.0 else {
        unreachable!("started for OpenStack")
    };
    let instance = cloud.add_instance("node-1", &[(OWNER_TAG, "owned")]).id;
    let sandbox = Sandbox::new();
    let grant = format!("operations = [\"get-instance\"], {}", owner_grant("owned"));
    let config = calls(&[json!({"op": "get-instance", "id": instance})]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config);
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    let env = cloud.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let daemon = sandbox.daemon_with_env(&env);
    // The startup pass takes the daemon's token.
    daemon.wait_for_log(
        std::time::Duration::from_secs(30),
        &["plugin=chaos", &format!("get-instance {instance}: node-1")],
    );
    fake.fault(&json!({"expire_tokens": true}));
    fake.clear_requests();

    let out = tend(&sandbox, &cloud, &["reconcile", "chaos"]);
    assert!(
        out.contains("by the tend daemon"),
        "the daemon ran it: {out}"
    );
    assert_eq!(
        result_of(&out, "get-instance", &instance),
        "node-1",
        "{out}"
    );
    let requests = fake.requests();
    assert_eq!(requests.with_status(401), 1, "{:#?}", &*requests);
    assert_eq!(requests.token_requests(), 1, "{:#?}", &*requests);
}

// ---------------------------------------------------------------------------
// A hostile or careless peer: what its answers may cost
// ---------------------------------------------------------------------------

fn a_listing_over_read_per_reconcile_is_refused(provider: Provider) {
    let cloud = Cloud::start(provider);
    // Large instances: a tag value near the providers' limit (255).
    let padding = "p".repeat(250);
    let tags = [(OWNER_TAG, "owned"), ("padding", padding.as_str())];
    cloud.add_instances(24, &tags);
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"list-instances\"], {}",
        owner_grant("owned")
    );
    let config = calls(&[json!({"op": "list-instances", "tag": OWNER_TAG, "value": "owned"})]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config)
        + "[plugins.chaos.limits]\nread-per-reconcile = \"4KiB\"\n";
    sandbox.config_with_host(&cloud.host_config(), &plugins);

    let out = tend(&sandbox, &cloud, &["reconcile", "chaos"]);
    let listed = result_of(&out, "list-instances", OWNER_TAG);
    // (The hint after "; " is cut off by `result_of`: looked up in `out`.)
    assert!(
        listed
            .starts_with("budget-exhausted: [limit] cloud list-instances: this reconcile has read")
            && out.contains("raise [plugins.chaos.limits] read-per-reconcile (now 4.0 KiB)"),
        "{out}"
    );
    // The listing was asked of the peer: the refusal is the allowance's.
    assert!(cloud.api_requests() >= 1, "{:#?}", cloud.requests());
}

/// A loopback listener that counts the requests it gets and whether any
/// carried a credential header, answering each `{}`.
struct Listener {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Listener {
    fn start() -> Listener {
        use std::io::{Read, Write};
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for mut stream in socket.incoming().flatten() {
                let mut head = [0u8; 8192];
                let n = stream.read(&mut head).unwrap_or(0);
                record
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head[..n]).into_owned());
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                );
            }
        });
        Listener { port, seen }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// chaos lists the owned instances once: that call's result.
fn list_owned(cloud: &Cloud) -> String {
    let sandbox = Sandbox::new();
    let grant = format!(
        "operations = [\"list-instances\"], {}",
        owner_grant("owned")
    );
    let config = calls(&[json!({"op": "list-instances", "tag": OWNER_TAG, "value": "owned"})]);
    let plugins = plugin(&sandbox, "chaos", "chaos", &grant, &config);
    sandbox.config_with_host(&cloud.host_config(), &plugins);
    let out = tend(&sandbox, cloud, &["reconcile", "chaos"]);
    result_of(&out, "list-instances", OWNER_TAG).to_string()
}

#[test]
fn a_nova_redirect_to_another_host_never_gets_the_token() {
    let cloud = Cloud::start(Provider::OpenStack);
    let CloudPeer::OpenStack(fake) = &cloud.0 else {
        unreachable!()
    };
    cloud.add_instance("node-1", &[(OWNER_TAG, "owned")]);
    let elsewhere = Listener::start();
    fake.fault(&json!({"redirect": {
        "path": "/compute/v2.1/servers/detail",
        "location": format!("http://127.0.0.1:{}/steal", elsewhere.port),
        "times": -1,
    }}));
    let listed = list_owned(&cloud);
    assert!(
        listed.starts_with("unavailable")
            && listed.contains("a redirect, which Tend does not follow"),
        "{listed}"
    );
    // The fake answered the redirect; nothing reached the other host.
    assert!(
        fake.requests().with_status(307) >= 1,
        "{:#?}",
        cloud.requests()
    );
    assert_eq!(elsewhere.requests(), Vec::<String>::new());
}

#[test]
fn a_78_mb_ec2_page_is_refused_with_a_bounded_error() {
    let cloud = Cloud::start(Provider::Aws);
    let CloudPeer::Aws(aws) = &cloud.0 else {
        unreachable!()
    };
    cloud.add_instance("node-1", &[(OWNER_TAG, "owned")]);
    aws.fault(&json!({"pad": {"action": "DescribeInstances", "bytes": 78_000_000, "times": -1}}));
    let listed = list_owned(&cloud);
    assert!(
        listed.starts_with("unavailable")
            && listed.contains("an answer larger than 16777216 bytes: refused"),
        "{listed}"
    );
    assert!(listed.len() < 1024, "{listed}");
    assert!(aws.count("DescribeInstances") >= 1);
}

/// `mod openstack` and `mod aws`, each running every body for its provider.
macro_rules! both {
    ($($body:ident),* $(,)?) => {
        mod openstack {
            $(#[test] fn $body() { super::$body(super::Provider::OpenStack) })*
        }
        mod aws {
            $(#[test] fn $body() { super::$body(super::Provider::Aws) })*
        }
    };
}

both!(
    guard_adds_what_is_missing_and_a_second_pass_changes_nothing,
    guard_resolves_a_group_name_and_refuses_an_ambiguous_one,
    guard_resolves_the_name_again_when_the_remembered_group_is_gone,
    guard_reads_kubeadm_and_keeps_egress_and_extra_rules,
    guard_without_its_rbac_rule_is_refused_at_the_api_server,
    an_ungranted_operation_is_denied_naming_the_grant,
    instances_outside_the_owner_tag_are_denied,
    hostile_identifiers_and_ungranted_targets_never_reach_the_peer,
    plan_names_the_instance_and_deletes_nothing,
    the_plugin_request_rate_bounds_what_reaches_the_peer,
    rules_outside_the_grant_never_reach_the_group,
    a_mutation_acts_on_the_owner_the_peer_reports_just_before_it,
    a_listing_over_read_per_reconcile_is_refused,
);
