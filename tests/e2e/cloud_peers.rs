//! The cloud peers are faithful enough for real clients: the real `openstack` CLI
//! (python-openstackclient, through keystoneauth and openstacksdk) authenticates
//! against the OpenStack fake, pages through its servers, shows and deletes them,
//! manages security groups, rules and ports; raw HTTP checks what the CLI hides
//! (token expiry, the fault switches). The AWS peer's proxy forwards boto3's
//! paged DescribeInstances to moto and logs it, and its faults reach the client.
//! Every wait is on a condition with a deadline; a missing peer panics with what
//! to run.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tend_e2e::peers::aws::AwsPeer;
use tend_e2e::peers::openstack::OpenStackFake;
use tend_e2e::wait_until;

const SERVERS_DETAIL: &str = "/compute/v2.1/servers/detail";

fn names(list: &Value, key: &str) -> BTreeSet<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|i| i[key].as_str().unwrap().to_string())
        .collect()
}

/// The path and query of a `next` link (`http://127.0.0.1:PORT/...`).
fn next_link(body: &Value, key: &str) -> Option<String> {
    body[format!("{key}_links")].as_array().and_then(|links| {
        links.iter().find(|l| l["rel"] == "next").map(|l| {
            let href = l["href"].as_str().unwrap();
            href[href
                .find("/compute")
                .or_else(|| href.find("/network"))
                .unwrap()..]
                .to_string()
        })
    })
}

#[test]
fn cli_server_list_pages_through_every_server() {
    let fake = OpenStackFake::start_with(&["--max-limit", "3"]);
    fake.add_servers_bulk(8, &json!({"name": "worker"}));
    let listed = fake.cli_json(&["server", "list"]);
    let expected: BTreeSet<String> = (0..8).map(|i| format!("worker-{i}")).collect();
    assert_eq!(names(&listed, "Name"), expected);
    let requests = fake.requests();
    assert_eq!(
        requests.server_list_pages(),
        3,
        "8 servers in pages of at most 3: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .filter(|r| r.path == SERVERS_DETAIL)
            .skip(1)
            .all(|r| r.query.contains("marker=")),
        "later pages follow the marker: {requests:?}"
    );
    // `--limit` is one page (the CLI stops paging then).
    let one_page = fake.cli_json(&["server", "list", "--limit", "2"]);
    assert_eq!(one_page.as_array().unwrap().len(), 2);
    // Newest first, as Nova orders them.
    assert_eq!(one_page[0]["Name"], "worker-7");
}

#[test]
fn cli_server_show_and_delete() {
    let fake = OpenStackFake::start();
    let group = fake.add_group(&json!({"name": "web"}));
    let id = fake.add_server(&json!({
        "name": "node-a", "metadata": {"tend.io/cluster": "c1"}, "security_groups": [group],
        "addresses": {"private": ["10.0.0.5", "fd00::5"], "public": ["172.24.4.9"]}}));
    fake.add_server(&json!({"name": "node-b"}));
    let shown = fake.cli_json(&["server", "show", "node-a"]);
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["status"], "ACTIVE");
    assert_eq!(shown["OS-EXT-STS:vm_state"], "active");
    assert_eq!(
        shown["addresses"],
        json!({"private": ["10.0.0.5", "fd00::5", "172.24.4.9"]})
    );
    assert_eq!(shown["security_groups"], json!([{"name": "web"}]));
    assert_eq!(shown["properties"], json!({"tend.io/cluster": "c1"}));

    let out = fake.cli("tend-fake", &["server", "delete", "node-a"]);
    assert!(out.success(), "server delete: {}", out.stderr);
    assert_eq!(fake.requests().server_deletes(Some(&id)), 1);
    assert!(fake.server(&id).is_none(), "deleted at once by default");
    let listed = fake.cli_json(&["server", "list"]);
    assert_eq!(
        names(&listed, "Name"),
        BTreeSet::from(["node-b".to_string()])
    );
    let out = fake.cli("tend-fake", &["server", "show", &id]);
    assert!(!out.success(), "a deleted server is not found");
    assert!(out.stderr.contains("No Server found"), "{}", out.stderr);

    // With a delete time the server shows task_state deleting; Nova accepts a
    // second DELETE, and the log shows it was sent.
    fake.fault(&json!({"delete_seconds": 1}));
    let slow = fake.add_server(&json!({"name": "node-c"}));
    let token = fake.token();
    let path = format!("/compute/v2.1/servers/{slow}");
    assert_eq!(fake.call("DELETE", &path, Some(&token), None).0, 204);
    let (status, body) = fake.call("GET", &path, Some(&token), None);
    assert_eq!(status, 200);
    assert_eq!(body["server"]["OS-EXT-STS:task_state"], "deleting");
    assert_eq!(body["server"]["status"], "ACTIVE");
    assert_eq!(fake.call("DELETE", &path, Some(&token), None).0, 204);
    assert_eq!(fake.requests().server_deletes(Some(&slow)), 2);
    wait_until(Duration::from_secs(10), "the deleting server to go", || {
        fake.call("GET", &path, Some(&token), None).0 == 404
    });
    let (_, body) = fake.call("GET", &path, Some(&token), None);
    assert_eq!(
        body["itemNotFound"]["message"],
        format!("Instance {slow} could not be found.")
    );
}

#[test]
fn cli_security_groups_and_rules() {
    let fake = OpenStackFake::start();
    let web = fake.add_group(&json!({"name": "web", "description": "web tier"}));
    fake.add_group(&json!({"name": "db"}));
    let groups = fake.cli_json(&["security", "group", "list"]);
    assert_eq!(
        names(&groups, "Name"),
        BTreeSet::from(["db".to_string(), "web".to_string()])
    );
    let shown = fake.cli_json(&["security", "group", "show", "web"]);
    assert_eq!(shown["id"], web.as_str());
    let rules = shown["rules"].as_array().unwrap();
    assert_eq!(
        rules.len(),
        2,
        "Neutron's two default egress rules: {shown}"
    );
    assert!(rules.iter().all(|r| r["direction"] == "egress"));

    let rule = [
        "security",
        "group",
        "rule",
        "create",
        "--protocol",
        "tcp",
        "--dst-port",
        "22",
    ];
    let mut first = rule.to_vec();
    first.extend(["--remote-ip", "10.1.2.3/8", "web"]);
    let created = fake.cli_json(&first);
    assert_eq!(
        created["remote_ip_prefix"], "10.0.0.0/8",
        "host bits cleared"
    );
    assert_eq!(created["port_range_min"], 22);
    let mut again = rule.to_vec();
    again.extend(["--remote-ip", "10.0.0.0/8", "web"]);
    let out = fake.cli("tend-fake", &again);
    assert!(!out.success(), "an equal rule is refused");
    let rule_id = created["id"].as_str().unwrap();
    assert!(
        out.stderr.contains(&format!(
            "Security group rule already exists. Rule id is {rule_id}."
        )),
        "{}",
        out.stderr
    );
    assert_eq!(fake.requests().rule_creates(), 2);
    assert_eq!(fake.requests().with_status(409), 1);

    // Create and delete a group through the CLI; a group in use cannot go.
    let made = fake.cli_json(&["security", "group", "create", "tmp"]);
    let out = fake.cli("tend-fake", &["security", "group", "delete", "tmp"]);
    assert!(out.success(), "{}", out.stderr);
    assert!(
        !fake.state()["security_groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["id"] == made["id"])
    );
    fake.add_server(&json!({"name": "uses-web", "security_groups": [web]}));
    let out = fake.cli("tend-fake", &["security", "group", "delete", "web"]);
    assert!(!out.success(), "web is in use");
}

#[test]
fn cli_ports_follow_security_groups() {
    let fake = OpenStackFake::start();
    let a = fake.add_group(&json!({"name": "a"}));
    let b = fake.add_group(&json!({"name": "b"}));
    let server = fake.add_server(&json!({"name": "node", "security_groups": [a],
                                         "addresses": {"private": ["10.0.0.7"]}}));
    fake.add_server(&json!({"name": "other"}));
    let ports = fake.cli_json(&["port", "list", "--server", "node"]);
    assert_eq!(ports.as_array().unwrap().len(), 1, "{ports}");
    let port = ports[0]["ID"].as_str().unwrap().to_string();
    assert_eq!(ports[0]["Fixed IP Addresses"][0]["ip_address"], "10.0.0.7");

    let out = fake.cli(
        "tend-fake",
        &["port", "set", "--security-group", "b", &port],
    );
    assert!(out.success(), "port set: {}", out.stderr);
    assert_eq!(fake.requests().port_updates(Some(&port)), 1);
    let shown = fake.cli_json(&["port", "show", &port]);
    let groups: BTreeSet<String> = shown["security_group_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_string())
        .collect();
    assert_eq!(groups, BTreeSet::from([a.clone(), b.clone()]));
    assert_eq!(shown["revision_number"], 2);
    let nova = fake.server(&server).unwrap();
    assert_eq!(
        nova["security_groups"],
        json!([{"name": "a"}, {"name": "b"}])
    );

    // If-Match with a stale revision: 412, nothing changes.
    let token = fake.token();
    let path = format!("/network/v2.0/ports/{port}");
    let body = json!({"port": {"security_groups": [b]}});
    let stale = fake.call_with_if_match(&path, &token, 1, &body);
    assert_eq!(stale.0, 412, "{}", stale.1);
    assert_eq!(
        stale.1["NeutronError"]["type"],
        "RevisionNumberConstraintFailed"
    );
    let fresh = fake.call_with_if_match(&path, &token, 2, &body);
    assert_eq!(fresh.0, 200, "{}", fresh.1);
    assert_eq!(fresh.1["port"]["revision_number"], 3);
    assert_eq!(
        fake.server(&server).unwrap()["security_groups"],
        json!([{"name": "b"}])
    );
}

#[test]
fn tokens_expire_and_credentials_are_checked() {
    let fake = OpenStackFake::start();
    fake.add_server(&json!({"name": "n"}));
    // No token, a wrong password: 401 with Keystone's body.
    let (status, body) = fake.call("GET", SERVERS_DETAIL, None, None);
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], 401);
    let wrong = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "tend", "domain": {"id": "default"}, "password": "nope"}}}}});
    assert_eq!(fake.issue_token(&wrong), Err(401));
    let app = json!({"auth": {"identity": {"methods": ["application_credential"],
        "application_credential": {"id": "tend-app", "secret": "app-secret"}}}});
    let app_token = fake.issue_token(&app).unwrap();
    assert_eq!(
        fake.call("GET", SERVERS_DETAIL, Some(&app_token), None).0,
        200
    );
    let out = fake.cli(
        "tend-fake-app",
        &["server", "list", "-f", "value", "-c", "Name"],
    );
    assert_eq!(out.stdout.trim(), "n", "{}", out.stderr);

    // A short TTL: the token dies on its own, a fresh authentication works.
    fake.config(&json!({"token_ttl": 1}));
    let short = fake.token();
    assert_eq!(fake.call("GET", SERVERS_DETAIL, Some(&short), None).0, 200);
    wait_until(Duration::from_secs(10), "the 1 s token to expire", || {
        fake.call("GET", SERVERS_DETAIL, Some(&short), None).0 == 401
    });
    fake.config(&json!({"token_ttl": 3600}));
    let fresh = fake.token();
    assert_eq!(fake.call("GET", SERVERS_DETAIL, Some(&fresh), None).0, 200);

    // expire_tokens: every token issued so far is dead at once (Neutron too).
    fake.fault(&json!({"expire_tokens": true}));
    let (status, body) = fake.call("GET", SERVERS_DETAIL, Some(&fresh), None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["title"], "Unauthorized");
    assert_eq!(
        fake.call(
            "GET",
            "/network/v2.0/security-groups",
            Some(&app_token),
            None
        )
        .0,
        401
    );
    let after = fake.token();
    assert_eq!(fake.call("GET", SERVERS_DETAIL, Some(&after), None).0, 200);
    assert!(fake.requests().token_requests() >= 5);
}

#[test]
fn fault_switches_seen_through_raw_http() {
    let fake = OpenStackFake::start();
    fake.add_servers_bulk(5, &json!({"name": "s"}));
    let token = fake.token();
    let list = |path: &str| fake.call("GET", path, Some(&token), None);
    let first = format!("{SERVERS_DETAIL}?limit=2");

    // Paging without faults: 2 + 2 + 1, links only while more remain.
    let mut seen = Vec::new();
    let mut path = Some(first.clone());
    while let Some(p) = path {
        let (status, body) = list(&p);
        assert_eq!(status, 200, "{body}");
        seen.extend(names(&body["servers"], "id"));
        path = next_link(&body, "servers");
    }
    assert_eq!(seen.len(), 5);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 5);

    // fail: the second matching request answers 500, once.
    fake.fault(&json!({"fail": {"path": SERVERS_DETAIL, "status": 500, "after": 1, "times": 1}}));
    assert_eq!(list(&first).0, 200);
    let (status, body) = list(&first);
    assert_eq!(status, 500);
    assert_eq!(body["computeFault"]["code"], 500);
    assert_eq!(list(&first).0, 200);

    // truncate: the Content-Length of the whole body, half of it, then the end.
    fake.fault(&json!({"truncate": {"path": SERVERS_DETAIL, "after": 0}}));
    // (Our HTTP/1.0 client reads to the end, so it gets the half body, or an error.)
    if let Ok((_, body)) = fake.try_call("GET", &first, Some(&token), None) {
        assert!(body.is_string(), "a truncated page must not parse: {body}");
    }
    assert_eq!(fake.requests().last().unwrap().status, 200);
    assert_eq!(list(&first).0, 200, "truncation fires once");

    // bad_marker: the next link names a server that does not exist -> 400.
    fake.fault(&json!({"bad_marker": {"path": SERVERS_DETAIL, "after": 0}}));
    let (_, body) = list(&first);
    let next = next_link(&body, "servers").expect("a next link");
    let (status, body) = list(&next);
    assert_eq!(status, 400, "{body}");
    let message = body["badRequest"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("marker [") && message.ends_with("] not found"),
        "{message}"
    );

    // empty_servers: a false-empty listing while the servers are there.
    fake.fault(&json!({"empty_servers": true}));
    let (status, body) = list(SERVERS_DETAIL);
    assert_eq!(status, 200);
    assert_eq!(body["servers"], json!([]));
    assert_eq!(fake.state()["servers"].as_array().unwrap().len(), 5);

    // slow: answers are held back.
    fake.clear_faults();
    fake.fault(&json!({"slow": {"path": SERVERS_DETAIL, "ms": 400}}));
    let started = Instant::now();
    assert_eq!(list(SERVERS_DETAIL).0, 200);
    assert!(started.elapsed() >= Duration::from_millis(400));
    fake.clear_faults();
    assert_eq!(
        list(SERVERS_DETAIL).1["servers"].as_array().unwrap().len(),
        5
    );

    // Neutron pages too; reset empties everything, the log included.
    for i in 0..3 {
        fake.add_group(&json!({"name": format!("g{i}")}));
    }
    let (_, body) = list("/network/v2.0/security-groups?limit=2");
    assert_eq!(body["security_groups"].as_array().unwrap().len(), 2);
    let (_, rest) = list(&next_link(&body, "security_groups").expect("a next link"));
    assert_eq!(rest["security_groups"].as_array().unwrap().len(), 1);
    assert!(next_link(&rest, "security_groups").is_none());
    fake.reset();
    assert!(fake.requests().is_empty());
    let state = fake.state();
    assert_eq!(state["servers"], json!([]));
    assert_eq!(state["security_groups"], json!([]));
}

#[test]
fn aws_peer_pages_through_the_proxy_and_injects_faults() {
    let aws = AwsPeer::start();
    let seeded: BTreeSet<String> = aws
        .run_instances(12, &[("tend.io/cluster", "c1")])
        .into_iter()
        .collect();
    assert_eq!(seeded.len(), 12);
    assert!(aws.requests().is_empty(), "seeding goes to moto directly");

    let paged = aws
        .ec2_via_proxy(&[
            "paginate",
            "describe_instances",
            r#"{"PaginationConfig": {"PageSize": 5}}"#,
        ])
        .unwrap();
    let pages = paged["pages"].as_array().unwrap();
    assert_eq!(pages.len(), 3, "12 instances in pages of 5");
    let ids: BTreeSet<String> = pages
        .iter()
        .flat_map(|p| p["Reservations"].as_array().unwrap().clone())
        .flat_map(|r| r["Instances"].as_array().unwrap().clone())
        .map(|i| i["InstanceId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, seeded);
    let log = aws.requests();
    assert_eq!(aws.count("DescribeInstances"), 3);
    assert!(log.iter().all(|r| r.status == 200));
    assert_eq!(log[0].params["MaxResults"], "5");
    assert!(log[1].params["NextToken"].is_string());

    // A NextToken EC2 never issued: EC2's client error (the EC2 API
    // Reference, "Error codes for the Amazon EC2 API": InvalidPaginationToken,
    // "The specified pagination token is not valid or is expired.", a common
    // client error; client errors come with a 400-series status), where moto
    // answers its own 500.
    aws.clear_requests();
    aws.fault(&json!({"corrupt_next_token": {"action": "DescribeInstances", "after": 0}}));
    let err = aws
        .ec2_via_proxy(&[
            "paginate",
            "describe_instances",
            r#"{"PaginationConfig": {"PageSize": 5}}"#,
        ])
        .unwrap_err();
    assert_eq!(
        err,
        "ERROR 400 InvalidPaginationToken The specified pagination token is not valid or is expired."
    );
    let statuses: Vec<u16> = aws.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 400]);

    // A listing failing from its second page on with EC2's server error:
    // only requests carrying a NextToken fail.
    aws.clear_requests();
    aws.clear_faults();
    aws.fault(
        &json!({"fail": {"action": "DescribeInstances", "paged": true, "status": 500,
                               "after": 0, "times": -1}}),
    );
    let err = aws
        .ec2_via_proxy(&[
            "paginate",
            "describe_instances",
            r#"{"PaginationConfig": {"PageSize": 5}}"#,
        ])
        .unwrap_err();
    assert_eq!(
        err,
        "ERROR 500 InternalError proxy fault: DescribeInstances fails with 500"
    );
    assert!(aws.ec2_via_proxy(&["call", "describe_instances"]).is_ok());
    let statuses: Vec<u16> = aws.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 500, 200]);

    // max_results: moto pages at the fault's size whatever the caller asked.
    aws.clear_requests();
    aws.clear_faults();
    aws.fault(&json!({"max_results": {"action": "DescribeInstances", "value": 4, "times": -1}}));
    let paged = aws
        .ec2_via_proxy(&[
            "paginate",
            "describe_instances",
            r#"{"PaginationConfig": {"PageSize": 1000}}"#,
        ])
        .unwrap();
    assert_eq!(
        paged["pages"].as_array().unwrap().len(),
        3,
        "12 in pages of 4"
    );

    // fail: an EC2 error without reaching moto; slow: held back.
    aws.clear_faults();
    aws.fault(
        &json!({"fail": {"action": "DescribeInstances", "status": 503, "after": 0, "times": 1}}),
    );
    let err = aws
        .ec2_via_proxy(&["call", "describe_instances"])
        .unwrap_err();
    assert_eq!(
        err,
        "ERROR 503 Unavailable proxy fault: DescribeInstances fails with 503"
    );
    assert!(aws.ec2_via_proxy(&["call", "describe_instances"]).is_ok());
    let victim = seeded.iter().next().unwrap().clone();
    aws.fault(&json!({"slow": {"action": "TerminateInstances", "ms": 500}}));
    let started = Instant::now();
    let args = format!(r#"{{"InstanceIds": ["{victim}"]}}"#);
    aws.ec2_via_proxy(&["call", "terminate_instances", &args])
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(500));
    let terminate = aws
        .requests()
        .into_iter()
        .find(|r| r.action.as_deref() == Some("TerminateInstances"))
        .unwrap();
    assert_eq!(terminate.params["InstanceId.1"], victim.as_str());

    // reset: moto empty, no faults, no log.
    aws.reset();
    assert!(aws.instances().is_empty());
    assert!(aws.requests().is_empty());
    let group = aws.create_security_group("tend-test");
    assert!(group.starts_with("sg-"), "{group}");
}

/// EC2 refuses ModifyInstanceAttribute's groups for an instance with more
/// than one network interface; moto accepts it, so the proxy answers as EC2
/// does, without reaching moto: 400 InvalidInstanceID "There are multiple
/// interfaces attached to instance '...'. Please specify an interface ID for
/// the operation instead." (the EC2 API Reference's ModifyInstanceAttribute
/// says it "can result in an error if the instance has more than one ENI" and
/// to use ModifyNetworkInterfaceAttribute; code, message and status as EC2
/// answers them, e.g. hashicorp/terraform#19959). One ENI: accepted; each ENI
/// by ModifyNetworkInterfaceAttribute: accepted.
#[test]
fn aws_peer_refuses_instance_groups_for_several_interfaces_as_ec2_does() {
    let aws = AwsPeer::start();
    let base = aws.create_security_group("base");
    let extra = aws.create_security_group("extra");
    let one = aws.run_instance_with_interfaces(&[], &[&[&base]]);
    let two = aws.run_instance_with_interfaces(&[], &[&[&base], &[&base]]);
    let set_groups = |instance: &str| {
        let args = json!({"InstanceId": instance, "Groups": [base, extra]});
        aws.ec2_via_proxy(&["call", "modify_instance_attribute", &args.to_string()])
    };

    let err = set_groups(&two).unwrap_err();
    assert_eq!(
        err,
        format!(
            "ERROR 400 InvalidInstanceID There are multiple interfaces attached to instance '{two}'. Please specify an interface ID for the operation instead."
        )
    );
    let refused: Vec<u16> = aws.requests().iter().map(|r| r.status).collect();
    assert_eq!(refused, [400]);
    let unchanged: Vec<BTreeSet<String>> =
        aws.interfaces(&two).into_iter().map(|(_, g)| g).collect();
    assert_eq!(unchanged, vec![BTreeSet::from([base.clone()]); 2]);

    set_groups(&one).unwrap();
    let (_, groups) = aws.interfaces(&one).remove(0);
    assert_eq!(groups, BTreeSet::from([base.clone(), extra.clone()]));

    for (eni, _) in aws.interfaces(&two) {
        let args = json!({"NetworkInterfaceId": eni, "Groups": [base, extra]});
        aws.ec2_via_proxy(&[
            "call",
            "modify_network_interface_attribute",
            &args.to_string(),
        ])
        .unwrap();
    }
    let both: Vec<BTreeSet<String>> = aws.interfaces(&two).into_iter().map(|(_, g)| g).collect();
    assert_eq!(both, vec![BTreeSet::from([base, extra]); 2]);
}
