//! One compile at a time, quick builds first.
//!
//! A daemon starting on an empty compile cache used to compile every plugin at
//! once (a Winch build each, then a Cranelift build each), and held 636 MB at
//! its peak with eight plugins. wasmtime already spreads one compile over every
//! core (parallel compilation), so compiling one plugin at a time costs little
//! wall time and holds one compile's working memory, not all of them. A Winch
//! build, the one a new plugin's first reconcile waits on, goes ahead of every
//! Cranelift build still waiting. When the lane goes idle, the memory the
//! compiles freed goes back to the system.

use std::sync::{Condvar, Mutex};

/// Which build is asking for the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// A Winch build a first reconcile waits on.
    Quick,
    /// A Cranelift build that replaces a running Winch build, or is cached.
    Optimized,
}

#[derive(Default)]
pub struct CompileLane {
    state: Mutex<Lane>,
    turn: Condvar,
}

#[derive(Default)]
struct Lane {
    busy: bool,
    quick_waiting: usize,
    /// Quick and optimized: when none wait as a compile ends, the lane is idle.
    waiting: usize,
}

/// Holds the lane; the next compile starts when it drops.
pub struct Turn<'a>(&'a CompileLane);

impl CompileLane {
    /// Wait for the lane (blocking: call it off the async executor).
    pub fn enter(&self, priority: Priority) -> Turn<'_> {
        let mut lane = self.state.lock().unwrap_or_else(|e| e.into_inner());
        lane.waiting += 1;
        if priority == Priority::Quick {
            lane.quick_waiting += 1;
        }
        while lane.busy || (priority == Priority::Optimized && lane.quick_waiting > 0) {
            lane = self.turn.wait(lane).unwrap_or_else(|e| e.into_inner());
        }
        lane.waiting -= 1;
        if priority == Priority::Quick {
            lane.quick_waiting -= 1;
        }
        lane.busy = true;
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut lane = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        lane.busy = false;
        let idle = lane.waiting == 0;
        drop(lane);
        self.0.turn.notify_all();
        if idle {
            give_back_compile_memory();
        }
    }
}

/// Hand the memory the compiles freed back to the system once none is
/// waiting: the allocator otherwise keeps it (measured in docs/benchmarks.md:
/// a first start's RSS stayed at its compile peak).
fn give_back_compile_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// Wait until `ready` holds, with a deadline.
    fn wait_until(what: &str, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn one_compile_at_a_time() {
        let lane = Arc::new(CompileLane::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (lane, inside, most) = (lane.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    let priority = [Priority::Quick, Priority::Optimized][i % 2];
                    for _ in 0..50 {
                        let _turn = lane.enter(priority);
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_waiting_quick_build_goes_before_a_waiting_optimized_one() {
        // Without the priority, which of the two woken threads takes the lane
        // is a coin toss: twenty rounds make a pass by luck unlikely.
        for _ in 0..20 {
            let lane = Arc::new(CompileLane::default());
            let order = Arc::new(Mutex::new(Vec::new()));
            let first = lane.enter(Priority::Optimized);
            let spawn = |priority: Priority, name: &'static str| {
                let (lane, order) = (lane.clone(), order.clone());
                std::thread::spawn(move || {
                    let _turn = lane.enter(priority);
                    order.lock().unwrap().push(name);
                })
            };
            let optimized = spawn(Priority::Optimized, "optimized");
            let quick = spawn(Priority::Quick, "quick");
            wait_until("both builds wait", || {
                lane.state.lock().unwrap().waiting == 2
            });
            drop(first);
            optimized.join().unwrap();
            quick.join().unwrap();
            assert_eq!(*order.lock().unwrap(), ["quick", "optimized"]);
        }
    }
}
