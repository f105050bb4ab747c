//! moto_server (an EC2 emulator) behind the project's proxy
//! (tests/peers/aws-proxy.py): Tend's AWS backend is pointed at the proxy, which
//! forwards everything to moto unchanged, logs each EC2 call, answers as EC2
//! where moto is more lenient (instance-level groups of a multi-ENI instance,
//! an unknown NextToken) and injects faults (failures, a NextToken moto never
//! issued, slowness). Tests create state
//! through moto itself with boto3 (tests/peers/aws-seed.py), so seeding is not in
//! the proxy's log.
//!
//! moto servers are forked from one warm process per test process
//! (tests/peers/aws-zygote.py, which also runs the seed calls): a cold moto
//! costs 3 s of CPU and each seeding python 0.5 s, which made the AWS tests the
//! suite's largest CPU cost. The proxy is a child of the test; each moto server
//! is the zygote's, stopped by PID through it.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use super::{port_file, stop_child, venv_python, wait_child_ready};
use crate::{http_call, workspace_root};

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

/// tests/peers/aws-zygote.py, started by the first AwsPeer of this test
/// process; it exits (killing the moto servers it forked) when this process
/// does and its stdin closes.
struct Zygote {
    child: Child,
    requests: ChildStdin,
    /// Its answers, one line each, read by a thread so that every wait has a
    /// deadline.
    answers: Receiver<String>,
    /// Set when an answer missed its deadline: a late one would be taken for
    /// the next request's, so the zygote is killed and every later request
    /// fails saying why.
    broken: Option<String>,
}

/// The zygote imports moto and loads its EC2 backend before it answers.
const ZYGOTE_READY_WITHIN: Duration = Duration::from_secs(60);
/// A fork, a stop (5 s of grace, then SIGKILL) or a seed call (boto3's own
/// timeouts are 60 s).
const ZYGOTE_ANSWERS_WITHIN: Duration = Duration::from_secs(120);

impl Zygote {
    fn start() -> Zygote {
        let mut child = Command::new(aws_python())
            .arg(workspace_root().join("tests/peers/aws-zygote.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (send, answers) = std::sync::mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut zygote = Zygote {
            requests: child.stdin.take().unwrap(),
            child,
            answers,
            broken: None,
        };
        let ready = zygote.read("its warm-up", ZYGOTE_READY_WITHIN);
        assert_eq!(ready["ready"], true, "aws-zygote.py: {ready}");
        zygote
    }

    /// The next answer, within `within`; panics saying what happened.
    fn read(&mut self, what: &str, within: Duration) -> Value {
        if let Some(why) = &self.broken {
            panic!("aws-zygote.py is unusable: {why}");
        }
        let line = match self.answers.recv_timeout(within) {
            Ok(line) => line,
            Err(RecvTimeoutError::Disconnected) => {
                panic!(
                    "aws-zygote.py exited during {what} (its errors are above, on this test's stderr)"
                )
            }
            Err(RecvTimeoutError::Timeout) => {
                let why = format!("it did not answer {what} within {within:?}; killed");
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.broken = Some(why.clone());
                panic!("aws-zygote.py: {why}");
            }
        };
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("aws-zygote.py: {e}: {line}"))
    }

    /// One request, one answer; requests from the test's threads take turns.
    fn ask(request: Value) -> Value {
        static ZYGOTE: OnceLock<Mutex<Zygote>> = OnceLock::new();
        let mut zygote = ZYGOTE
            .get_or_init(|| Mutex::new(Zygote::start()))
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        writeln!(zygote.requests, "{request}").unwrap();
        let what = format!("a {} request", request["op"].as_str().unwrap_or("?"));
        zygote.read(&what, ZYGOTE_ANSWERS_WITHIN)
    }
}

/// A moto server (forked by the zygote) and the proxy in front of it, on
/// loopback ports, their stderr in a temporary directory (moto.err,
/// aws-proxy.err).
pub struct AwsPeer {
    /// The moto server's PID, a child of the zygote, which stops it.
    moto: Option<u32>,
    proxy: Option<Child>,
    moto_port: u16,
    proxy_port: u16,
    dir: tempfile::TempDir,
}

impl AwsPeer {
    /// Fork a warm moto, then start the proxy; returns once both answer.
    pub fn start() -> AwsPeer {
        let python = aws_python();
        let dir = tempfile::tempdir().unwrap();
        let moto_err = dir.path().join("moto.err");
        let moto = Zygote::ask(json!({"op": "moto", "stderr": moto_err}));
        let (Some(moto_port), Some(pid)) = (moto["port"].as_u64(), moto["pid"].as_u64()) else {
            panic!("aws-zygote.py could not fork moto: {moto}");
        };
        let (moto_port, pid) = (moto_port as u16, pid as u32);
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
            moto: Some(pid),
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
        let mut argv = vec![endpoint];
        argv.extend(args);
        let answer = Zygote::ask(json!({"op": "seed", "argv": argv}));
        match answer.get("out") {
            Some(out) => Ok(out.clone()),
            None => Err(answer["error"].as_str().unwrap_or("no answer").to_string()),
        }
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
        let moto = self.moto.take().is_none_or(|pid| {
            let stopped = Zygote::ask(json!({"op": "stop", "pid": pid}));
            stopped["clean"] == true
        });
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
