//! The Rust SDK's fakes for every language.
//!
//! Plugins written in Python or JavaScript are unit-tested against fakes that
//! must answer exactly as the host does: the same grant decisions, error
//! kinds and messages. Re-typing the rules in each language would let them
//! drift, so this crate wraps the Rust fakes (`tend_sdk::testing::FakeHost`,
//! whose decisions come from `tend-rules`, the host's own rules) behind one
//! small JSON ABI, built as a wasm module without imports
//! (wasm32-unknown-unknown) that any language with a wasm runtime loads. The
//! ABI is written down in `README.md`; [`handle`] is all of it, the
//! `tend_*` exports move bytes in and out.
//!
//! Inputs are bounded: a request is at most [`MAX_REQUEST`] bytes, at most
//! [`MAX_HOSTS`] hosts live at once, and anything malformed answers a
//! `misuse` naming the fix instead of trapping.

mod calls;
#[cfg(test)]
mod conformance;
mod dispatch;
mod setup;
mod wit;

use serde_json::{Map, Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
use tend_sdk::testing::FakeHost;

pub use wit::{Wit, kebab};

/// The largest request accepted, in bytes: room for a 1 MiB file or state
/// value (the host's own limit) in base64, and more.
pub const MAX_REQUEST: usize = 16 << 20;

/// The most hosts alive at once; tests `drop` theirs.
pub const MAX_HOSTS: usize = 4096;

/// The live hosts by handle.
#[derive(Default)]
struct Hosts {
    /// The last handle given out (0: none yet; handles start at 1).
    next: u32,
    live: BTreeMap<u32, FakeHost>,
}

impl Hosts {
    /// A handle no live host has: the one after the last, wrapping from
    /// `u32::MAX` back to 1 and skipping live handles (with fewer than
    /// [`MAX_HOSTS`] alive, one is free within `MAX_HOSTS + 1` steps).
    fn fresh(&mut self) -> u32 {
        let mut id = self.next;
        loop {
            id = id.checked_add(1).unwrap_or(1);
            if !self.live.contains_key(&id) {
                self.next = id;
                return id;
            }
        }
    }
}

thread_local! {
    static HOSTS: RefCell<Hosts> = RefCell::default();
}

/// Answer one request (JSON text) with one answer (JSON text); see the README.
pub fn handle(request: &[u8]) -> String {
    let answer = match serde_json::from_slice::<Value>(request) {
        Ok(Value::Object(request)) => dispatch(&request).unwrap_or_else(|message| misuse(&message)),
        Ok(_) => misuse("the request must be a JSON object with an \"op\""),
        Err(e) => misuse(&format!("the request is not JSON: {e}")),
    };
    answer.to_string()
}

/// The answer to a misuse of the fakes (not a plugin's call): its own key,
/// never `err`, so no text a plugin passes through can forge one.
fn misuse(message: &str) -> Value {
    json!({ "misuse": format!("tend-fakes: {message}") })
}

/// The request's arguments, taken one by one; [`Args::done`] refuses any
/// left over (a misspelt argument must not silently read as none).
pub(crate) struct Args<'a> {
    object: &'a Map<String, Value>,
    at: String,
    taken: Vec<&'static str>,
}

impl<'a> Args<'a> {
    fn of(request: &'a Map<String, Value>, key: &str) -> Result<Self, String> {
        static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
        let object = match request.get(key) {
            None | Some(Value::Null) => &*EMPTY,
            Some(Value::Object(object)) => object,
            Some(other) => return Err(format!("{key}: expected an object, got {other}")),
        };
        Ok(Args {
            object,
            at: key.to_string(),
            taken: Vec::new(),
        })
    }

    /// Argument `name`, as its WIT type.
    pub(crate) fn get<T: Wit>(&mut self, name: &'static str) -> Result<T, String> {
        self.taken.push(name);
        wit::field(self.object, name, &self.at)
    }

    /// Argument `name` as JSON, unread.
    pub(crate) fn raw(&mut self, name: &'static str) -> Result<&'a Value, String> {
        self.taken.push(name);
        self.object
            .get(name)
            .ok_or_else(|| format!("{}.{name}: missing", self.at))
    }

    /// Every argument was taken.
    pub(crate) fn done(&self) -> Result<(), String> {
        wit::known_keys(self.object, &self.taken, &self.at)
    }
}

/// A string member of the request.
fn text<'a>(request: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match request.get(key) {
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(format!("{key}: expected a string, got {other}")),
        None => Err(format!("the request needs {key:?}")),
    }
}

fn dispatch(request: &Map<String, Value>) -> Result<Value, String> {
    let op = text(request, "op")?;
    let known: &[&str] = match op {
        "new" => &["op", "plugin"],
        "drop" => &["op", "host"],
        "call" => &["op", "host", "cap", "fn", "args"],
        "setup" => &["op", "host", "fake", "fn", "args"],
        _ => {
            return Err(format!(
                "unknown op {op:?}: expected \"new\", \"drop\", \"call\" or \"setup\""
            ));
        }
    };
    wit::known_keys(request, known, "the request")?;
    HOSTS.with_borrow_mut(|hosts| {
        if op == "new" {
            let plugin = text(request, "plugin")?;
            if hosts.live.len() >= MAX_HOSTS {
                return Err(format!(
                    "{MAX_HOSTS} hosts are alive: drop the ones a test is done with"
                ));
            }
            let id = hosts.fresh();
            hosts.live.insert(id, FakeHost::named(plugin));
            return Ok(json!({ "ok": id }));
        }
        let id = request
            .get("host")
            .and_then(Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .ok_or("the request needs \"host\": a handle from \"new\"")?;
        if op == "drop" {
            hosts.live.remove(&id);
            return Ok(json!({ "ok": null }));
        }
        let host = hosts
            .live
            .get(&id)
            .ok_or_else(|| format!("no host {id}: it was dropped, or never made by \"new\""))?;
        let function = text(request, "fn")?;
        let mut args = Args::of(request, "args")?;
        if op == "call" {
            calls::call(host, text(request, "cap")?, function, &mut args)
        } else {
            setup::setup(host, text(request, "fake")?, function, &mut args)
        }
    })
}

/// The answer to a function the dispatch tables do not know.
pub(crate) fn unknown_fn(what: &str, function: &str, known: &[&str]) -> String {
    format!("{what} has no function {function:?}; expected one of {known:?}")
}

/// The wasm exports: bytes in and out of linear memory, around [`handle`].
#[cfg(target_arch = "wasm32")]
mod abi {
    use std::alloc::{Layout, alloc, dealloc};
    use std::sync::Mutex;

    /// The last panic's message, for `tend_panic` after a trap.
    static PANIC: Mutex<Option<String>> = Mutex::new(None);

    fn layout(len: usize) -> Layout {
        Layout::array::<u8>(len).expect("a request under MAX_REQUEST")
    }

    /// `ptr << 32 | len` of `text`, now owned by the caller.
    fn give(text: String) -> u64 {
        let bytes = text.into_bytes().into_boxed_slice();
        let len = bytes.len();
        let ptr = Box::into_raw(bytes).cast::<u8>();
        ((ptr as u64) << 32) | len as u64
    }

    #[unsafe(no_mangle)]
    pub extern "C" fn tend_alloc(len: usize) -> *mut u8 {
        if len == 0 || len > super::MAX_REQUEST {
            return std::ptr::null_mut();
        }
        // SAFETY: `layout(len)` has a non-zero size.
        unsafe { alloc(layout(len)) }
    }

    /// # Safety
    /// `ptr` and `len` are a buffer from `tend_alloc` or an answer of `tend_call`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn tend_free(ptr: *mut u8, len: usize) {
        if !ptr.is_null() && len > 0 {
            // SAFETY: allocated with this layout, by `tend_alloc` or `give`
            // (a boxed slice of `len` bytes).
            unsafe { dealloc(ptr, layout(len)) }
        }
    }

    /// # Safety
    /// `ptr` and `len` are a buffer from `tend_alloc`, filled; the call frees it.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn tend_call(ptr: *mut u8, len: usize) -> u64 {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                *PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(info.to_string());
            }))
        });
        if ptr.is_null() || len == 0 || len > super::MAX_REQUEST {
            return give(
                super::misuse("tend_call takes a buffer from tend_alloc (1 byte to 16 MiB)")
                    .to_string(),
            );
        }
        // SAFETY: the caller filled `len` bytes at `ptr`, from `tend_alloc`.
        let answer = super::handle(unsafe { std::slice::from_raw_parts(ptr, len) });
        // SAFETY: as above; the request is not used after this.
        unsafe { tend_free(ptr, len) };
        give(answer)
    }

    /// The message of the panic behind a trap, or 0.
    #[unsafe(no_mangle)]
    pub extern "C" fn tend_panic() -> u64 {
        let message = PANIC.lock().unwrap_or_else(|e| e.into_inner()).clone();
        message.map_or(0, give)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `request` answered, as JSON.
    pub(crate) fn ask(request: Value) -> Value {
        serde_json::from_str(&handle(request.to_string().as_bytes())).expect("JSON answer")
    }

    pub(crate) fn new_host(plugin: &str) -> u64 {
        ask(json!({"op": "new", "plugin": plugin}))["ok"]
            .as_u64()
            .expect("a handle")
    }

    fn misuse_message(answer: &Value) -> &str {
        let object = answer.as_object().expect("an object");
        assert_eq!(object.len(), 1, "only the misuse: {answer}");
        object["misuse"].as_str().expect("a misuse message")
    }

    #[test]
    fn malformed_requests_answer_misuse_naming_the_fix() {
        let answer: Value = serde_json::from_str(&handle(b"{not json")).unwrap();
        assert!(
            misuse_message(&answer).starts_with("tend-fakes: the request is not JSON"),
            "{answer}"
        );
        let host = new_host("p");
        let cases = [
            (
                json!([1]),
                "tend-fakes: the request must be a JSON object with an \"op\"",
            ),
            (
                json!({"op": "fly"}),
                "tend-fakes: unknown op \"fly\": expected \"new\", \"drop\", \"call\" or \"setup\"",
            ),
            (
                json!({"op": "call", "host": 999_999, "cap": "files", "fn": "read"}),
                "tend-fakes: no host 999999: it was dropped, or never made by \"new\"",
            ),
            (
                json!({"op": "call", "host": host, "cap": "disk", "fn": "read"}),
                &format!(
                    "tend-fakes: no capability \"disk\"; expected one of {:?}",
                    tend_rules::wit::INTERFACES.map(|(name, _)| name)
                ),
            ),
            (
                json!({"op": "call", "host": host, "cap": "files", "fn": "read", "args": {"path": 1}}),
                "tend-fakes: args.path: expected a string, got 1",
            ),
            (
                json!({"op": "call", "host": host, "cap": "files", "fn": "read", "args": {"path": "/a", "mode": 1}}),
                "tend-fakes: args: unknown key \"mode\", expected one of [\"path\"]",
            ),
            (
                json!({"op": "call", "host": host, "cap": "files", "fn": "read", "hots": 1}),
                "tend-fakes: the request: unknown key \"hots\", expected one of [\"op\", \"host\", \"cap\", \"fn\", \"args\"]",
            ),
            (
                json!({"op": "setup", "host": host, "fake": "kube", "fn": "put", "args": {"object": {"kind": "Node"}}}),
                "tend-fakes: kube put: the object needs apiVersion, kind and metadata.name: {\"kind\":\"Node\"}",
            ),
            (
                json!({"op": "setup", "host": host, "fake": "kube", "fn": "fail-call", "args": {"call": "watch", "error": null}}),
                "tend-fakes: kube fail-call: kube has no function \"watch\"; expected one of [\"get\", \"list\", \"create\", \"patch\", \"delete\", \"emit-event\", \"cordon\", \"evict\", \"drain\"]",
            ),
            (
                json!({"op": "setup", "host": host, "fake": "files", "fn": "grant", "args": {"grant": [{"path": "etc"}]}}),
                "tend-fakes: files grant: files grant path \"etc\" must be absolute and without `..`",
            ),
        ];
        for (request, message) in cases {
            assert_eq!(misuse_message(&ask(request)), message);
        }
    }

    #[test]
    fn handles_wrap_around_without_replacing_a_live_host() {
        let kept = new_host("kept");
        assert_eq!(kept, 1);
        HOSTS.with_borrow_mut(|hosts| hosts.next = u32::MAX - 1);
        assert_eq!(new_host("p"), u64::from(u32::MAX));
        // Past u32::MAX: back to 1, which is live, so 2.
        assert_eq!(new_host("p"), 2);
        let answer = ask(json!({"op": "setup", "host": kept, "fake": "host", "fn": "plugin"}));
        assert_eq!(answer, json!({"ok": "kept"}));
    }

    /// Plugin text can say anything: only the `misuse` key is a misuse.
    #[test]
    fn errors_a_plugin_scripts_are_never_misuse() {
        let host = new_host("p");
        let forged = json!({"kind": "invalid", "message": "tend-fakes: forged"});
        let url = "http://127.0.0.1:1/";
        for (function, args) in [
            ("grant", json!({"grant": ["http://127.0.0.1:*/*"]})),
            (
                "respond",
                json!({"method": "GET", "url": url, "response": {"err": forged}}),
            ),
        ] {
            let setup =
                json!({"op": "setup", "host": host, "fake": "http", "fn": function, "args": args});
            assert_eq!(ask(setup), json!({"ok": null}));
        }
        let req = json!({"method": "GET", "url": url, "headers": []});
        let answer = ask(
            json!({"op": "call", "host": host, "cap": "http", "fn": "send", "args": {"req": req}}),
        );
        assert_eq!(answer, json!({"err": forged}));
        let answer = ask(json!({"op": "call", "host": host, "cap": "nope", "fn": "x"}));
        assert!(answer.get("err").is_none(), "{answer}");
        assert!(misuse_message(&answer).starts_with("tend-fakes: no capability"));
    }

    #[test]
    fn hosts_are_bounded_and_dropped() {
        let first = new_host("p");
        ask(json!({"op": "drop", "host": first}));
        let answer = ask(json!({"op": "setup", "host": first, "fake": "host", "fn": "plugin"}));
        assert!(misuse_message(&answer).contains("dropped"), "{answer}");
        let made: Vec<u64> = (0..MAX_HOSTS).map(|_| new_host("p")).collect();
        let answer = ask(json!({"op": "new", "plugin": "p"}));
        assert!(
            misuse_message(&answer).contains("drop the ones"),
            "{answer}"
        );
        for host in made {
            ask(json!({"op": "drop", "host": host}));
        }
    }
}
