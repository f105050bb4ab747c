//! The settle check's Prometheus alerts (`[host.fleet] prometheus`, a
//! class's `settle.alerts`): a ticket is granted, and given back, only while
//! none of the class's alerts fires anywhere Prometheus sees. Asked of
//! `/api/v1/alerts`, bounded in time and size, no redirect followed; an
//! answer that cannot be had or read counts as firing (fail closed).

use crate::peer::{Redirects, read_body, redirects};
use reqwest::Url;
use std::collections::BTreeSet;
use std::time::Duration;

const NO_ANSWER: &str = "it did not answer in time";

/// The most bytes of Prometheus's answer read: thousands of alerts.
const MAX_ANSWER: u64 = 4 << 20;

pub struct Alerts {
    client: reqwest::Client,
    url: Url,
}

impl Alerts {
    pub fn new(base: &Url) -> Alerts {
        crate::tls::install_ring();
        let client = reqwest::Client::builder()
            .user_agent(concat!("tend/", env!("CARGO_PKG_VERSION")))
            .redirect(redirects(Redirects::Never))
            .build()
            .expect("a client with no custom TLS builds");
        let mut url = base.clone();
        url.path_segments_mut()
            .expect("an http(s) URL has segments")
            .pop_if_empty()
            .extend(["api", "v1", "alerts"]);
        Alerts { client, url }
    }

    /// Those of `names` firing now, or why Prometheus could not say.
    pub async fn firing(&self, names: &[String], within: Duration) -> Result<Vec<String>, String> {
        let asked = async {
            let response = self
                .client
                .get(self.url.clone())
                .timeout(within)
                .send()
                .await
                .map_err(|e| match e.is_timeout() {
                    true => NO_ANSWER.to_string(),
                    false => e.to_string(),
                })?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("it answered {status}"));
            }
            read_body(response, MAX_ANSWER)
                .await
                .map_err(|e| e.to_string())
        };
        let body = tokio::time::timeout(within, asked)
            .await
            .map_err(|_| NO_ANSWER.to_string())??;
        firing_in(&body, names)
    }
}

/// Those of `names` that Prometheus's `/api/v1/alerts` answer says fire
/// (pending ones do not).
pub fn firing_in(body: &[u8], names: &[String]) -> Result<Vec<String>, String> {
    let answer: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "its answer is not JSON".to_string())?;
    let alerts = answer["data"]["alerts"]
        .as_array()
        .filter(|_| answer["status"] == "success")
        .ok_or("its answer is not a successful alerts listing")?;
    let firing: BTreeSet<&str> = alerts
        .iter()
        .filter(|a| a["state"] == "firing")
        .filter_map(|a| a["labels"]["alertname"].as_str())
        .collect();
    Ok(names
        .iter()
        .filter(|n| firing.contains(n.as_str()))
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_alerts_that_fire_count_and_an_unreadable_answer_is_an_error() {
        let body = br#"{"status":"success","data":{"alerts":[
            {"labels":{"alertname":"NodeDown","instance":"n1"},"state":"firing"},
            {"labels":{"alertname":"NodeDown","instance":"n2"},"state":"firing"},
            {"labels":{"alertname":"DiskFilling"},"state":"pending"},
            {"labels":{"alertname":"Other"},"state":"firing"},
            {"labels":{},"state":"firing"}
        ]}}"#;
        let names = ["NodeDown".to_string(), "DiskFilling".into(), "Quiet".into()];
        assert_eq!(firing_in(body, &names), Ok(vec!["NodeDown".to_string()]));
        assert_eq!(
            firing_in(br#"{"status":"success","data":{"alerts":[]}}"#, &names),
            Ok(vec![])
        );
        for bad in [
            &b"<html>"[..],
            br#"{"status":"error","data":{"alerts":[]}}"#,
            br#"{"status":"success","data":{}}"#,
        ] {
            assert!(
                firing_in(bad, &names).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A Prometheus on loopback answering every request with `answer`
    /// (None: never answering).
    async fn peer(answer: Option<&'static str>) -> Url {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut held = vec![];
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                match answer {
                    Some(answer) => {
                        let _ = socket.write_all(answer.as_bytes()).await;
                    }
                    None => held.push(socket),
                }
            }
        });
        url
    }

    #[tokio::test]
    async fn a_hostile_prometheus_counts_as_firing_and_costs_a_bound() {
        let names = ["NodeDown".to_string()];
        let within = Duration::from_millis(500);
        let cases = [
            (
                Some(
                    "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n",
                ),
                "302",
            ),
            (
                Some("HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n{"),
                "larger than",
            ),
            (None, "did not answer in time"),
        ];
        for (answer, said) in cases {
            let alerts = Alerts::new(&peer(answer).await);
            let refused = alerts.firing(&names, within).await.unwrap_err();
            assert!(refused.contains(said), "{said}: {refused}");
        }
        let quiet = "HTTP/1.1 200 OK\r\nContent-Length: 41\r\n\r\n{\"status\":\"success\",\"data\":{\"alerts\":[]}}";
        let alerts = Alerts::new(&peer(Some(quiet)).await);
        assert_eq!(alerts.firing(&names, within).await, Ok(vec![]));
    }

    #[test]
    fn the_alerts_api_is_asked_below_the_configured_url() {
        for base in ["http://p:9090", "http://p:9090/", "http://p/prom/"] {
            let alerts = Alerts::new(&Url::parse(base).unwrap());
            assert!(
                alerts.url.as_str().ends_with("/api/v1/alerts"),
                "{}",
                alerts.url
            );
            assert!(!alerts.url.as_str().contains("//api"), "{}", alerts.url);
        }
    }
}
