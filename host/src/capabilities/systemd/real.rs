//! systemd over D-Bus with zbus: the system bus, or `[host.systemd] bus`. The
//! connection is opened on first use and dropped on any bus error, so a bus
//! that goes away makes calls `unavailable` (the plugin backs off) and the
//! next call after it returns reconnects.

use super::backend::{
    JOB_TIMEOUT, JobKind, JobResult, SystemdBackend, UnitChange, UnitFileChange, UnitStatus,
    listed_unit,
};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::time::Duration;
use zbus::Connection;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

const DEST: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const SERVICE: &str = "org.freedesktop.systemd1.Service";
/// Longest wait for one bus round trip.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RealSystemd {
    /// None: the system bus.
    address: Option<String>,
    connection: tokio::sync::Mutex<Option<Bus>>,
}

/// One connection to the bus, and what lives as long as it.
struct Bus {
    connection: Connection,
    /// Reads and drops systemd's JobRemoved signals while the connection
    /// lives. The subscription stays, so a job's own stream joins it with no
    /// AddMatch round trip before the job's call; and it is read, because an
    /// unread stream stalls the connection once its queue is full.
    jobs: tokio::task::JoinHandle<()>,
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.jobs.abort();
    }
}

/// systemd's JobRemoved signals: how a job's end is seen.
fn job_removed() -> Result<zbus::MatchRule<'static>, zbus::Error> {
    Ok(zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(DEST)?
        .interface(MANAGER)?
        .member("JobRemoved")?
        .build())
}

impl RealSystemd {
    pub fn new(address: Option<String>) -> Self {
        RealSystemd {
            address,
            connection: tokio::sync::Mutex::const_new(None),
        }
    }

    fn bus(&self) -> &str {
        self.address.as_deref().unwrap_or("the system bus")
    }

    async fn connect(&self) -> Result<Connection, CapError> {
        let mut slot = self.connection.lock().await;
        if let Some(bus) = slot.as_ref() {
            return Ok(bus.connection.clone());
        }
        let connecting = async {
            let connection = match &self.address {
                Some(address) => {
                    zbus::connection::Builder::address(address.as_str())?
                        .build()
                        .await?
                }
                None => Connection::system().await?,
            };
            // Without Subscribe systemd emits no JobRemoved or PropertiesChanged.
            connection
                .call_method(Some(DEST), MANAGER_PATH, Some(MANAGER), "Subscribe", &())
                .await?;
            let mut jobs =
                zbus::MessageStream::for_match_rule(job_removed()?, &connection, Some(64)).await?;
            let jobs = tokio::spawn(async move { while jobs.next().await.is_some() {} });
            Ok::<_, zbus::Error>(Bus { connection, jobs })
        };
        let bus = tokio::time::timeout(CALL_TIMEOUT, connecting)
            .await
            .map_err(|_| self.unavailable("no answer"))?
            .map_err(|e| self.unavailable(&e.to_string()))?;
        let connection = bus.connection.clone();
        *slot = Some(bus);
        Ok(connection)
    }

    fn unavailable(&self, why: &str) -> CapError {
        CapError::Unavailable(format!("systemd on {}: {why}", self.bus()))
    }

    /// Map a failed call; a transport failure drops the connection.
    async fn failed(&self, what: &str, e: zbus::Error) -> CapError {
        match &e {
            zbus::Error::MethodError(name, message, _) => {
                let message = message.clone().unwrap_or_default();
                match name.as_str() {
                    "org.freedesktop.systemd1.NoSuchUnit"
                    | "org.freedesktop.DBus.Error.FileNotFound" => {
                        CapError::NotFound(format!("{what}: {message}"))
                    }
                    "org.freedesktop.DBus.Error.AccessDenied" => {
                        CapError::Denied(format!("{what}: systemd refused: {message}"))
                    }
                    "org.freedesktop.systemd1.UnitMasked"
                    | "org.freedesktop.systemd1.JobTypeNotApplicable"
                    | "org.freedesktop.systemd1.OnlyByDependency"
                    | "org.freedesktop.systemd1.UnitExists" => {
                        CapError::Conflict(format!("{what}: {message}"))
                    }
                    _ => CapError::Other(format!("{what}: {name}: {message}")),
                }
            }
            _ => {
                *self.connection.lock().await = None;
                self.unavailable(&format!("{what}: {e}"))
            }
        }
    }

    /// Call a Manager method and deserialize its reply.
    async fn manager<B, R>(&self, what: &str, method: &str, body: &B) -> Result<R, CapError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
        R: for<'d> serde::Deserialize<'d> + zbus::zvariant::Type,
    {
        let connection = self.connect().await?;
        let call = connection.call_method(Some(DEST), MANAGER_PATH, Some(MANAGER), method, body);
        let reply = match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Err(_) => {
                return Err(CapError::Timeout(format!(
                    "{what}: systemd did not answer within {CALL_TIMEOUT:?}"
                )));
            }
            Ok(Err(e)) => return Err(self.failed(what, e).await),
            Ok(Ok(reply)) => reply,
        };
        reply
            .body()
            .deserialize()
            .map_err(|e| CapError::Other(format!("{what}: unexpected reply: {e}")))
    }

    /// One property of the unit at `path`.
    async fn property(
        &self,
        connection: &Connection,
        path: &OwnedObjectPath,
        interface: &str,
        name: &str,
    ) -> Result<OwnedValue, CapError> {
        let what = format!("property {name} of {path}");
        let body = (interface, name);
        let call = connection.call_method(
            Some(DEST),
            path.as_str(),
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &body,
        );
        let reply = match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Err(_) => return Err(CapError::Timeout(format!("{what}: no answer"))),
            Ok(Err(e)) => return Err(self.failed(&what, e).await),
            Ok(Ok(reply)) => reply,
        };
        reply
            .body()
            .deserialize()
            .map_err(|e| CapError::Other(format!("{what}: {e}")))
    }

    /// Run the job `method` on `unit` and wait for its JobRemoved.
    async fn run_job(&self, kind: JobKind, unit: &str) -> Result<JobResult, CapError> {
        let what = format!("{} {unit}", kind.method());
        let connection = self.connect().await?;
        // Subscribe to JobRemoved before queueing the job, or the signal can be
        // missed (the connection's own subscription makes this local).
        let rule = job_removed().map_err(|e| CapError::Other(e.to_string()))?;
        let mut removed =
            match zbus::MessageStream::for_match_rule(rule, &connection, Some(64)).await {
                Ok(stream) => stream,
                Err(e) => return Err(self.failed(&what, e).await),
            };
        let job: OwnedObjectPath = self
            .manager(&what, kind.method(), &(unit, "replace"))
            .await?;
        let wait = async {
            while let Some(message) = removed.next().await {
                let Ok(message) = message else { continue };
                if let Ok((_, path, _, result)) =
                    message
                        .body()
                        .deserialize::<(u32, OwnedObjectPath, String, String)>()
                    && path == job
                {
                    return Ok(JobResult::parse(&result).unwrap_or(JobResult::Failed));
                }
            }
            // Queued, and its end not seen: it may have happened (a reboot
            // closes the bus this way), so not `unavailable` (nothing done).
            *self.connection.lock().await = None;
            Err(CapError::Timeout(format!(
                "systemd on {}: {what}: the job was queued, then the bus closed before it finished (a reboot does that): its outcome is unknown",
                self.bus()
            )))
        };
        match tokio::time::timeout(JOB_TIMEOUT, wait).await {
            Ok(result) => result,
            Err(_) => Err(CapError::Timeout(format!(
                "{what}: the job did not finish within {JOB_TIMEOUT:?} (it goes on in systemd)"
            ))),
        }
    }
}

fn unit_file_change((kind, path, destination): (String, String, String)) -> UnitFileChange {
    UnitFileChange {
        kind,
        path,
        destination,
    }
}

/// Where systemd puts its units on the bus, each under its escaped name.
const UNIT_PATHS: &str = "/org/freedesktop/systemd1/unit/";

/// A unit's object path, escaped as systemd does (`bus_label_escape`): every
/// byte but a letter, or a digit past the first, becomes `_` and two hex digits.
fn unit_path(unit: &str) -> Result<OwnedObjectPath, CapError> {
    let mut path = String::from(UNIT_PATHS);
    if unit.is_empty() {
        path.push('_');
    }
    for (i, byte) in unit.bytes().enumerate() {
        if byte.is_ascii_alphabetic() || (i > 0 && byte.is_ascii_digit()) {
            path.push(byte as char);
        } else {
            path.push_str(&format!("_{byte:02x}"));
        }
    }
    OwnedObjectPath::try_from(path)
        .map_err(|e| CapError::Invalid(format!("no object path for unit {unit:?}: {e}")))
}

/// systemd's object path escaping: `_2e` for `.`, and so on.
fn unescape_unit(path: &str) -> Option<String> {
    let escaped = path.strip_prefix(UNIT_PATHS)?;
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[async_trait::async_trait]
impl SystemdBackend for RealSystemd {
    async fn status(&self, unit: &str) -> Result<UnitStatus, CapError> {
        // Straight to the unit's object path, as `systemctl show` goes: systemd
        // loads a unit when a call reaches its path (what LoadUnit would do,
        // one round trip less). Only the properties a status holds, each its
        // own `Get`, all sent at once: a `GetAll` has systemd compute every
        // property of the interface (a service's reads its cgroup's files),
        // measured at over a millisecond each (docs/benchmarks.md).
        let path = unit_path(unit)?;
        let connection = self.connect().await?;
        let get = |interface: &'static str, name: &'static str| {
            self.property(&connection, &path, interface, name)
        };
        let string = |value: OwnedValue| String::try_from(value).unwrap_or_default();
        let n_restarts = async {
            if !unit.ends_with(".service") {
                return Ok(None);
            }
            Ok(u32::try_from(get(SERVICE, "NRestarts").await?).ok())
        };
        let (load, active, sub, file_state, fragment, drop_ins, reload, entered, n_restarts) = tokio::try_join!(
            get(UNIT, "LoadState"),
            get(UNIT, "ActiveState"),
            get(UNIT, "SubState"),
            get(UNIT, "UnitFileState"),
            get(UNIT, "FragmentPath"),
            get(UNIT, "DropInPaths"),
            get(UNIT, "NeedDaemonReload"),
            get(UNIT, "ActiveEnterTimestamp"),
            n_restarts,
        )?;
        let fragment = string(fragment);
        let entered = u64::try_from(entered).ok().filter(|us| *us > 0);
        Ok(UnitStatus {
            name: unit.to_string(),
            load_state: string(load),
            active_state: string(active),
            sub_state: string(sub),
            unit_file_state: string(file_state),
            fragment_path: (!fragment.is_empty()).then_some(fragment),
            drop_in_paths: Vec::<String>::try_from(drop_ins).unwrap_or_default(),
            need_daemon_reload: bool::try_from(reload).unwrap_or(false),
            active_enter_ms: entered.map(|us| us / 1000),
            n_restarts,
        })
    }

    async fn list_units(&self) -> Result<Vec<UnitStatus>, CapError> {
        type Listed = (
            String,
            String,
            String,
            String,
            String,
            String,
            OwnedObjectPath,
            u32,
            String,
            OwnedObjectPath,
        );
        let units: Vec<Listed> = self.manager("ListUnits", "ListUnits", &()).await?;
        Ok(units
            .into_iter()
            .map(|(name, _, load_state, active_state, sub_state, ..)| {
                listed_unit(name, load_state, active_state, sub_state)
            })
            .collect())
    }

    async fn job(&self, _: Permit, kind: JobKind, unit: &str) -> Result<JobResult, CapError> {
        self.run_job(kind, unit).await
    }

    async fn reset_failed(&self, _: Permit, unit: &str) -> Result<(), CapError> {
        self.manager::<_, ()>(
            &format!("ResetFailedUnit {unit}"),
            "ResetFailedUnit",
            &(unit,),
        )
        .await
    }

    async fn unit_file_links(&self, unit: &str) -> Result<Vec<String>, CapError> {
        self.manager(
            &format!("GetUnitFileLinks {unit}"),
            "GetUnitFileLinks",
            &(unit, false),
        )
        .await
    }

    async fn unit_file(&self, unit: &str) -> Result<String, CapError> {
        let Some(path) = self.status(unit).await?.fragment_path else {
            return Err(CapError::NotFound(format!(
                "systemd has no unit file for {unit}: write it in a unit directory first"
            )));
        };
        // A path systemd names, read as any file Tend did not write.
        let read = {
            let path = std::path::PathBuf::from(&path);
            move || crate::untrusted::read_to_string(&path, crate::untrusted::MAX_TEXT_BYTES)
        };
        tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| CapError::Other(e.to_string()))?
            .map_err(|e| {
                CapError::Conflict(format!(
                    "cannot read the unit file of {unit} ({path}): {e}; a masked unit cannot be enabled"
                ))
            })
    }

    async fn enable(&self, units: &[String]) -> Result<Vec<UnitFileChange>, CapError> {
        // (files, runtime = false, force = false): never replace an existing link.
        let (_, changes) = self
            .manager::<_, (bool, Vec<(String, String, String)>)>(
                "EnableUnitFiles",
                "EnableUnitFiles",
                &(units, false, false),
            )
            .await?;
        Ok(changes.into_iter().map(unit_file_change).collect())
    }

    async fn disable(&self, units: &[String]) -> Result<Vec<UnitFileChange>, CapError> {
        let changes = self
            .manager::<_, Vec<(String, String, String)>>(
                "DisableUnitFiles",
                "DisableUnitFiles",
                &(units, false),
            )
            .await?;
        Ok(changes.into_iter().map(unit_file_change).collect())
    }

    async fn daemon_reload(&self, _: Permit) -> Result<(), CapError> {
        self.manager::<_, ()>("Reload", "Reload", &()).await
    }

    async fn changes(&self) -> Result<tokio::sync::mpsc::Receiver<UnitChange>, CapError> {
        let connection = self.connect().await?;
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(DEST)
            .and_then(|b| b.interface("org.freedesktop.DBus.Properties"))
            .and_then(|b| b.member("PropertiesChanged"))
            .and_then(|b| b.arg(0, UNIT))
            .map_err(|e| CapError::Other(e.to_string()))?
            .build();
        let mut stream =
            match zbus::MessageStream::for_match_rule(rule, &connection, Some(256)).await {
                Ok(stream) => stream,
                Err(e) => return Err(self.failed("PropertiesChanged", e).await),
            };
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                let header = message.header();
                let Some(unit) = header.path().and_then(|p| unescape_unit(p.as_str())) else {
                    continue;
                };
                let Ok((_, changed, _)) =
                    message
                        .body()
                        .deserialize::<(String, HashMap<String, OwnedValue>, Vec<String>)>()
                else {
                    continue;
                };
                let Some(active_state) = changed
                    .get("ActiveState")
                    .and_then(|v| String::try_from(v.clone()).ok())
                else {
                    continue;
                };
                // A full queue drops the change: the trigger is coalesced anyway.
                if tx.try_send(UnitChange { unit, active_state }).is_err() && tx.is_closed() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_paths_unescape_to_unit_names() {
        assert_eq!(
            unescape_unit("/org/freedesktop/systemd1/unit/kubelet_2eservice").as_deref(),
            Some("kubelet.service")
        );
        assert_eq!(
            unescape_unit("/org/freedesktop/systemd1/unit/tend_2da_2eservice").as_deref(),
            Some("tend-a.service")
        );
        assert_eq!(unescape_unit("/org/freedesktop/systemd1"), None);
    }

    #[test]
    fn unit_names_escape_as_systemd_escapes_them() {
        let path = |unit| unit_path(unit).unwrap().to_string();
        // As `busctl tree org.freedesktop.systemd1` lists them.
        assert_eq!(
            path("kubelet.service"),
            "/org/freedesktop/systemd1/unit/kubelet_2eservice"
        );
        assert_eq!(
            path("getty@tty1.service"),
            "/org/freedesktop/systemd1/unit/getty_40tty1_2eservice"
        );
        assert_eq!(
            path("dev-vda1.device"),
            "/org/freedesktop/systemd1/unit/dev_2dvda1_2edevice"
        );
        // A leading digit is escaped, later ones are not; so is `_` itself.
        assert_eq!(
            path("1a_b2.service"),
            "/org/freedesktop/systemd1/unit/_31a_5fb2_2eservice"
        );
        for unit in [
            "kubelet.service",
            "tend-a.service",
            "x\\x2d.mount",
            "1a_b2.service",
        ] {
            assert_eq!(unescape_unit(&path(unit)).as_deref(), Some(unit));
        }
    }
}
