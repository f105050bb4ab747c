//! The starter plugin `tend-author new` writes, in every language, side by side
//! (numbers go to docs/benchmarks.md). Needs `cargo xtask plugins` first.
//!
//!   cargo bench -p tend --bench languages
//!
//! Per language: component size; cold compile by Cranelift (the engine that
//! serves) and by Winch (the baseline that serves first); cached load; one
//! trivial reconcile (a config without `url`: the plugin parses its config
//! and fails, no capability call); one full reconcile of the starter plugin
//! (state get and set, an HTTP GET, a kube get, a file write: five
//! capability calls) against the in-memory backends, so only the host and
//! the guest are measured.

mod common;
mod winch;
use common::{bench_config, plugins_dir, timed_reconcile};
use serde_json::json;
use std::time::{Duration, Instant};
use tend::capabilities::Services;
use tend::runtime::Runtime;
use winch::winch_engine;

const LANGS: [(&str, usize); 5] = [
    ("rust", 2000),
    ("c", 2000),
    ("js", 500),
    ("go", 200),
    ("python", 200),
];

fn p50(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn main() {
    let plugins = plugins_dir();
    let mut text = String::new();
    for (lang, _) in LANGS {
        let name = format!("{lang}-probe");
        text += &format!(
            "[plugins.{name}]\n[plugins.{name}.grants]\nfiles = [{{ path = \"/var/lib/probe\", write = true }}]\nhttp = [\"http://probe.local/healthz\"]\nkube = [{{ resource = \"nodes\", verbs = [\"get\"], names = [\"bench\"] }}]\n[plugins.{name}.config]\nurl = \"http://probe.local/healthz\"\nreport = \"/var/lib/probe/report.txt\"\n"
        );
        text += &format!(
            "[plugins.{lang}-trivial]\nfile = \"{}/{name}.wasm\"\n",
            plugins.display()
        );
    }
    let config = bench_config(&text);
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(Some(cache.path()), 4).unwrap();
    let winch = winch_engine();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (services, fakes) = Services::fake();
    fakes.http.respond("http://probe.local/healthz", 200);
    fakes.kube.put(
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bench"}}),
    );

    println!(
        "{:<8} {:>10} {:>13} {:>10} {:>12} {:>14} {:>14}",
        "language", "bytes", "cranelift ms", "winch ms", "cached ms", "trivial us", "5 calls us"
    );
    for (lang, iterations) in LANGS {
        let file = plugins.join(format!("{lang}-probe.wasm"));
        let size = std::fs::metadata(&file).unwrap().len();
        let bytes = std::fs::read(&file).unwrap();
        let started = Instant::now();
        let winch_ms = match wasmtime::component::Component::new(&winch, &bytes) {
            Ok(_) => format!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
            Err(_) => "fails".to_string(),
        };
        let cold = runtime.load(&file).unwrap();
        let cached = p50((0..20)
            .map(|_| runtime.load(&file).unwrap().load_time)
            .collect());
        let run = |name: &str, ok: bool| {
            let plugin_config = &config.plugins[name];
            tokio.block_on(async {
                let mut samples = Vec::with_capacity(iterations);
                for i in 0..iterations + 20 {
                    let (elapsed, report) =
                        timed_reconcile(&runtime, &cold, plugin_config, &services).await;
                    assert_eq!(report.result.is_ok(), ok, "{name}: {:?}", report.result);
                    if i >= 20 {
                        samples.push(elapsed);
                    }
                }
                p50(samples)
            })
        };
        let trivial = run(&format!("{lang}-trivial"), false);
        let full = run(&format!("{lang}-probe"), true);
        println!(
            "{lang:<8} {size:>10} {:>13.1} {winch_ms:>10} {:>12.2} {trivial:>14.1} {full:>14.1}",
            cold.load_time.as_secs_f64() * 1e3,
            cached / 1e3,
        );
    }
}
