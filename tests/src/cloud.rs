//! One harness over both cloud peers, the OpenStack fake and moto behind its
//! proxy, so that a cloud test body is written once and runs against each
//! provider: how tend is pointed at the peer, seeding instances, what the
//! peer holds and what tend asked it to delete, and each provider's way of
//! failing a listing between pages or of deleting slowly.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::peers::aws::AwsPeer;
use crate::peers::openstack::OpenStackFake;

/// Which provider a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenStack,
    Aws,
}

/// A started peer of one provider.
pub enum CloudPeer {
    OpenStack(OpenStackFake),
    Aws(AwsPeer),
}

/// An instance seeded at the peer.
#[derive(Debug, Clone)]
pub struct Seeded {
    pub id: String,
    pub name: String,
    /// Its first private (fixed) IPv4 address.
    pub private_ip: String,
    /// Every form of `spec.providerID` the provider's Kubernetes cloud
    /// provider writes for it.
    pub provider_ids: Vec<String>,
}

/// How a listing fails after its first page.
#[derive(Debug, Clone, Copy)]
pub enum ListingFault {
    /// A page cut short (OpenStack only: a truncated body).
    Truncated,
    /// A page answered with a 5xx (OpenStack: 503; AWS: 500 to every
    /// request carrying a NextToken).
    ServerError,
}

const OPENSTACK_LIST: &str = "/compute/v2.1/servers/detail";

impl CloudPeer {
    /// Start the provider's peer; the OpenStack fake pages servers by 2, so
    /// that every listing of a few instances has several pages.
    pub fn start(provider: Provider) -> CloudPeer {
        match provider {
            Provider::OpenStack => {
                CloudPeer::OpenStack(OpenStackFake::start_with(&["--max-limit", "2"]))
            }
            Provider::Aws => CloudPeer::Aws(AwsPeer::start()),
        }
    }

    /// The `[host.cloud]` section pointing tend at the peer.
    pub fn host_config(&self) -> String {
        match self {
            CloudPeer::OpenStack(_) => {
                "[host.cloud]\nprovider = \"openstack\"\ncloud = \"tend-fake\"\n".into()
            }
            CloudPeer::Aws(aws) => format!(
                "[host.cloud]\nprovider = \"aws\"\nregion = \"us-east-1\"\nendpoint = \"{}\"\n",
                aws.url()
            ),
        }
    }

    /// The environment tend needs for the peer's credentials (and, for AWS,
    /// to never ask the instance metadata service).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            CloudPeer::OpenStack(fake) => vec![(
                "OS_CLIENT_CONFIG_FILE",
                fake.clouds_yaml().display().to_string(),
            )],
            CloudPeer::Aws(_) => vec![
                ("AWS_ACCESS_KEY_ID", "testing".into()),
                ("AWS_SECRET_ACCESS_KEY", "testing".into()),
                ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ],
        }
    }

    /// A running instance named `name` carrying `tags` (AWS tags, OpenStack
    /// metadata), created now.
    pub fn add_instance(&self, name: &str, tags: &[(&str, &str)]) -> Seeded {
        match self {
            CloudPeer::OpenStack(fake) => self.add_server(fake, name, tags, "ACTIVE"),
            CloudPeer::Aws(aws) => {
                let mut tags = tags.to_vec();
                tags.push(("Name", name));
                let id = aws.run_instances(1, &tags).remove(0);
                let instance = aws
                    .instances()
                    .into_iter()
                    .find(|i| i["InstanceId"] == id.as_str())
                    .unwrap_or_else(|| panic!("moto does not list {id}"));
                let zone = instance["Placement"]["AvailabilityZone"].as_str().unwrap();
                Seeded {
                    provider_ids: vec![format!("aws:///{zone}/{id}"), format!("aws:///{id}")],
                    private_ip: instance["PrivateIpAddress"].as_str().unwrap().to_string(),
                    name: name.to_string(),
                    id,
                }
            }
        }
    }

    /// A running instance created now whose creation time, as the peer
    /// reports it, is `age_seconds` in the past: the cloud's clock behind
    /// tend's (OpenStack: seeded so; AWS: the proxy shifts its launchTime).
    pub fn add_aged_instance(&self, name: &str, tags: &[(&str, &str)], age_seconds: u64) -> Seeded {
        match self {
            CloudPeer::OpenStack(fake) => self.seed_server(fake, name, tags, "ACTIVE", age_seconds),
            CloudPeer::Aws(aws) => {
                let seeded = self.add_instance(name, tags);
                let offset = -(age_seconds as i64);
                aws.fault(&json!({
                    "launch_time": {"instance": seeded.id, "offset_seconds": offset}
                }));
                seeded
            }
        }
    }

    /// From now on every listing names the instance `id` twice.
    pub fn list_twice(&self, id: &str) {
        match self {
            CloudPeer::OpenStack(fake) => fake.fault(&json!({"duplicate_server": id})),
            CloudPeer::Aws(aws) => aws.fault(&json!({"duplicate_instance": {"instance": id}})),
        }
    }

    /// An instance in ERROR (OpenStack only: EC2 has no such state).
    pub fn add_errored_instance(&self, name: &str, tags: &[(&str, &str)]) -> Seeded {
        match self {
            CloudPeer::OpenStack(fake) => self.add_server(fake, name, tags, "ERROR"),
            CloudPeer::Aws(_) => panic!("EC2 has no ERROR state"),
        }
    }

    /// `count` running instances carrying `tags`, seeded in bulk: their IDs.
    pub fn add_instances(&self, count: usize, tags: &[(&str, &str)]) -> Vec<String> {
        match self {
            CloudPeer::OpenStack(fake) => {
                let metadata: serde_json::Map<String, Value> = tags
                    .iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                fake.add_servers_bulk(count, &json!({"name": "bulk", "metadata": metadata}))
            }
            CloudPeer::Aws(aws) => aws.run_instances(count, tags),
        }
    }

    /// Put an instance into ERROR (OpenStack only).
    pub fn set_errored(&self, id: &str) {
        match self {
            CloudPeer::OpenStack(fake) => {
                fake.patch_server(id, &json!({"status": "ERROR"}));
            }
            CloudPeer::Aws(_) => panic!("EC2 has no ERROR state"),
        }
    }

    fn add_server(
        &self,
        fake: &OpenStackFake,
        name: &str,
        tags: &[(&str, &str)],
        status: &str,
    ) -> Seeded {
        self.seed_server(fake, name, tags, status, 0)
    }

    fn seed_server(
        &self,
        fake: &OpenStackFake,
        name: &str,
        tags: &[(&str, &str)],
        status: &str,
        age_seconds: u64,
    ) -> Seeded {
        let metadata: serde_json::Map<String, Value> = tags
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        // A distinct fixed address per server: from how many it has.
        let seeded = fake.state()["servers"].as_array().unwrap().len();
        let ip = format!("10.0.{}.{}", seeded / 200, 10 + seeded % 200);
        let id = fake.add_server(&json!({
            "name": name, "status": status, "metadata": metadata,
            "addresses": {"private": [ip]}, "age_seconds": age_seconds,
        }));
        Seeded {
            provider_ids: vec![
                format!("openstack:///{id}"),
                format!("openstack:///RegionOne/{id}"),
            ],
            private_ip: ip,
            name: name.to_string(),
            id,
        }
    }

    /// The IDs of the instances the peer holds that are not gone (deleting
    /// and shutting-down ones included).
    pub fn live_ids(&self) -> BTreeSet<String> {
        match self {
            CloudPeer::OpenStack(fake) => fake.state()["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string())
                .collect(),
            CloudPeer::Aws(aws) => aws
                .instances()
                .into_iter()
                .filter(|i| i["State"]["Name"] != "terminated")
                .map(|i| i["InstanceId"].as_str().unwrap().to_string())
                .collect(),
        }
    }

    /// Delete requests the peer received (`Some(id)`: for that instance).
    pub fn deletes(&self, id: Option<&str>) -> usize {
        match self {
            CloudPeer::OpenStack(fake) => fake.requests().server_deletes(id),
            CloudPeer::Aws(aws) => aws
                .requests()
                .iter()
                .filter(|r| r.action.as_deref() == Some("TerminateInstances"))
                .filter(|r| id.is_none_or(|id| r.params["InstanceId.1"] == id))
                .count(),
        }
    }

    /// Page instance listings by 2 from now on, as the OpenStack fake does
    /// (AWS: the proxy asks moto for pages of 2 where tend asks EC2 for
    /// 1000, as EC2 may answer fewer with a NextToken); how many instances
    /// then make a listing of two pages.
    pub fn page_listings_by_two(&self) -> usize {
        if let CloudPeer::Aws(aws) = self {
            aws.fault(
                &json!({"max_results": {"action": "DescribeInstances", "value": 2, "times": -1}}),
            );
        }
        3
    }

    /// From now on every listing of instances fails, from its second page
    /// on (OpenStack: the first listing from its second page, the next ones
    /// from their first), by `fault`.
    pub fn fail_listings_after_the_first_page(&self, fault: ListingFault) {
        match (self, fault) {
            (CloudPeer::OpenStack(fake), ListingFault::Truncated) => fake.fault(&json!({
                "truncate": {"path": OPENSTACK_LIST, "after": 1, "times": -1}
            })),
            (CloudPeer::OpenStack(fake), ListingFault::ServerError) => fake.fault(&json!({
                "fail": {"path": OPENSTACK_LIST, "status": 503, "after": 1, "times": -1}
            })),
            (CloudPeer::Aws(aws), ListingFault::ServerError) => aws.fault(&json!({
                "fail": {"action": "DescribeInstances", "paged": true, "status": 500,
                         "after": 0, "times": -1}
            })),
            (CloudPeer::Aws(_), ListingFault::Truncated) => {
                panic!("the AWS proxy cuts no page short")
            }
        }
    }

    /// Deletions take `seconds` to finish: OpenStack servers stay "deleting"
    /// (task_state) that long; the AWS proxy holds each TerminateInstances.
    pub fn slow_deletes(&self, seconds: u64) {
        match self {
            CloudPeer::OpenStack(fake) => fake.fault(&json!({"delete_seconds": seconds})),
            CloudPeer::Aws(aws) => aws.fault(&json!({
                "slow": {"action": "TerminateInstances", "ms": seconds * 1000, "times": -1}
            })),
        }
    }

    /// Reads of instance `id` alone (OpenStack's GET of the server, EC2's
    /// DescribeInstances naming it) are held until [`Self::clear_faults`]
    /// (at most a minute): the test acts while tend waits, however loaded
    /// the machine.
    pub fn hold_reads_of(&self, id: &str) {
        const MS: u64 = 60_000;
        match self {
            CloudPeer::OpenStack(fake) => fake.fault(&json!({"slow": {
                "path": format!("/compute/v2.1/servers/{id}"), "method": "GET",
                "ms": MS, "times": -1, "until_cleared": true
            }})),
            CloudPeer::Aws(aws) => aws.fault(&json!({"slow": {
                "action": "DescribeInstances", "params": {"InstanceId.1": id},
                "ms": MS, "times": -1, "until_cleared": true
            }})),
        }
    }

    /// Instance `id` now carries `tag` (key and value; a key it had is
    /// overwritten): it moves to another owner.
    pub fn retag(&self, id: &str, (key, value): (&str, &str)) {
        match self {
            CloudPeer::OpenStack(fake) => {
                fake.patch_server(id, &json!({"metadata": {key: value}}));
            }
            CloudPeer::Aws(aws) => {
                let tags = json!({"Resources": [id], "Tags": [{"Key": key, "Value": value}]});
                aws.ec2(&["call", "create_tags", &tags.to_string()]);
            }
        }
    }

    /// Listings of instances (pages) the peer has answered.
    pub fn instance_listings(&self) -> usize {
        match self {
            CloudPeer::OpenStack(fake) => fake.requests().server_list_pages(),
            CloudPeer::Aws(aws) => aws
                .requests()
                .iter()
                .filter(|r| r.action.as_deref() == Some("DescribeInstances") && r.status != 0)
                .filter(|r| r.params.get("InstanceId.1").is_none())
                .count(),
        }
    }

    /// Every request the peer received since the last [`CloudPeer::clear_requests`]
    /// (Keystone's token requests included).
    pub fn request_count(&self) -> usize {
        match self {
            CloudPeer::OpenStack(fake) => fake.requests().len(),
            CloudPeer::Aws(aws) => aws.requests().len(),
        }
    }

    pub fn clear_requests(&self) {
        match self {
            CloudPeer::OpenStack(fake) => fake.clear_requests(),
            CloudPeer::Aws(aws) => aws.clear_requests(),
        }
    }

    pub fn clear_faults(&self) {
        match self {
            CloudPeer::OpenStack(fake) => fake.clear_faults(),
            CloudPeer::Aws(aws) => aws.clear_faults(),
        }
    }
}
