//! Network faults on loopback: a peer that never answers, ports that drop
//! SYNs or every packet (iptables).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// A TCP peer on loopback that accepts connections and never answers: a
/// mutation sent to it blocks until its caller gives up. Stops on drop.
pub struct SilentPeer {
    pub port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SilentPeer {
    pub fn start() -> SilentPeer {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (count, stopping) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        held.push(stream);
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SilentPeer {
            port,
            accepted,
            stop,
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for SilentPeer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Makes a port on loopback drop incoming SYNs (iptables, INPUT, `-i lo`): a
/// connect to it then times out, as to a cache host that is down or
/// unreachable. The rule is removed by [`SynDrop::accept_syns`] or on drop.
/// Needs root.
pub fn drop_syns(port: u16) -> SynDrop {
    insert_drop(port, "", &["--syn"])
}

/// Inserts `-i lo -p tcp --dport PORT <matching> -j DROP`, tagged with a
/// comment naming this process (`kind` tells the rules of one port apart), so
/// [`remove_stale_syn_drops`] removes it if this process dies.
fn insert_drop(port: u16, kind: &str, matching: &[&str]) -> SynDrop {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    remove_stale_syn_drops();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let comment = format!("{SYN_DROP_TAG}{}:{port}:{kind}{n}", std::process::id());
    let dport = port.to_string();
    let mut rule: Vec<String> = ["-i", "lo", "-p", "tcp", "--dport", &dport]
        .into_iter()
        .chain(matching.iter().copied())
        .map(str::to_string)
        .collect();
    rule.extend(["-m", "comment", "--comment", &comment, "-j", "DROP"].map(str::to_string));
    let output = iptables(&["-I", "INPUT"], &rule);
    assert!(
        output.status.success(),
        "iptables -I INPUT {rule:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    SynDrop {
        port,
        rule: Some(rule),
    }
}

/// An iptables rule that drops SYNs to a loopback port; see [`drop_syns`].
pub struct SynDrop {
    port: u16,
    rule: Option<Vec<String>>,
}

/// The comment that marks the harness's rules: `tend-e2e-syn-drop:PID:PORT:N`.
const SYN_DROP_TAG: &str = "tend-e2e-syn-drop:";

impl SynDrop {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Remove the rule: the port answers again.
    pub fn accept_syns(mut self) {
        let rule = self.rule.take().unwrap();
        let output = iptables(&["-D", "INPUT"], &rule);
        assert!(
            output.status.success(),
            "iptables -D INPUT {rule:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for SynDrop {
    fn drop(&mut self) {
        if let Some(rule) = self.rule.take() {
            let output = iptables(&["-D", "INPUT"], &rule);
            if !output.status.success() {
                eprintln!(
                    "iptables -D INPUT {rule:?} failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
}

fn iptables(command: &[&str], rule: &[String]) -> Output {
    // -w: wait for the xtables lock (tests run in parallel).
    Command::new("iptables")
        .args(["-w", "10"])
        .args(command)
        .args(rule)
        .output()
        .expect("cannot run iptables (Debian package iptables)")
}

/// Remove the SYN-drop rules of test processes that died before dropping them.
fn remove_stale_syn_drops() {
    let Ok(output) = Command::new("iptables")
        .args(["-w", "10", "-S", "INPUT"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some((_, tagged)) = line.split_once(SYN_DROP_TAG) else {
            continue;
        };
        let pid = tagged.split(':').next().unwrap_or_default();
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        // `-A INPUT <rule>` as -S prints it; the comment (quoted) has no spaces.
        let rule: Vec<String> = line
            .split_whitespace()
            .skip(2)
            .map(|a| a.trim_matches('"').to_string())
            .collect();
        let _ = iptables(&["-D", "INPUT"], &rule);
    }
}

/// Makes a port on loopback drop every incoming TCP packet (iptables, INPUT,
/// `-i lo`), not only SYNs: a host gone dark, whose established connections
/// go silent too (a client's pooled keep-alive connection included) while new
/// connects time out. Undone like [`drop_syns`]: [`SynDrop::accept_syns`] or
/// drop. Needs root.
pub fn drop_packets(port: u16) -> SynDrop {
    insert_drop(port, "all", &[])
}
