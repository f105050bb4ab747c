//! Log triggers as operators run them (the release `tend`, the real chaos
//! plugin, a kernel log file in the `/dev/kmsg` record format behind the same
//! reader as the device): line written -> plugin woken (p50, p99), host CPU
//! per 10,000 lines no rule matches, and RSS. Needs `cargo xtask plugins`.
//!
//!   cargo bench -p tend --bench logs

#[allow(dead_code)]
mod landing;
use landing::{settle, start_with_host};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tend_e2e::{Sandbox, append_kmsg, cpu_ticks, epoch_ms, plugin_status, rss_kib, time_until};

fn kmsg(path: &Path, first: u64, messages: impl Iterator<Item = String>) -> u64 {
    append_kmsg(path, first, 6, messages)
}

fn runs(port: u16) -> u64 {
    plugin_status(port, "watcher")["reconciles"]
        .as_u64()
        .unwrap_or(0)
}

/// NPD's kernel rules' patterns (config/kernel-monitor.json), as watch rules.
const RULES: [(&str, &str); 4] = [
    (
        "oom",
        r"Killed process \d+ (.+) total-vm:\d+kB, anon-rss:\d+kB, file-rss:\d+kB.*",
    ),
    (
        "hung",
        r"task [\S ]+:\w+ blocked for more than \w+ seconds\.",
    ),
    ("oops", r"BUG: unable to handle kernel"),
    (
        "netdev",
        r"unregister_netdevice: waiting for \w+ to become free. Usage count = \d+",
    ),
];

fn main() {
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let sandbox = Sandbox::new();
    let log = sandbox.path("kmsg");
    std::fs::write(
        sandbox.path("boot_id"),
        "0f5e3c7d9a0b4c1d8e2f3a4b5c6d7e8f\n",
    )
    .unwrap();
    std::fs::write(&log, "").unwrap();
    sandbox.add_plugin("chaos", "watcher");
    let mut plugins = "[plugins.watcher]\ninterval = \"24h\"\n[plugins.watcher.config]\nmode = \"log-matches\"\n[plugins.watcher.grants.logs]\nkernel = true\n".to_string();
    for (rule, pattern) in RULES {
        plugins += &format!(
            "[[plugins.watcher.grants.logs.watch]]\nrule = \"{rule}\"\nsource = \"kernel\"\npattern = '{pattern}'\nburst = 1000\nper-minute = 60000\n"
        );
    }
    let host = format!(
        "[host.logs]\nkernel-path = \"{}\"\nboot-id-path = \"{}\"\n",
        log.display(),
        sandbox.path("boot_id").display()
    );
    // The first start compiles and caches the plugin; the measured one loads
    // it from the cache, as a node's daemon does after its first start.
    let (filling, port) = start_with_host(&sandbox, &host, &plugins, "warn");
    settle(port, "watcher");
    drop(filling);
    let (daemon, port) = start_with_host(&sandbox, &host, &plugins, "warn");
    settle(port, "watcher");
    time_until(Duration::from_secs(30), "the rules' cursors", || {
        std::fs::read_to_string(sandbox.path("state/logs/watcher.json")).is_ok()
    });
    let pid = daemon.pid();
    let mut seq = 1;

    println!("== kernel line written -> plugin woken (reconcile ended) ==");
    let mut latencies = vec![];
    for i in 0..200 {
        let before = runs(port);
        let written = SystemTime::now();
        seq = kmsg(
            &log,
            seq,
            std::iter::once(format!(
                "INFO: task kworker/{i}:1 blocked for more than 120 seconds."
            )),
        );
        // The reconcile's own end time (ms), polled every 20 ms: polling
        // faster would load the daemon it measures.
        let mut ended = None;
        time_until(Duration::from_secs(10), "the wake-up", || {
            let status = plugin_status(port, "watcher");
            let done = status["reconciles"].as_u64() > Some(before);
            if done {
                ended = status["last"]["time"].as_str().map(epoch_ms);
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
            done
        });
        let written = written.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        latencies.push(Duration::from_millis(
            ended.expect("its time").saturating_sub(written),
        ));
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "p50 {:.0} ms   p99 {:.0} ms   max {:.0} ms   (200 lines, 4 rules; to the reconcile's end, 1 ms resolution)",
        ms(latencies[100]),
        ms(latencies[198]),
        ms(latencies[199])
    );

    println!("\nRSS before the floods: {} KiB", rss_kib(pid));
    println!("\n== host CPU for lines no rule matches ==");
    let ticks_per_s = 100.0;
    for total in [100_000u64, 300_000] {
        let before_runs = runs(port);
        let cpu = cpu_ticks(pid);
        let started = Instant::now();
        let mut written = 0;
        while written < total {
            let n = 10_000.min(total - written);
            seq = kmsg(
                &log,
                seq,
                (0..n).map(|i| format!("eth0: NIC Link is Up 1000 Mbps Full Duplex, flow {i}")),
            );
            written += n;
        }
        seq = kmsg(
            &log,
            seq,
            std::iter::once("INFO: task end:1 blocked for more than 120 seconds.".to_string()),
        );
        time_until(Duration::from_secs(120), "the flood read", || {
            runs(port) > before_runs
        });
        let took = started.elapsed();
        let cpu_ms = (cpu_ticks(pid) - cpu) as f64 * 1e3 / ticks_per_s;
        println!(
            "{total} lines: {:.0} ms CPU ({:.1} ms per 10k lines), read in {:.0} ms ({:.0} lines/s), woke the plugin {} time(s)",
            cpu_ms,
            cpu_ms / (total as f64 / 10_000.0),
            ms(took),
            total as f64 / took.as_secs_f64(),
            runs(port) - before_runs
        );
    }
    println!("\nRSS after the floods: {} KiB", rss_kib(pid));
}
