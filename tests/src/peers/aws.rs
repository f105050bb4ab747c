//! moto_server (an EC2 emulator) behind the project's proxy
//! (tests/peers/aws-proxy.py): Tend's AWS backend is pointed at the proxy, which
//! forwards everything to moto unchanged, logs each EC2 call, answers as EC2
//! where moto is more lenient (instance-level groups of a multi-ENI instance,
//! an unknown NextToken) and injects faults (failures, a NextToken moto never
//! issued, slowness). Tests create state
//! through moto itself with boto3 (tests/peers/aws-seed.py), so seeding is not in
//! the proxy's log. Both processes are children of the test, stopped by PID.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{port_file, stop_child, venv_python, wait_child_ready};
use crate::{free_port, http_call, workspace_root};

/// target/venv's python with moto[server] (moto_server and boto3 next to it) and
/// aiohttp (the proxy); `TEND_AWS_PYTHON` names another.
pub fn aws_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            venv_python(
                "TEND_AWS_PYTHON",
                "aiohttp, boto3, moto.server",
                "the AWS peer (moto_server, tests/peers/aws-proxy.py, tests/peers/aws-seed.py)",
            )
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One request the proxy forwarded (or failed by a fault).
#[derive(Debug, Clone)]
pub struct AwsRequest {
    pub method: String,
    pub path: String,
    /// The EC2 Action (form body or query); None for other requests.
    pub action: Option<String>,
    /// The request's EC2 parameters (`InstanceId.1`, `NextToken`, ...).
    pub params: Value,
    pub status: u16,
}

/// The first EC2 call into a fresh moto loads its backend (1.5-2 s): made at
/// start so that no test's timing includes it.
const WARM_UP: &str = "Action=DescribeInstances&Version=2016-11-15";
const SIGV4_FOR_MOTO: &str = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0";

/// moto_server and the proxy in front of it, on free loopback ports, their
/// stderr in a temporary directory (moto.err, aws-proxy.err).
pub struct AwsPeer {
    moto: Option<Child>,
    proxy: Option<Child>,
    moto_port: u16,
    proxy_port: u16,
    dir: tempfile::TempDir,
}

impl AwsPeer {
    /// Start moto, warm it with one EC2 call, then the proxy; returns once both
    /// answer.
    pub fn start() -> AwsPeer {
        let python = aws_python();
        let dir = tempfile::tempdir().unwrap();
        let moto_err = dir.path().join("moto.err");
        let moto_port = free_port();
        let mut moto = Command::new(python.with_file_name("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&moto_err).unwrap())
            .spawn()
            .unwrap();
        let form = [
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Authorization", SIGV4_FOR_MOTO),
        ];
        wait_child_ready(
            &mut moto,
            "moto_server",
            &moto_err,
            Duration::from_secs(30),
            || {
                http_call(
                    moto_port,
                    "POST",
                    "/",
                    &form,
                    WARM_UP,
                    Duration::from_secs(20),
                )
                .ok()
                .filter(|(status, _)| *status == 200)
            },
        );
        let proxy_err = dir.path().join("aws-proxy.err");
        let mut proxy = Command::new(&python)
            .arg(workspace_root().join("tests/peers/aws-proxy.py"))
            .arg("0")
            .arg(format!("http://127.0.0.1:{moto_port}"))
            .arg("--state-dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&proxy_err).unwrap())
            .spawn()
            .unwrap();
        let proxy_port = wait_child_ready(
            &mut proxy,
            "the AWS proxy",
            &proxy_err,
            Duration::from_secs(20),
            || {
                port_file(dir.path())
                    .filter(|&p| matches!(crate::http_get(p, "/proxy/faults"), Ok((200, _))))
            },
        );
        AwsPeer {
            moto: Some(moto),
            proxy: Some(proxy),
            moto_port,
            proxy_port,
            dir,
        }
    }

    /// The proxy's URL (`http://127.0.0.1:PORT`): the EC2 endpoint for Tend.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.proxy_port)
    }

    /// moto's own URL (not logged, no faults).
    pub fn moto_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.moto_port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn control(&self, port: u16, method: &str, path: &str, body: &Value) -> Value {
        let (status, text) = http_call(
            port,
            method,
            path,
            &[("Content-Type", "application/json")],
            &body.to_string(),
            Duration::from_secs(30),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert_eq!(status, 200, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    /// moto empty again (`POST /moto-api/reset`), no proxy faults, an empty log.
    pub fn reset(&self) {
        self.control(self.moto_port, "POST", "/moto-api/reset", &json!({}));
        self.clear_faults();
        self.clear_requests();
    }

    /// The proxy's log since the last reset or [`AwsPeer::clear_requests`].
    pub fn requests(&self) -> Vec<AwsRequest> {
        self.control(self.proxy_port, "GET", "/proxy/requests", &Value::Null)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| AwsRequest {
                method: r["method"].as_str().unwrap().to_string(),
                path: r["path"].as_str().unwrap().to_string(),
                action: r["action"].as_str().map(str::to_string),
                params: r["params"].clone(),
                status: r["status"].as_u64().unwrap() as u16,
            })
            .collect()
    }

    /// The EC2 actions in the log, in order.
    pub fn actions(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter_map(|r| r.action)
            .collect()
    }

    /// How many logged requests were `action`.
    pub fn count(&self, action: &str) -> usize {
        self.actions().iter().filter(|a| *a == action).count()
    }

    pub fn clear_requests(&self) {
        self.control(self.proxy_port, "DELETE", "/proxy/requests", &Value::Null);
    }

    /// Merge faults into the proxy's (`fail`, `corrupt_next_token`, `slow`,
    /// `launch_time`, `duplicate_instance`, `pad`, `max_results`; see
    /// tests/peers/aws-proxy.py).
    pub fn fault(&self, faults: &Value) {
        self.control(self.proxy_port, "POST", "/proxy/faults", faults);
    }

    pub fn clear_faults(&self) {
        self.control(self.proxy_port, "POST", "/proxy/faults/clear", &Value::Null);
    }

    /// tests/peers/aws-seed.py against `endpoint` with `args`: its JSON output, or
    /// its error line ("ERROR <status> <code> <message>").
    fn seed(&self, endpoint: &str, args: &[&str]) -> Result<Value, String> {
        let out = Command::new(aws_python())
            .arg(workspace_root().join("tests/peers/aws-seed.py"))
            .arg(endpoint)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(stderr
                .lines()
                .find(|l| l.starts_with("ERROR"))
                .unwrap_or(&stderr)
                .to_string());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("aws-seed.py printed no JSON: {e}"))
    }

    /// aws-seed.py straight into moto (`call OPERATION JSON`, `paginate ...`,
    /// `run-instances ...`, `create-security-group ...`); panics on an error.
    /// A test's own read that got no EC2 answer at all (moto's threaded dev
    /// server, beside a busy suite, once answered a page with nothing) is
    /// asked again, twice at most; a write never is.
    pub fn ec2(&self, args: &[&str]) -> Value {
        let reads = matches!(args, ["paginate", ..])
            || matches!(args, ["call", operation, ..] if operation.starts_with("describe_"));
        let mut answer = self.seed(&self.moto_url(), args);
        for _ in 0..2 {
            match &answer {
                Err(e) if reads && e.starts_with("ERROR - ") => {
                    answer = self.seed(&self.moto_url(), args);
                }
                _ => break,
            }
        }
        answer.unwrap_or_else(|e| panic!("aws-seed.py {args:?} against moto: {e}"))
    }

    /// aws-seed.py through the proxy (logged, faults apply): its JSON or its
    /// error line.
    pub fn ec2_via_proxy(&self, args: &[&str]) -> Result<Value, String> {
        self.seed(&self.url(), args)
    }

    /// Run `count` instances tagged `tags`, each in its own reservation (moto pages
    /// DescribeInstances by reservation, so they page as EC2's instances do); ids.
    pub fn run_instances(&self, count: usize, tags: &[(&str, &str)]) -> Vec<String> {
        let count = count.to_string();
        let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["run-instances", "--separate", "--count", &count];
        for tag in &tags {
            args.extend(["--tag", tag]);
        }
        self.ec2(&args)
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_string())
            .collect()
    }

    /// A running instance tagged `tags` with one network interface per entry
    /// of `interfaces`, each in those groups (the first is the primary one,
    /// the others attached after it, as the VPC CNI attaches them); its id.
    pub fn run_instance_with_interfaces(
        &self,
        tags: &[(&str, &str)],
        interfaces: &[&[&str]],
    ) -> String {
        let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let interfaces: Vec<String> = interfaces.iter().map(|groups| groups.join(",")).collect();
        let mut args = vec!["run-instances", "--count", "1"];
        for tag in &tags {
            args.extend(["--tag", tag]);
        }
        for groups in &interfaces {
            args.extend(["--interface", groups]);
        }
        self.ec2(&args)[0].as_str().unwrap().to_string()
    }

    /// The network interfaces attached to `instance`, by device index, each
    /// with its groups, straight from moto.
    pub fn interfaces(&self, instance: &str) -> Vec<(String, BTreeSet<String>)> {
        let args = json!({"Filters": [{"Name": "attachment.instance-id", "Values": [instance]}]});
        let answer = self.ec2(&["call", "describe_network_interfaces", &args.to_string()]);
        let mut interfaces: Vec<(i64, String, BTreeSet<String>)> = answer["NetworkInterfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|eni| {
                let groups = eni["Groups"].as_array().unwrap().iter();
                (
                    eni["Attachment"]["DeviceIndex"].as_i64().unwrap(),
                    eni["NetworkInterfaceId"].as_str().unwrap().to_string(),
                    groups
                        .map(|g| g["GroupId"].as_str().unwrap().to_string())
                        .collect(),
                )
            })
            .collect();
        interfaces.sort();
        interfaces
            .into_iter()
            .map(|(_, id, groups)| (id, groups))
            .collect()
    }

    /// A new security group (in the default VPC); its id.
    pub fn create_security_group(&self, name: &str) -> String {
        self.ec2(&["create-security-group", "--name", name])
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Every instance moto has (all states), straight from moto.
    pub fn instances(&self) -> Vec<Value> {
        self.ec2(&["paginate", "describe_instances"])["pages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["Reservations"].as_array().unwrap().clone())
            .flat_map(|r| r["Instances"].as_array().unwrap().clone())
            .collect()
    }

    /// SIGTERM both (proxy first), SIGKILL after 5 s; true when both exited on
    /// SIGTERM.
    pub fn stop(&mut self) -> bool {
        let grace = Duration::from_secs(5);
        let proxy = self
            .proxy
            .take()
            .is_none_or(|mut c| stop_child(&mut c, grace));
        let moto = self
            .moto
            .take()
            .is_none_or(|mut c| stop_child(&mut c, grace));
        proxy && moto
    }
}

impl Drop for AwsPeer {
    fn drop(&mut self) {
        if std::thread::panicking() && self.proxy.is_some() {
            for name in ["moto.err", "aws-proxy.err"] {
                let err = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
                if !err.trim().is_empty() {
                    eprintln!("--- {name} ---\n{err}");
                }
            }
        }
        self.stop();
    }
}
