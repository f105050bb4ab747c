//! WIT values as JSON, the one encoding of the ABI (see the README): records
//! as objects keyed by WIT field names, enums as case names, variants as a
//! name or a one-key object, `list<u8>` as base64. Written once here for every
//! record of the SDK, so each language's SDK only mirrors the same shapes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};
use tend_sdk::{
    ConditionReport, Container, ContainerState, DirEntry, Direction, DrainOptions, DrainReport,
    Error, EtherType, EventType, FileKind, HeldCondition, Image, Instance, InstanceState,
    JobResult, Level, ListParams, LogEntry, LogFilter, LogPage, LogSource, Matched, Metadata,
    ObjectKey, ObjectList, OwnerTag, PatchType, PodSandbox, PortRange, Protocol, Remote, Request,
    Response, Rule, RuntimeVersion, SandboxFilter, SandboxState, SandboxStatus, SecurityGroup,
    UnitStatus,
};

/// A value that crosses the ABI. `at` names where a value sits in the
/// request ("args.req.url"), for the error message.
pub trait Wit: Sized {
    fn to_json(&self) -> Value;
    fn from_json(value: &Value, at: &str) -> Result<Self, String>;
}

/// "args.req: expected an object, got 3".
fn expected(at: &str, what: &str, got: &Value) -> String {
    let mut shown = got.to_string();
    if shown.len() > 80 {
        let mut end = 80;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push('…');
    }
    format!("{at}: expected {what}, got {shown}")
}

/// The WIT name of a Rust field or case: `timeout_ms` is `timeout-ms`,
/// `NotReady` is `not-ready`.
pub fn kebab(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c == '_' {
            out.push('-');
        } else if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Field `name` of a request object: absent reads as `null` (an `option`),
/// and a required field that is absent says so.
pub fn field<T: Wit>(object: &Map<String, Value>, name: &str, at: &str) -> Result<T, String> {
    let at = format!("{at}.{name}");
    match object.get(name) {
        Some(value) => T::from_json(value, &at),
        None => T::from_json(&Value::Null, &at).map_err(|_| format!("{at}: missing")),
    }
}

/// Refuses keys outside `known`: a misspelt `timeout_ms` must not silently
/// read as none.
pub fn known_keys(object: &Map<String, Value>, known: &[&str], at: &str) -> Result<(), String> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{at}: unknown key {key:?}, expected one of {known:?}"
        )),
        None => Ok(()),
    }
}

impl Wit for String {
    fn to_json(&self) -> Value {
        Value::String(self.clone())
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        value
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| expected(at, "a string", value))
    }
}

impl Wit for bool {
    fn to_json(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        value
            .as_bool()
            .ok_or_else(|| expected(at, "true or false", value))
    }
}

macro_rules! integers {
    ($($ty:ty: $read:ident),*) => {$(
        impl Wit for $ty {
            fn to_json(&self) -> Value {
                json!(self)
            }
            fn from_json(value: &Value, at: &str) -> Result<Self, String> {
                value
                    .$read()
                    .and_then(|n| <$ty>::try_from(n).ok())
                    .ok_or_else(|| expected(at, concat!("an integer of type ", stringify!($ty)), value))
            }
        }
    )*};
}
integers!(u8: as_u64, u16: as_u64, u32: as_u64, u64: as_u64, i64: as_i64);

impl Wit for f64 {
    fn to_json(&self) -> Value {
        json!(self)
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        value
            .as_f64()
            .ok_or_else(|| expected(at, "a number", value))
    }
}

impl<T: Wit> Wit for Option<T> {
    fn to_json(&self) -> Value {
        self.as_ref().map_or(Value::Null, T::to_json)
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            value => T::from_json(value, at).map(Some),
        }
    }
}

impl<T: Wit> Wit for Vec<T> {
    fn to_json(&self) -> Value {
        Value::Array(self.iter().map(T::to_json).collect())
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        let items = value
            .as_array()
            .ok_or_else(|| expected(at, "an array", value))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| T::from_json(item, &format!("{at}[{i}]")))
            .collect()
    }
}

impl<A: Wit, B: Wit> Wit for (A, B) {
    fn to_json(&self) -> Value {
        json!([self.0.to_json(), self.1.to_json()])
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        match value.as_array().map(Vec::as_slice) {
            Some([a, b]) => Ok((
                A::from_json(a, &format!("{at}[0]"))?,
                B::from_json(b, &format!("{at}[1]"))?,
            )),
            _ => Err(expected(at, "an array of two", value)),
        }
    }
}

/// `list<u8>`: base64 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl Wit for Bytes {
    fn to_json(&self) -> Value {
        Value::String(BASE64.encode(&self.0))
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        let text = value
            .as_str()
            .ok_or_else(|| expected(at, "base64 text (list<u8>)", value))?;
        BASE64
            .decode(text)
            .map(Bytes)
            .map_err(|e| format!("{at}: not base64 (standard alphabet, padded): {e}"))
    }
}

/// A record whose `list<u8>` fields are [`Bytes`] on the wire.
trait Field: Sized {
    type Wire: Wit;
    fn wire(&self) -> Self::Wire;
    fn unwire(wire: Self::Wire) -> Self;
}

/// Every field type but `list<u8>` crosses as itself.
macro_rules! plain_fields {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            type Wire = $ty;
            fn wire(&self) -> $ty {
                self.clone()
            }
            fn unwire(wire: $ty) -> Self {
                wire
            }
        }
    )*};
}
plain_fields!(
    String,
    bool,
    u16,
    u32,
    u64,
    i64,
    Option<String>,
    Option<u32>,
    Option<u64>,
    Vec<String>,
    Vec<(String, String)>,
    FileKind,
    SandboxState,
    Option<SandboxState>,
    ContainerState,
    PodSandbox,
    InstanceState,
    Direction,
    EtherType,
    Protocol,
    Option<PortRange>,
    Remote,
    Vec<Rule>,
    u8,
    Option<u8>,
    LogSource,
    Vec<LogEntry>
);

impl Field for Vec<u8> {
    type Wire = Bytes;
    fn wire(&self) -> Bytes {
        Bytes(self.clone())
    }
    fn unwire(wire: Bytes) -> Self {
        wire.0
    }
}

impl Field for Option<Vec<u8>> {
    type Wire = Option<Bytes>;
    fn wire(&self) -> Option<Bytes> {
        self.clone().map(Bytes)
    }
    fn unwire(wire: Option<Bytes>) -> Self {
        wire.map(|b| b.0)
    }
}

/// `Wit` for records: each field by its WIT name.
macro_rules! records {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {$(
        impl Wit for $ty {
            fn to_json(&self) -> Value {
                let mut object = Map::new();
                $( object.insert(kebab(stringify!($field)), Field::wire(&self.$field).to_json()); )*
                Value::Object(object)
            }
            fn from_json(value: &Value, at: &str) -> Result<Self, String> {
                let object = value
                    .as_object()
                    .ok_or_else(|| expected(at, concat!("an object (record ", stringify!($ty), ")"), value))?;
                let names = [$(kebab(stringify!($field))),*];
                known_keys(object, &names.each_ref().map(String::as_str), at)?;
                let [$($field),*] = &names;
                Ok($ty { $( $field: Field::unwire(field(object, $field, at)?), )* })
            }
        }
    )*};
}
records! {
    Metadata { kind, size, mode, modified_ms }
    DirEntry { name, kind }
    Request { method, url, headers, body, timeout_ms }
    Response { status, headers, body }
    UnitStatus {
        name, load_state, active_state, sub_state, unit_file_state, fragment_path,
        drop_in_paths, need_daemon_reload, active_enter_ms, n_restarts,
    }
    PodSandbox { id, pod_name, namespace, uid, attempt, state, created_at_ns, labels, annotations }
    SandboxFilter { id, state, labels }
    SandboxStatus { sandbox, ip, additional_ips }
    Container {
        id, pod_sandbox_id, name, attempt, image, image_ref, state, created_at_ns, labels,
        annotations,
    }
    Image { id, repo_tags, repo_digests, size_bytes }
    RuntimeVersion { runtime_name, runtime_version, runtime_api_version }
    ObjectKey { api_version, kind, namespace, name }
    ListParams { label_selector, field_selector, limit, continue_token }
    DrainOptions { deadline_ms, uncordon_on_give_up }
    DrainReport { evicted, skipped, remaining, uncordoned }
    Instance {
        id, name, state, status, task_state, created_at_ms, zone, private_addresses,
        public_addresses, security_groups, tags, provider_id,
    }
    OwnerTag { key, value }
    PortRange { min, max }
    Rule { direction, ether_type, protocol, ports, remote, description }
    SecurityGroup { id, name, description, rules }
    LogEntry {
        source, cursor, boot_id, monotonic_us, realtime_us, priority, facility, unit, identifier,
        message, fields,
    }
    Matched { rule, entries, missed, gap }
    LogFilter { units, identifiers, max_priority }
    LogPage { entries, cursor, gap }
    ConditionReport { condition, reason, message, ttl_seconds }
    HeldCondition { condition, active, reason, message, since, expires_in, written }
}

/// `Wit` for enums: the case name.
macro_rules! enums {
    ($($ty:ident { $($case:ident),* $(,)? })*) => {$(
        impl Wit for $ty {
            fn to_json(&self) -> Value {
                let name = match self { $( $ty::$case => stringify!($case), )* };
                Value::String(kebab(name))
            }
            fn from_json(value: &Value, at: &str) -> Result<Self, String> {
                let names = [$( (kebab(stringify!($case)), $ty::$case) ),*];
                let text = value.as_str().unwrap_or_default();
                names
                    .iter()
                    .find(|(name, _)| name == text)
                    .map(|(_, case)| *case)
                    .ok_or_else(|| {
                        let all: Vec<&str> = names.iter().map(|(name, _)| name.as_str()).collect();
                        expected(at, &format!("one of {all:?}"), value)
                    })
            }
        }
    )*};
}
enums! {
    FileKind { File, Directory, Symlink, Other }
    JobResult { Done, Failed, Canceled, Timeout, Dependency, Skipped }
    SandboxState { Ready, NotReady }
    ContainerState { Created, Running, Exited, Unknown }
    PatchType { Merge, Json, Apply }
    EventType { Normal, Warning }
    Level { Trace, Debug, Info, Warn, Error }
    InstanceState { Pending, Running, Rebooting, Stopped, Deleting, Terminated, Error, Unknown }
    Direction { Ingress, Egress }
    EtherType { Ipv4, Ipv6 }
    LogSource { Kernel, Journal }
}

/// A variant case with a payload: `{"cidr": "10.0.0.0/8"}`.
fn one_key<'a>(value: &'a Value, at: &str, what: &str) -> Result<(&'a str, &'a Value), String> {
    match value.as_object() {
        Some(object) if object.len() == 1 => {
            let (key, payload) = object.iter().next().expect("one key");
            Ok((key.as_str(), payload))
        }
        _ => Err(expected(at, what, value)),
    }
}

impl Wit for Protocol {
    fn to_json(&self) -> Value {
        match self {
            Protocol::Any => json!("any"),
            Protocol::Tcp => json!("tcp"),
            Protocol::Udp => json!("udp"),
            Protocol::Icmp => json!("icmp"),
            Protocol::Icmpv6 => json!("icmpv6"),
            Protocol::Number(n) => json!({ "number": n }),
        }
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        const WHAT: &str = r#""any", "tcp", "udp", "icmp", "icmpv6" or {"number": N}"#;
        match value.as_str() {
            Some("any") => return Ok(Protocol::Any),
            Some("tcp") => return Ok(Protocol::Tcp),
            Some("udp") => return Ok(Protocol::Udp),
            Some("icmp") => return Ok(Protocol::Icmp),
            Some("icmpv6") => return Ok(Protocol::Icmpv6),
            _ => {}
        }
        match one_key(value, at, WHAT)? {
            ("number", n) => n
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .map(Protocol::Number)
                .ok_or_else(|| expected(&format!("{at}.number"), "an integer of type u8", n)),
            _ => Err(expected(at, WHAT, value)),
        }
    }
}

impl Wit for Remote {
    fn to_json(&self) -> Value {
        match self {
            Remote::Cidr(cidr) => json!({ "cidr": cidr }),
            Remote::Group(group) => json!({ "group": group }),
        }
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        const WHAT: &str = r#"{"cidr": "10.0.0.0/8"} or {"group": "sg-..."}"#;
        match one_key(value, at, WHAT)? {
            ("cidr", cidr) => String::from_json(cidr, &format!("{at}.cidr")).map(Remote::Cidr),
            ("group", id) => String::from_json(id, &format!("{at}.group")).map(Remote::Group),
            _ => Err(expected(at, WHAT, value)),
        }
    }
}

/// One case of [`Error`] by its constructor.
type ErrorCase = fn(String) -> Error;

/// The WIT `error`: `{"kind": "denied", "message": "..."}`.
impl Wit for Error {
    fn to_json(&self) -> Value {
        json!({ "kind": self.kind(), "message": self.message() })
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        let object = value
            .as_object()
            .ok_or_else(|| expected(at, r#"an error {"kind": ..., "message": ...}"#, value))?;
        known_keys(object, &["kind", "message"], at)?;
        let kind: String = field(object, "kind", at)?;
        let message: String = field(object, "message", at)?;
        let cases: [(&str, ErrorCase); 8] = [
            ("denied", Error::Denied),
            ("not-found", Error::NotFound),
            ("conflict", Error::Conflict),
            ("unavailable", Error::Unavailable),
            ("timeout", Error::Timeout),
            ("invalid", Error::Invalid),
            ("budget-exhausted", Error::BudgetExhausted),
            ("other", Error::Other),
        ];
        let case = cases
            .iter()
            .find(|(name, _)| *name == kind)
            .ok_or_else(|| {
                let names: Vec<&str> = cases.iter().map(|(name, _)| *name).collect();
                format!("{at}.kind: expected one of {names:?}, got {kind:?}")
            })?;
        Ok(case.1(message))
    }
}

/// A kube list: its items as JSON text, as the WIT `object-list` carries them.
impl Wit for ObjectList {
    fn to_json(&self) -> Value {
        let items: Vec<String> = self.items.iter().map(Value::to_string).collect();
        json!({
            "items": items,
            "continue-token": self.continue_token,
            "resource-version": self.resource_version,
        })
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        Err(expected(
            at,
            "nothing: an object-list is only answered",
            value,
        ))
    }
}

/// A `result<T, error>` as an answer: `{"ok": T}` or `{"err": error}`.
pub fn answer<T: Wit>(result: tend_sdk::Result<T>) -> Value {
    match result {
        Ok(value) => json!({ "ok": value.to_json() }),
        Err(error) => json!({ "err": error.to_json() }),
    }
}

/// `result<_, error>`: `{"ok": null}`.
impl Wit for () {
    fn to_json(&self) -> Value {
        Value::Null
    }
    fn from_json(value: &Value, at: &str) -> Result<Self, String> {
        match value {
            Value::Null => Ok(()),
            other => Err(expected(at, "null", other)),
        }
    }
}

/// A response scripted for the http fake: `{"ok": response}` or `{"err": error}`.
pub fn scripted_response(value: &Value, at: &str) -> Result<tend_sdk::Result<Response>, String> {
    const WHAT: &str = r#"{"ok": response} or {"err": error}"#;
    match one_key(value, at, WHAT)? {
        ("ok", response) => Response::from_json(response, &format!("{at}.ok")).map(Ok),
        ("err", error) => Error::from_json(error, &format!("{at}.err")).map(Err),
        _ => Err(expected(at, WHAT, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_with_wit_names_and_base64() {
        let request = Request {
            method: "POST".into(),
            url: "http://x/".into(),
            headers: vec![("a".into(), "b".into())],
            body: Some(b"hi".to_vec()),
            timeout_ms: None,
        };
        let json = request.to_json();
        assert_eq!(
            json,
            json!({"method": "POST", "url": "http://x/", "headers": [["a", "b"]], "body": "aGk=", "timeout-ms": null})
        );
        assert_eq!(Request::from_json(&json, "req").unwrap(), request);
        let rule = Rule {
            direction: Direction::Ingress,
            ether_type: EtherType::Ipv4,
            protocol: Protocol::Number(6),
            ports: Some(PortRange { min: 1, max: 2 }),
            remote: Remote::Cidr("10.0.0.0/8".into()),
            description: None,
        };
        assert_eq!(Rule::from_json(&rule.to_json(), "rule").unwrap(), rule);
        assert_eq!(SandboxState::NotReady.to_json(), json!("not-ready"));
    }

    #[test]
    fn malformed_values_name_the_place_and_the_shape() {
        let err = Request::from_json(&json!({"method": "GET"}), "args.req").unwrap_err();
        assert_eq!(err, "args.req.url: missing");
        let err = Request::from_json(
            &json!({"method": "GET", "url": "u", "headers": [], "timeout_ms": 1}),
            "args.req",
        )
        .unwrap_err();
        assert!(
            err.starts_with("args.req: unknown key \"timeout_ms\""),
            "{err}"
        );
        let err = u16::from_json(&json!(70000), "args.status").unwrap_err();
        assert_eq!(
            err,
            "args.status: expected an integer of type u16, got 70000"
        );
        let err = FileKind::from_json(&json!("dir"), "x").unwrap_err();
        assert_eq!(
            err,
            "x: expected one of [\"file\", \"directory\", \"symlink\", \"other\"], got \"dir\""
        );
        let err = Bytes::from_json(&json!("!!"), "b").unwrap_err();
        assert!(err.starts_with("b: not base64"), "{err}");
    }
}
