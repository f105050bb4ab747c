//! Staged rollouts on this node (`[host.fleet.rollout]`): the revisions it
//! holds, under `<state-dir>/rollout/`. A change of the config file or of a
//! plugin's component is taken in ([`intake`]): the config's text and every
//! enabled plugin's component (read from its file, or pulled and verified,
//! its tag pinned) are copied into this node's own store and compiled, and
//! become a revision the node *holds*. The daemon runs one held revision
//! (the *adopted* one) from the store, never from the operator's files, so
//! a file changed in place does not reach the running plugins until
//! [`crate::fleet::adoption`] says so; the stable revision stays held (and
//! its components compiled) for an instant rollback. What is adopted is
//! saved, so a restart runs it again whatever the files say by then.
//!
//! - `book.json`: the adopted and stable revisions, and a candidate this
//!   node reverted on its own.
//! - `revisions/<revision>.json`: a held revision's config text and its
//!   components' digests.
//! - `components/<hex>.wasm`: the components, by content.
//!
//! At most the adopted, the stable and the desired revisions are held;
//! the rest, and the components none of them names, are removed.

use crate::config::Config;
use crate::fleet::adoption::{Holding, reduces_risk};
use crate::fleet::revision::{is_revision, revision as revision_of};
use crate::runtime::{CompiledPlugin, LoadError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A held revision as saved: the config's text and each enabled plugin's
/// component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub revision: String,
    pub config: String,
    /// By plugin name.
    pub components: BTreeMap<String, Component>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
    /// For a plugin from a registry, the reference its tag resolved to.
    #[serde(default)]
    pub pinned: Option<String>,
}

/// A component as the store keeps it.
#[derive(Debug, Clone)]
pub struct Kept {
    pub path: PathBuf,
    pub digest: String,
    /// For a plugin from a registry, the reference its tag resolved to.
    pub pinned: Option<String>,
}

impl Kept {
    /// The compiled component, if it is the one the revision names.
    pub fn checked(
        &self,
        compiled: Result<Arc<CompiledPlugin>, LoadError>,
    ) -> Result<Arc<CompiledPlugin>, LoadError> {
        match compiled {
            Ok(plugin) if plugin.digest != self.digest => Err(LoadError::Fetch(format!(
                "the kept component {} changed on disk (digest {}, the revision names {}): refused",
                self.path.display(),
                plugin.digest,
                self.digest
            ))),
            other => other,
        }
    }
}

/// A held revision, its config parsed.
#[derive(Debug, Clone)]
pub struct Held {
    pub record: Record,
    pub config: Config,
}

impl Held {
    fn digests(&self) -> BTreeMap<String, String> {
        let components = self.record.components.iter();
        components
            .map(|(n, c)| (n.clone(), c.digest.clone()))
            .collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Book {
    adopted: Option<String>,
    stable: Option<String>,
    /// A candidate this node gave up, and the attempt of its rollout.
    reverted: Option<(String, u64)>,
}

pub struct Staging {
    dir: PathBuf,
    config_path: PathBuf,
    book: Book,
    held: BTreeMap<String, Held>,
    /// The revision the operator's files ask for, when held and not adopted.
    desired: Option<String>,
}

impl Staging {
    /// The store under `state_dir`, with what it held when tend last ran.
    pub fn open(config_path: &Path, state_dir: &Path) -> io::Result<Staging> {
        let dir = state_dir.join("rollout");
        for sub in ["", "revisions", "components"] {
            crate::atomic::create_private_dir(&dir.join(sub))?;
            crate::atomic::check_own_dir(
                &dir.join(sub),
                "rollout store",
                "another user could plant the components tend runs",
            )
            .map_err(io::Error::other)?;
        }
        let book_path = dir.join("book.json");
        let book: Book = match read_json(&book_path) {
            Some(book) => book,
            None if !book_path.exists() => Book::default(),
            None => {
                tracing::error!(book = %book_path.display(), "staged rollouts: the node's book is unreadable: this node starts as a new one (it runs what the rollout runs here, once it holds it)");
                Book::default()
            }
        };
        let mut staging = Staging {
            dir,
            config_path: config_path.to_path_buf(),
            book: Book::default(),
            held: BTreeMap::new(),
            desired: None,
        };
        // Held under the name this tend gives them: a new tend release is
        // part of a revision's name.
        let mut renamed = BTreeMap::new();
        for revision in [&book.adopted, &book.stable].into_iter().flatten() {
            match staging.read_held(revision) {
                Ok(held) => {
                    renamed.insert(revision.clone(), held.record.revision.clone());
                    staging.held.insert(held.record.revision.clone(), held);
                }
                Err(e) => {
                    tracing::warn!(%revision, "staged rollouts: a held revision is unreadable, dropped: {e}")
                }
            }
        }
        let held = |r: &Option<String>| r.as_ref().and_then(|r| renamed.get(r)).cloned();
        staging.book = Book {
            adopted: held(&book.adopted),
            stable: held(&book.stable),
            reverted: book.reverted.clone().filter(|(r, _)| is_revision(r)),
        };
        for (old_name, name) in renamed.iter().filter(|(old, new)| old != new) {
            tracing::info!(from = %old_name, to = %name, "staged rollouts: a held revision renamed for this tend release");
            let text = serde_json::to_vec(&staging.held[name].record).expect("a record serializes");
            crate::atomic::write(&staging.record_path(name), 0o600, &text)?;
        }
        if staging.book != book {
            staging.save()?;
        }
        Ok(staging)
    }

    fn read_held(&self, revision: &str) -> Result<Held, String> {
        if !is_revision(revision) {
            return Err("not a revision's name".into());
        }
        let mut record: Record =
            read_json(&self.record_path(revision)).ok_or("no readable record")?;
        if record.revision != revision {
            return Err(format!("its record names {}", record.revision));
        }
        // A digest becomes a file name.
        for c in record.components.values() {
            crate::oci::reference::validate_digest(&c.digest)?;
        }
        let config = Config::parse(&self.config_path, &record.config).map_err(|e| e.to_string())?;
        let digests = record
            .components
            .iter()
            .map(|(n, c)| (n.clone(), c.digest.clone()))
            .collect();
        record.revision = revision_of(&config.digest, &digests);
        let missing = record
            .components
            .values()
            .find(|c| !self.component_path(&c.digest).is_file());
        match missing {
            Some(c) => Err(format!("its component {} is missing", c.digest)),
            None => Ok(Held { record, config }),
        }
    }

    fn record_path(&self, revision: &str) -> PathBuf {
        self.dir.join("revisions").join(format!("{revision}.json"))
    }

    /// Where components are kept, by content.
    pub fn components_dir(&self) -> PathBuf {
        self.dir.join("components")
    }

    /// Where the component of `digest` is kept.
    pub fn component_path(&self, digest: &str) -> PathBuf {
        component_in(&self.components_dir(), digest)
    }

    pub fn adopted(&self) -> Option<&Held> {
        self.held.get(self.book.adopted.as_ref()?)
    }

    pub fn get(&self, revision: &str) -> Option<&Held> {
        self.held.get(revision)
    }

    /// The component the adopted revision runs for the plugin of `file`.
    pub fn component(&self, file: &Path) -> Option<Kept> {
        let adopted = self.adopted()?;
        let plugin = adopted.config.enabled_plugins().find(|p| p.file == file)?;
        let component = adopted.record.components.get(&plugin.name)?;
        Some(Kept {
            path: self.component_path(&component.digest),
            digest: component.digest.clone(),
            pinned: component.pinned.clone(),
        })
    }

    /// The operator's plugin files the held revisions name.
    pub fn plugin_files(&self) -> BTreeSet<PathBuf> {
        let configs = self.held.values().map(|h| &h.config);
        configs
            .flat_map(|c| c.enabled_plugins().map(|p| p.file.clone()))
            .collect()
    }

    /// Every component digest a held revision names: their compiled builds
    /// are kept.
    pub fn digests_held(&self) -> BTreeSet<String> {
        let records = self.held.values().map(|h| &h.record);
        records
            .flat_map(|r| r.components.values().map(|c| c.digest.clone()))
            .collect()
    }

    /// What the node holds, for [`crate::fleet::adoption`].
    pub fn holding(&self) -> Option<Holding<'_>> {
        let adopted = self.book.adopted.as_deref()?;
        Some(Holding {
            adopted,
            stable: self.book.stable.as_deref(),
            desired: self.desired.as_deref(),
            reduces_risk: self
                .desired
                .as_deref()
                .is_some_and(|d| self.reduces_risk(d)),
            reverted: self.reverted(),
        })
    }

    /// Whether `revision` only reduces risk against the stable one.
    pub fn reduces_risk(&self, revision: &str) -> bool {
        let stable = self.book.stable.as_ref().and_then(|s| self.held.get(s));
        match (stable, self.held.get(revision)) {
            (Some(stable), Some(new)) => reduces_risk(
                (&stable.config, &stable.digests()),
                (&new.config, &new.digests()),
            ),
            _ => false,
        }
    }

    pub fn reverted(&self) -> Option<(&str, u64)> {
        self.book.reverted.as_ref().map(|(r, a)| (r.as_str(), *a))
    }

    pub fn desired(&self) -> Option<&str> {
        self.desired.as_deref()
    }

    /// Hold what the operator's files ask for now (taken in by [`intake`]).
    pub fn offer(&mut self, held: Held) -> io::Result<()> {
        let revision = held.record.revision.clone();
        // A prune between the intake and now may have taken a component.
        if let Some(c) =
            (held.record.components.values()).find(|c| !self.component_path(&c.digest).is_file())
        {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "the component {} was removed since it was taken in",
                    c.digest
                ),
            ));
        }
        let text = serde_json::to_vec(&held.record).expect("a record serializes");
        crate::atomic::write(&self.record_path(&revision), 0o600, &text)?;
        self.desired = (self.book.adopted.as_ref() != Some(&revision)).then(|| revision.clone());
        self.held.insert(revision, held);
        self.prune();
        Ok(())
    }

    /// A node that never adopted anything starts with `revision` (held), as
    /// its stable one too when `stable` (nothing rolls out in the fleet).
    pub fn adopt_first(&mut self, revision: &str, stable: bool) -> io::Result<()> {
        if stable {
            self.book.stable = Some(revision.to_string());
        }
        self.adopt(revision)
    }

    /// Run `revision` (held) from now on, after restarts too.
    pub fn adopt(&mut self, revision: &str) -> io::Result<()> {
        self.book.adopted = Some(revision.to_string());
        if self.desired.as_deref() == Some(revision) {
            self.desired = None;
        }
        self.save()
    }

    /// The stable revision is `revision` now, if this node holds it.
    pub fn stable_is(&mut self, revision: &str) -> io::Result<()> {
        if self.book.stable.as_deref() == Some(revision) || !self.held.contains_key(revision) {
            return Ok(());
        }
        self.book.stable = Some(revision.to_string());
        self.save()?;
        self.prune();
        Ok(())
    }

    /// This node gave up the candidate it ran (None: the leader saw to it).
    pub fn set_reverted(&mut self, revision: Option<(String, u64)>) -> io::Result<()> {
        if self.book.reverted == revision {
            return Ok(());
        }
        self.book.reverted = revision;
        self.save()
    }

    fn save(&self) -> io::Result<()> {
        let text = serde_json::to_vec(&self.book).expect("the book serializes");
        crate::atomic::write(&self.dir.join("book.json"), 0o600, &text)
    }

    /// Forget the revisions no longer adopted, stable or desired, and the
    /// components none of those names.
    fn prune(&mut self) {
        let keep: BTreeSet<String> = [&self.book.adopted, &self.book.stable, &self.desired]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        self.held.retain(|r, _| keep.contains(r));
        let digests = self.digests_held();
        let hexes: BTreeSet<&str> = digests
            .iter()
            .map(|d| d.trim_start_matches("sha256:"))
            .collect();
        let remove = |sub: &str, kept: &dyn Fn(&str) -> bool| {
            let Ok(entries) = std::fs::read_dir(self.dir.join(sub)) else {
                return;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(".tend-tmp") {
                    // An intake's file being written.
                    continue;
                }
                let stem = name.rsplit_once('.').map_or(name.as_str(), |(s, _)| s);
                if !kept(stem) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        };
        remove("revisions", &|stem| keep.contains(stem));
        remove("components", &|stem| hexes.contains(stem));
    }
}

/// The file of the component of `digest` (validated) in `dir`.
fn component_in(dir: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    dir.join(format!("{hex}.wasm"))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let max = 2 * crate::untrusted::MAX_TEXT_BYTES;
    let text = crate::untrusted::read_to_string(path, max).ok()?;
    serde_json::from_str(&text).ok()
}

/// What [`intake`] needs: where the components go, and how to reach a
/// registry and compile.
pub struct Intake {
    pub config_path: PathBuf,
    pub components: PathBuf,
    pub runtime: Arc<crate::runtime::Runtime>,
}

/// Take in what the operator's files ask for: the config, every enabled
/// plugin's component copied into the store (pulled first for a registry's,
/// its digest checked) and compiled, so a corrupt one is refused here and
/// the revision runs at once when adopted. The error says what is wrong.
pub async fn intake(how: Intake) -> Result<Held, String> {
    let text = crate::untrusted::read_to_string(&how.config_path, crate::untrusted::MAX_TEXT_BYTES)
        .map_err(|e| format!("{}: {e}", how.config_path.display()))?;
    let config = Config::parse(&how.config_path, &text).map_err(|e| e.to_string())?;
    let mut components = BTreeMap::new();
    for plugin in config.enabled_plugins() {
        let (bytes, pinned) = match &plugin.oci {
            None => (read_component(&plugin.file)?, None),
            Some(source) => {
                let pulled =
                    crate::oci::fetch(source, &config.host.oci, &config.host.cache_dir).await?;
                let bytes = read_component(&pulled.path)?;
                if crate::digest::sha256_digest(&bytes) != pulled.digest {
                    return Err(format!(
                        "plugin {}: the pulled component changed in the cache since it was verified",
                        plugin.name
                    ));
                }
                (bytes, Some(pulled.pinned.to_string()))
            }
        };
        let digest = crate::digest::sha256_digest(&bytes);
        let path = component_in(&how.components, &digest);
        let runtime = how.runtime.clone();
        let name = plugin.name.clone();
        // Kept only once it compiled (and its build is cached): a component
        // in the store is one that compiles, compiled once.
        tokio::task::spawn_blocking(move || {
            if path.is_file() {
                return Ok(());
            }
            crate::atomic::write(&path, 0o600, &bytes)
                .map_err(|e| format!("plugin {name}: cannot keep its component: {e}"))?;
            runtime.load(&path).map(drop).map_err(|e| {
                let _ = std::fs::remove_file(&path);
                format!("plugin {name}: {e}")
            })
        })
        .await
        .expect("the intake's compile task panicked")?;
        components.insert(plugin.name.clone(), Component { digest, pinned });
    }
    let digests = components
        .iter()
        .map(|(n, c)| (n.clone(), c.digest.clone()))
        .collect();
    let record = Record {
        revision: revision_of(&config.digest, &digests),
        config: text,
        components,
    };
    Ok(Held { record, config })
}

fn read_component(path: &Path) -> Result<Vec<u8>, String> {
    crate::untrusted::read(path, crate::untrusted::MAX_COMPONENT_BYTES)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
