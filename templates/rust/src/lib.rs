//! {{name}}: a Tend plugin, started with `tend-author new` — make it yours.
//!
//! The problem it solves, as a starting point: is this node's health endpoint
//! answering, and does the cluster still know this node? Each reconcile probes
//! one URL, looks up the Node named after this host, and writes a one-line
//! report file, counting its runs in its own state. Off a cluster (no
//! Kubernetes API) the Node is "not checked" and the probe alone decides.
//!
//! The safety: it reads one URL and one Node and writes one file, each within
//! the grants of `tend.toml` and nothing else. A missing grant fails the
//! reconcile with the host's message, which names the grant to add.
//!
//! The config (`[plugins.{{name}}.config]`):
//! - `url`: the endpoint to probe with GET (timeout 2 s);
//! - `report`: the file to write the report line to.

use serde_json::Value;
use tend_sdk::{Context, Error, Host, ObjectKey, Outcome, PluginInfo, Request, Result};

pub struct Plugin;

impl tend_sdk::Plugin for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "{{name}}",
            "0.1.0",
            "probes an endpoint, checks this node's Node and writes a report",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        let config: Value = ctx.config()?;
        let url = text(ctx, &config, "url", "http://127.0.0.1:10248/healthz")?;
        let example = format!("/var/lib/{}/report.txt", ctx.plugin);
        let report = text(ctx, &config, "report", &example)?;

        let runs = host
            .state()
            .get("runs")?
            .and_then(|v| String::from_utf8(v).ok()?.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        host.state().set("runs", runs.to_string().as_bytes())?;

        let mut request = Request::get(&url);
        request.timeout_ms = Some(2000);
        let (answering, answer) = match host.http().send(&request) {
            Ok(response) => (
                (200..300).contains(&response.status),
                format!("answered {}", response.status),
            ),
            Err(denied @ Error::Denied(_)) => return Err(denied),
            Err(e) => (false, format!("unreachable ({})", e.message())),
        };

        let key = ObjectKey::cluster("v1", "Node", &ctx.node_name);
        // Off a cluster (no Kubernetes API) the node is not checked and the
        // probe alone decides; any other error fails the reconcile.
        let (node, node_ok) = match host.kube().get(&key) {
            Ok(_) => ("found".to_string(), true),
            Err(Error::NotFound(_)) => ("missing".to_string(), false),
            Err(Error::Unavailable(why)) => (format!("not checked ({})", bounded(&why)), true),
            Err(e) => return Err(e),
        };

        let line = format!(
            "{} run {runs}: {url} {answer}; node {} {node}",
            ctx.plugin, ctx.node_name
        );
        host.files()
            .write(&report, format!("{line}\n").as_bytes(), None)?;
        Ok(match answering && node_ok {
            true => Outcome::healthy(line),
            false => Outcome::degraded(line),
        })
    }
}

// The capabilities the plugin calls: its component imports only these
// (`tend plugins inspect` lists them). A call to another is denied, naming
// this list; `export_plugin!(Plugin)` alone declares every capability.
tend_sdk::export_plugin!(Plugin, uses: [files, http, kube, state]);

/// The most bytes of the host's message a report line quotes.
const MAX_MESSAGE: usize = 400;

/// `message` cut to [`MAX_MESSAGE`] bytes on a character boundary, ending
/// with "…" when cut: a report stays one short line whatever the host said.
fn bounded(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The string under `key`, or the `invalid` error that names it.
fn text(ctx: &Context, config: &Value, key: &str, example: &str) -> Result<String> {
    config[key].as_str().map(str::to_string).ok_or_else(|| {
        ctx.invalid_config(key, &format!("expected a string, for example {example:?}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tend_sdk::testing::FakeHost;
    use tend_sdk::{Health, Plugin as _, Response};

    const URL: &str = "http://127.0.0.1:10248/healthz";
    const CONFIG: &str =
        r#"{"url": "http://127.0.0.1:10248/healthz", "report": "/var/lib/{{name}}/report.txt"}"#;

    /// The grants of tend.toml, a healthy endpoint and this host's Node.
    fn host() -> FakeHost {
        let host = FakeHost::named("{{name}}");
        host.files.grant("/var/lib/{{name}}", true);
        host.http.grant(URL);
        host.http.respond(
            "GET",
            URL,
            Ok(Response {
                status: 200,
                headers: vec![],
                body: b"ok".to_vec(),
            }),
        );
        host.kube
            .grant(r#"{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }"#)
            .set_node_name("test-node")
            .put(serde_json::json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": "test-node"}
            }));
        host
    }

    #[test]
    fn a_healthy_run_writes_the_report_and_counts_runs() {
        let host = host();
        let ctx = Context::new("{{name}}", CONFIG);
        let outcome = Plugin::reconcile(&ctx, &host).unwrap();
        assert_eq!(outcome.health, Health::Healthy);
        let line = format!("{{name}} run 1: {URL} answered 200; node test-node found");
        assert_eq!(outcome.message, line);
        let report = host.files.get("/var/lib/{{name}}/report.txt").unwrap();
        assert_eq!(String::from_utf8(report).unwrap(), format!("{line}\n"));

        let again = Plugin::reconcile(&ctx, &host).unwrap();
        assert!(
            again.message.starts_with("{{name}} run 2: "),
            "{}",
            again.message
        );
    }

    #[test]
    fn off_a_cluster_the_node_is_not_checked_and_the_probe_decides() {
        let host = host();
        let why = "no Kubernetes API: not in a cluster";
        host.kube
            .fail_call("get", Some(Error::Unavailable(why.into())));
        let outcome = Plugin::reconcile(&Context::new("{{name}}", CONFIG), &host).unwrap();
        assert_eq!(outcome.health, Health::Healthy);
        let line =
            format!("{{name}} run 1: {URL} answered 200; node test-node not checked ({why})");
        assert_eq!(outcome.message, line);
        let report = host.files.get("/var/lib/{{name}}/report.txt").unwrap();
        assert_eq!(String::from_utf8(report).unwrap(), format!("{line}\n"));

        let long = "é".repeat(300);
        host.kube
            .fail_call("get", Some(Error::Unavailable(long.clone())));
        let outcome = Plugin::reconcile(&Context::new("{{name}}", CONFIG), &host).unwrap();
        let quoted = format!("not checked ({}…)", &long[..MAX_MESSAGE]);
        assert!(outcome.message.ends_with(&quoted), "{}", outcome.message);
    }

    #[test]
    fn a_denied_node_lookup_fails_the_reconcile() {
        let host = host();
        host.kube
            .fail_call("get", Some(Error::Denied("no kube grant".into())));
        let err = Plugin::reconcile(&Context::new("{{name}}", CONFIG), &host).unwrap_err();
        assert_eq!(err, Error::Denied("no kube grant".into()));
    }

    #[test]
    fn a_missing_files_grant_fails_with_the_hosts_message() {
        let host = FakeHost::named("{{name}}");
        host.http.grant(URL);
        host.kube
            .grant(r#"{ resource = "nodes", verbs = ["get"], names = ["$NODE"] }"#)
            .set_node_name("test-node");
        let err = Plugin::reconcile(&Context::new("{{name}}", CONFIG), &host).unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert_eq!(
            err.message(),
            "no files grant covers /var/lib/{{name}}/report.txt: add { path = \"/var/lib/{{name}}\", write = true } to [plugins.{{name}}.grants] files"
        );
    }

    #[test]
    fn a_missing_url_names_the_key_and_an_example() {
        let err = Plugin::reconcile(&Context::new("{{name}}", "{}"), &host()).unwrap_err();
        assert_eq!(
            err,
            Error::Invalid(
                "[plugins.{{name}}.config] url: expected a string, for example \"http://127.0.0.1:10248/healthz\"".into()
            )
        );
    }
}
