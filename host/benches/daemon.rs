//! The daemon as operators run it (the release `tend` binary, real files):
//! time from a plugin file landing to its first reconcile on the new version,
//! start-up to first reconcile, and idle RSS and CPU. Needs `cargo xtask plugins`.
//!
//!   cargo bench -p tend --bench daemon

mod landing;
use landing::{land, settle, start, start_with_host};
use std::time::{Duration, Instant};
use tend_e2e::{
    Sandbox, built_in_plugins, cpu_ticks, peak_rss_kib, plugin, plugin_status, rss_kib, time_until,
};

/// Delete the plugin's file and wait until the daemon reports it missing.
fn unland(sandbox: &Sandbox, port: u16, name: &str) {
    std::fs::remove_file(sandbox.path(&format!("plugins/{name}.wasm"))).unwrap();
    time_until(Duration::from_secs(30), "the plugin missing", || {
        plugin_status(port, name)["state"] == "missing"
    });
}

fn main() {
    // SAFETY: no other thread runs yet. The harness runs `tend` from TEND_BIN:
    // here the release build cargo made for this bench.
    unsafe { std::env::set_var("TEND_BIN", env!("CARGO_BIN_EXE_tend")) };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    println!("== plugin file landing -> first reconcile on it ==");
    for (name, file, config) in [
        ("rust", "chaos", "[plugins.rust.config]\nmode = \"noop\"\n"),
        (
            "python",
            "python-http-check",
            "[plugins.python.grants]\nhttp = [\"http://127.0.0.1:*/*\"]\n[plugins.python.config]\nurls = [\"http://127.0.0.1:1/\"]\n",
        ),
    ] {
        let sandbox = Sandbox::new();
        let (_daemon, port) = start(&sandbox, &format!("[plugins.{name}]\n{config}"), "warn");
        let cold = land(&sandbox, port, name, &plugin(file));
        settle(port, name);
        unland(&sandbox, port, name);
        let warm = land(&sandbox, port, name, &plugin(file));
        println!(
            "{name:<8} cache cold {:>8.1} ms   cache warm {:>7.1} ms",
            ms(cold),
            ms(warm)
        );
    }

    println!("\n== start-up and idle, with the built-in plugin loaded ==");
    let sandbox = Sandbox::new();
    sandbox.add_plugin("mirror-gate", "mirror-gate");
    let config = "[plugins.mirror-gate]\ninterval = \"1h\"\n[plugins.mirror-gate.grants]\nfiles = [{ path = \"/tmp/tend-bench-certs.d\", write = true }]\n[plugins.mirror-gate.config]\ncerts-dir = \"/tmp/tend-bench-certs.d\"\n";
    let (filling, port) = start(&sandbox, config, "warn");
    settle(port, "mirror-gate");
    drop(filling); // the compile cache now holds the Cranelift build
    let started = Instant::now();
    let (daemon, port) = start(&sandbox, config, "warn");
    time_until(Duration::from_secs(30), "the first reconcile", || {
        plugin_status(port, "mirror-gate")["reconciles"].as_u64() >= Some(1)
    });
    println!(
        "start-up to first reconcile (warm cache): {:.1} ms",
        ms(started.elapsed())
    );
    let pid = daemon.pid();
    std::thread::sleep(Duration::from_secs(2));
    let (ticks_before, idle_from) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(20));
    let ticks = cpu_ticks(pid) - ticks_before;
    let ticks_per_second = 100.0;
    println!(
        "idle: RSS {} KiB (peak {} KiB), CPU {:.3} % over {:.0} s ({ticks} ticks)",
        rss_kib(pid),
        peak_rss_kib(pid),
        ticks as f64 / ticks_per_second / idle_from.elapsed().as_secs_f64() * 100.0,
        idle_from.elapsed().as_secs_f64()
    );

    println!("\n== start-up with every built-in plugin: peak and settled RSS ==");
    // Issue 31's item 4 (at most 60 MB): a node's first start compiles every
    // plugin (a Winch build each for its first reconcile, then the Cranelift
    // builds, cached); a restart maps the cached builds.
    let sandbox = Sandbox::new();
    let built_ins = built_in_plugins();
    let mut config = String::new();
    for name in &built_ins {
        sandbox.add_plugin(name, name);
        config += &format!("[plugins.{name}]\ninterval = \"1h\"\n");
    }
    // The image's way: the same first start, every build made ahead of time
    // (`tend plugins precompile`, as `cargo xtask image` does) in a
    // `precompiled-dir`, so nothing is compiled.
    let precompiled = sandbox.path("precompiled");
    let made = std::process::Command::new(tend_e2e::tend_bin())
        .args(["plugins", "precompile", "--out"])
        .arg(&precompiled)
        .args(
            built_ins
                .iter()
                .map(|name| sandbox.path(&format!("plugins/{name}.wasm"))),
        )
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let host = format!("precompiled-dir = \"{}\"", precompiled.display());
    for cache in ["empty", "warm", "empty, builds precompiled"] {
        let with = match cache.ends_with("precompiled") {
            true => {
                std::fs::remove_dir_all(sandbox.path("cache")).unwrap();
                host.as_str()
            }
            false => "",
        };
        let (daemon, port) = start_with_host(&sandbox, with, &config, "warn");
        for name in &built_ins {
            settle(port, name);
        }
        std::thread::sleep(Duration::from_secs(5));
        println!(
            "compile cache {cache}: peak RSS {} KiB, RSS once settled {} KiB",
            peak_rss_kib(daemon.pid()),
            rss_kib(daemon.pid())
        );
    }
}
