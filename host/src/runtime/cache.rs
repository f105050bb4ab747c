//! On-disk cache of compiled components, so a restart does not recompile.
//!
//! Keyed by Tend's version, the wasmtime version, the engine's compatibility
//! hash (its settings) and the component's sha256. Each artifact has a sidecar
//! with its checksum: an entry that does not match is recompiled, never loaded
//! blindly (deserializing runs native code). The checksum is unkeyed, so it
//! is no defense against a writer: an artifact, its sidecar and their
//! directory are loaded only when they are Tend's alone (Tend's user or root
//! owns them, no one else may write them), else recompiled.
//!
//! Beside it, builds made ahead of time (`tend plugins precompile`, an
//! image's): read, never written, by the component's sha256 alone. Their
//! settings are not in the name: wasmtime checks them when it loads a build
//! (its own version, the engine's settings, each CPU feature against the
//! host), and a build it refuses is compiled here instead.

pub use crate::digest::{sha256_digest, sha256_hex};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The wasmtime the host is built with; part of every cache key.
pub const WASMTIME_VERSION: &str = "48.0.8";

pub struct ArtifactCache {
    /// None: compile every time, store nothing.
    dir: Option<PathBuf>,
    engine_key: String,
    /// The engine's instance pool can refuse a sound build (its limits for
    /// one plugin): such a refusal is the component's, not the entry's.
    pool_limits: bool,
    /// Builds made ahead of time, looked up when `dir` has none.
    precompiled: Option<PathBuf>,
}

/// What the cache holds for a digest.
pub enum Lookup {
    Hit(Component),
    /// No entry of the cache's own, a build made ahead of time.
    Precompiled(Component),
    /// No entry of the cache's own, and a sound build made ahead of time the
    /// engine would not load: wasmtime's reason (a CPU below the build's, a
    /// `tend` on another wasmtime, the instance pool's limits for one plugin).
    PrecompiledRefused(anyhow::Error),
    Absent,
    /// An entry that failed its checksum, or is not Tend's alone: why. Said
    /// once, by the load that compiles instead, not by every lookup.
    Corrupt(String),
    /// A sound entry (its checksum matched) the engine would not load: the
    /// instance pool's limits for one plugin, which another engine's may
    /// take; or, without a pool, an entry this build cannot use.
    Refused(anyhow::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    /// Loaded from the builds made ahead of time.
    Precompiled,
    Miss,
    /// An entry was there but failed its checksum or did not deserialize.
    Corrupt,
}

impl CacheOutcome {
    /// The `result` label of `tend_compile_cache_total`.
    pub fn label(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Precompiled => "precompiled",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Corrupt => "corrupt",
        }
    }
}

/// The artifact checksum: xxh3-128 detects a torn or bit-flipped entry at
/// memory speed (35 MB in a few ms). It guards against accidents, not
/// attackers: those are kept out by ownership and mode (see [`foreign`]).
fn checksum_hex(bytes: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes))
}

impl ArtifactCache {
    pub fn new(dir: Option<&Path>, engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = format!(
            "tend-{}-wasmtime-{WASMTIME_VERSION}-{:016x}",
            env!("CARGO_PKG_VERSION"),
            hasher.finish()
        );
        ArtifactCache {
            dir: dir.map(Path::to_path_buf),
            engine_key,
            pool_limits: false,
            precompiled: None,
        }
    }

    /// Look up builds made ahead of time in `dir` (`tend plugins precompile`)
    /// when the cache has none of its own.
    pub fn set_precompiled(&mut self, dir: Option<&Path>) {
        self.precompiled = dir.map(Path::to_path_buf);
    }

    /// For an engine with an instance pool: a sound entry it refuses is
    /// refused at once, not compiled again (the same build would be refused;
    /// the on-demand engine loads the entry, which has the same key).
    pub fn with_pool_limits(mut self, pool_limits: bool) -> Self {
        self.pool_limits = pool_limits;
        self
    }

    pub(super) fn entry(&self, digest: &str) -> Option<(PathBuf, PathBuf)> {
        let dir = self.dir.as_ref()?;
        let key = sha256_hex(format!("{}/{digest}", self.engine_key).as_bytes());
        Some((
            dir.join(format!("{key}.cwasm")),
            dir.join(format!("{key}.xxh3")),
        ))
    }

    /// A valid cached build of the component with `digest`, if there is one;
    /// else a build made ahead of time that this engine loads.
    pub fn lookup(&self, engine: &Engine, digest: &str) -> Lookup {
        let cached = match self.entry(digest) {
            Some((artifact, checksum)) => load_entry(engine, &artifact, &checksum),
            None => Lookup::Absent,
        };
        if !matches!(cached, Lookup::Absent) {
            return cached;
        }
        let Some((artifact, checksum)) = self
            .precompiled
            .as_deref()
            .and_then(|dir| precompiled_entry(dir, digest))
        else {
            return Lookup::Absent;
        };
        match load_entry(engine, &artifact, &checksum) {
            Lookup::Hit(component) => Lookup::Precompiled(component),
            Lookup::Refused(refused) => Lookup::PrecompiledRefused(
                refused.context(format!("its precompiled build {}", artifact.display())),
            ),
            other => other,
        }
    }

    /// The compiled component whose sha256 is `digest`, for `engine`: from the
    /// cache when a valid entry exists, else what `compile` serializes (an
    /// engine of the same settings compiling it, see `Tier::compile`), stored
    /// and loaded.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        compile: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<(Component, CacheOutcome)> {
        let outcome = match self.lookup(engine, digest) {
            Lookup::Hit(component) => return Ok((component, CacheOutcome::Hit)),
            Lookup::Precompiled(component) => return Ok((component, CacheOutcome::Precompiled)),
            Lookup::Absent => CacheOutcome::Miss,
            Lookup::Corrupt(why) => {
                tracing::warn!("compiling {digest} again: {why}");
                CacheOutcome::Corrupt
            }
            Lookup::Refused(refused) if self.pool_limits => return Err(refused),
            Lookup::Refused(refused) => {
                tracing::warn!("recompiling the cached build of {digest}: {refused:#}");
                CacheOutcome::Corrupt
            }
            Lookup::PrecompiledRefused(refused) => {
                tracing::warn!("compiling {digest} here: {refused:#}");
                CacheOutcome::Miss
            }
        };
        let compiled = compile()?;
        // Mapped from its file, the build costs resident memory only for the
        // pages that run (a first start's peak, docs/benchmarks.md); copied
        // into memory of its own only when it could not be stored.
        if let Some((artifact, checksum)) = self.entry(digest) {
            match store(&compiled, &artifact, &checksum) {
                Ok(()) => match self.lookup(engine, digest) {
                    Lookup::Hit(mapped) => return Ok((mapped, outcome)),
                    Lookup::Refused(refused) if self.pool_limits => return Err(refused),
                    Lookup::Absent
                    | Lookup::Precompiled(_)
                    | Lookup::PrecompiledRefused(_)
                    | Lookup::Corrupt(_)
                    | Lookup::Refused(_) => {}
                },
                Err(e) => {
                    tracing::warn!("cannot write compile cache {}: {e:#}", artifact.display())
                }
            }
        }
        // SAFETY: serialized just now by an engine of `engine`'s settings; the
        // engine checks that they match, and the component against its limits.
        Ok((
            unsafe { Component::deserialize(engine, &compiled)? },
            outcome,
        ))
    }

    /// Delete the oldest artifacts that no digest in `in_use` needs until the
    /// cache holds at most `max_bytes`.
    pub fn evict(&self, in_use: &std::collections::HashSet<String>, max_bytes: u64) -> usize {
        let Some(dir) = &self.dir else { return 0 };
        let keep: std::collections::HashSet<PathBuf> = in_use
            .iter()
            .filter_map(|d| self.entry(d))
            .map(|(artifact, _)| artifact)
            .collect();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        let mut artifacts: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(|e| {
                let path = e.ok()?.path();
                let meta = std::fs::metadata(&path).ok()?;
                (path.extension()? == "cwasm").then_some((meta.modified().ok()?, meta.len(), path))
            })
            .collect();
        let mut total: u64 = artifacts.iter().map(|(_, len, _)| len).sum();
        artifacts.sort();
        let mut evicted = 0;
        for (_, len, path) in artifacts {
            if total <= max_bytes {
                break;
            }
            if keep.contains(&path) {
                continue;
            }
            let _ = std::fs::remove_file(path.with_extension("xxh3"));
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                evicted += 1;
                tracing::info!(artifact = %path.display(), "compile cache entry evicted");
            }
        }
        evicted
    }
}

/// Why `dir`, named as `precompiled-dir`, cannot serve builds made ahead of
/// time, if it cannot: it, or a directory above it, is not Tend's alone. A
/// sticky directory above (`/tmp`) is: only the owner of an entry may rename
/// it there, and the entry below is checked itself.
pub fn precompiled_dir_problem(dir: &Path) -> Option<String> {
    let checked = || -> anyhow::Result<()> {
        anyhow::ensure!(dir.is_dir(), "{} is not a directory", dir.display());
        crate::atomic::check_own_dir(
            dir,
            "precompiled-dir",
            "another user could put native code there that tend loads",
        )?;
        // Above the path as named and above where it leads (a symlink's own
        // directory could swap the link).
        let (named, real) = (std::path::absolute(dir)?, std::fs::canonicalize(dir)?);
        for above in named.ancestors().skip(1).chain(real.ancestors().skip(1)) {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(above)?;
            let own = [0, rustix::process::geteuid().as_raw()].contains(&meta.uid());
            if meta.mode() & 0o1000 != 0 && own {
                continue;
            }
            if let Some(why) = crate::atomic::other_writer(&meta, above) {
                anyhow::bail!(
                    "another user could put a directory of their own in place of precompiled-dir {}: {}: {why}",
                    dir.display(),
                    above.display()
                );
            }
        }
        Ok(())
    };
    let problem = checked().err()?;
    Some(format!(
        "{problem:#}; its builds are not loaded, every plugin is compiled here"
    ))
}

/// Where in `dir` a build made ahead of time of the component whose sha256 is
/// `digest` is, and its checksum.
fn precompiled_entry(dir: &Path, digest: &str) -> Option<(PathBuf, PathBuf)> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((
        dir.join(format!("{hex}.cwasm")),
        dir.join(format!("{hex}.xxh3")),
    ))
}

/// The entry `artifact` with its `checksum` sidecar, loaded into `engine` if
/// it is sound and Tend's alone. Both are opened without following a link,
/// and the build loaded is the file that was checked, not whatever its path
/// names by then.
fn load_entry(engine: &Engine, artifact: &Path, checksum: &Path) -> Lookup {
    let (Ok(file), Ok(sidecar)) = (open_own(artifact), open_own(checksum)) else {
        return Lookup::Absent;
    };
    if let Some(why) = foreign(artifact, &file, checksum, &sidecar) {
        return Lookup::Corrupt(format!("{} is not loaded: {why}", artifact.display()));
    }
    // An xxh3-128 in hex, and nothing more is read.
    let mut expected = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::Read::take(&sidecar, 64), &mut expected);
    // SAFETY: a read-only map of a file only Tend's user or root may write
    // (checked above), and they replace files only by rename (Tend, `tend
    // plugins precompile`; docs/security.md), so its content does not change
    // under the map.
    let Ok(bytes) = (unsafe { memmap2::Mmap::map(&file) }) else {
        return Lookup::Corrupt(format!("{} cannot be mapped", artifact.display()));
    };
    if checksum_hex(&bytes) != expected.trim() {
        return Lookup::Corrupt(format!("{}: checksum mismatch", artifact.display()));
    }
    // wasmtime 48 loads a component from a path only: the descriptor's.
    // Without /proc, from the checked bytes, copied.
    use std::os::fd::AsRawFd;
    let checked = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    // SAFETY: the artifact was produced by `Engine::precompile_component`
    // (wasmtime checks its version and settings against the engine's, and its
    // CPU features against the host) and is what was written (its checksum
    // matched). Mapped, not copied, where /proc is.
    let loaded = match checked.exists() {
        true => unsafe { Component::deserialize_file(engine, &checked) },
        false => unsafe { Component::deserialize(engine, &bytes[..]) },
    };
    match loaded {
        Ok(component) => Lookup::Hit(component),
        Err(e) => Lookup::Refused(anyhow::Error::from(e).context(artifact.display().to_string())),
    }
}

/// Where the builds that are never cached (Winch's, replaced by their
/// Cranelift builds) are loaded from: each mapped from a file with no name in
/// `dir`, so only the pages that run are resident, as file pages the kernel
/// can drop, where a copy in memory kept every page resident. In memory when
/// there is no `dir`, and from the first build that cannot be written or
/// mapped there on (a `noexec` mount, a full disk): one warning says so,
/// rather than one per build.
pub struct UncachedBuilds {
    dir: Option<PathBuf>,
    in_memory_from_now_on: AtomicBool,
}

impl UncachedBuilds {
    pub fn new(dir: Option<&Path>) -> Self {
        UncachedBuilds {
            dir: dir.map(Path::to_path_buf),
            in_memory_from_now_on: AtomicBool::new(false),
        }
    }

    pub fn load(&self, engine: &Engine, compiled: &[u8]) -> anyhow::Result<Component> {
        let dir = self
            .dir
            .as_deref()
            .filter(|_| !self.in_memory_from_now_on.load(Ordering::Relaxed));
        if let Some(dir) = dir {
            match map_uncached(engine, compiled, dir) {
                Ok(component) => return Ok(component),
                Err(e) => {
                    if !self.in_memory_from_now_on.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "Winch builds are held in memory from now on (until tend restarts), not mapped from files under {}: {e:#}",
                            dir.display()
                        );
                    }
                }
            }
        }
        // SAFETY: serialized just now by an engine of `engine`'s settings; the
        // engine checks that they match.
        Ok(unsafe { Component::deserialize(engine, compiled)? })
    }
}

/// `compiled` written to an `O_TMPFILE` file in `dir` and mapped from it.
/// wasmtime 48 loads a component from a path only, so the path is the
/// descriptor's (`/proc/self/fd/N`).
fn map_uncached(engine: &Engine, compiled: &[u8], dir: &Path) -> anyhow::Result<Component> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    crate::atomic::create_private_dir(dir)?;
    let mut file = tempfile::tempfile_in(dir)?;
    // Whatever the umask: O_TMPFILE takes the process's default mode.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(compiled)?;
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    // SAFETY: serialized just now by an engine of `engine`'s settings (the
    // engine checks that they match). The file has no name; this writable
    // descriptor closes on return and wasmtime keeps a read-only one, so it
    // stays as written while the component lives: only root or Tend's own
    // user could reach it, through /proc, as they could a cache entry.
    Ok(unsafe { Component::deserialize_file(engine, path)? })
}

/// `path`, opened without following a symlink, and without waiting on a
/// FIFO put in its place.
fn open_own(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
}

/// Why the opened `artifact`, its opened `checksum` sidecar or their
/// directory is not Tend's alone (see [`crate::atomic::other_writer`]), or
/// not a plain file, if it is not.
fn foreign(
    artifact: &Path,
    file: &std::fs::File,
    checksum: &Path,
    sidecar: &std::fs::File,
) -> Option<String> {
    let dir = artifact.parent().unwrap_or(Path::new("."));
    let checked = [
        (artifact, file.metadata()),
        (checksum, sidecar.metadata()),
        (dir, std::fs::metadata(dir)),
    ];
    checked.into_iter().find_map(|(path, meta)| match meta {
        Ok(meta) if !meta.is_dir() && !meta.is_file() => {
            Some(format!("{}: not a plain file", path.display()))
        }
        Ok(meta) => {
            crate::atomic::other_writer(&meta, path).map(|why| format!("{}: {why}", path.display()))
        }
        Err(e) => Some(format!("{}: {e}", path.display())),
    })
}

/// `dir` for builds made ahead of time, created where missing, each
/// directory made 0755 whatever the umask: one its group could write would
/// not be loaded from ([`precompiled_dir_problem`]).
pub fn create_precompiled_dir(dir: &Path) -> std::io::Result<()> {
    crate::atomic::create_dir_with_mode(dir, 0o755)
}

/// Write `compiled`, the build of the component whose sha256 is `digest`, to
/// `dir` as [`ArtifactCache::set_precompiled`] has it looked up; readable by
/// every user (an image's files are root's, its daemon may run as another),
/// and returns its path.
pub fn write_precompiled(dir: &Path, digest: &str, compiled: &[u8]) -> anyhow::Result<PathBuf> {
    let Some((artifact, checksum)) = precompiled_entry(dir, digest) else {
        anyhow::bail!("{digest:?} is not a sha256 digest");
    };
    crate::atomic::write(&artifact, 0o644, compiled)?;
    crate::atomic::write(&checksum, 0o644, checksum_hex(compiled).as_bytes())?;
    Ok(artifact)
}

fn store(bytes: &[u8], artifact: &Path, checksum: &Path) -> anyhow::Result<()> {
    if let Some(dir) = artifact.parent() {
        crate::atomic::create_private_dir(dir)?;
    }
    crate::atomic::write(artifact, 0o600, bytes)?;
    Ok(crate::atomic::write(
        checksum,
        0o600,
        checksum_hex(bytes).as_bytes(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    /// What `Tier::compile` does, on the test's engine.
    fn compiling<'a>(
        engine: &'a Engine,
        wasm: &'a [u8],
    ) -> impl FnOnce() -> anyhow::Result<Vec<u8>> + 'a {
        move || Ok(engine.precompile_component(wasm)?)
    }

    #[test]
    fn second_load_hits_and_corruption_is_recompiled() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ArtifactCache::new(Some(dir.path()), &engine);
        let digest = sha256_hex(EMPTY_COMPONENT);
        let (_, first) = cache
            .load_or_compile(&engine, &digest, compiling(&engine, EMPTY_COMPONENT))
            .unwrap();
        let (_, second) = cache
            .load_or_compile(&engine, &digest, compiling(&engine, EMPTY_COMPONENT))
            .unwrap();
        assert_eq!((first, second), (CacheOutcome::Miss, CacheOutcome::Hit));
        let (artifact, _) = cache.entry(&digest).unwrap();
        let mut bytes = std::fs::read(&artifact).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&artifact, bytes).unwrap();
        let (_, third) = cache
            .load_or_compile(&engine, &digest, compiling(&engine, EMPTY_COMPONENT))
            .unwrap();
        assert_eq!(third, CacheOutcome::Corrupt);
        let (_, fourth) = cache
            .load_or_compile(&engine, &digest, compiling(&engine, EMPTY_COMPONENT))
            .unwrap();
        assert_eq!(fourth, CacheOutcome::Hit, "the corrupt entry was rewritten");
    }

    #[test]
    fn a_fresh_build_is_served_mapped_from_its_cache_file() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ArtifactCache::new(Some(dir.path()), &engine);
        let digest = sha256_hex(EMPTY_COMPONENT);
        let (component, outcome) = cache
            .load_or_compile(&engine, &digest, compiling(&engine, EMPTY_COMPONENT))
            .unwrap();
        assert_eq!(outcome, CacheOutcome::Miss);
        let (artifact, _) = cache.entry(&digest).unwrap();
        let image = component.image_range().start as usize;
        let artifact = std::fs::canonicalize(&artifact).unwrap();
        let mapping = crate::runtime::test_component::mapping_holding(image);
        assert!(
            mapping.is_some_and(|line| line.ends_with(&*artifact.to_string_lossy())),
            "the compiled image at {image:#x} is not a mapping of {}",
            artifact.display()
        );
    }

    /// A build no cache keeps (Winch's) is mapped from a file with no name
    /// in the directory, and runs; without a directory, or with one that
    /// cannot be, it is loaded from memory and runs.
    #[test]
    fn a_build_never_cached_is_mapped_from_an_unnamed_file() {
        use crate::runtime::test_component::{mapped_from_unnamed_file_in, returning, run};
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("cache");
        let engine = Engine::default();
        let compiled = engine.precompile_component(&returning(7)).unwrap();
        let component = map_uncached(&engine, &compiled, &scratch).unwrap();
        let names = std::fs::read_dir(&scratch).unwrap().count();
        assert_eq!(names, 0, "no file has a name");
        assert!(mapped_from_unnamed_file_in(&scratch, &component));
        assert_eq!(run(&engine, &component), 7);
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, "").unwrap();
        for dir in [None, Some(not_a_dir.as_path())] {
            let in_memory = UncachedBuilds::new(dir).load(&engine, &compiled).unwrap();
            assert!(!mapped_from_unnamed_file_in(&scratch, &in_memory));
            assert_eq!(run(&engine, &in_memory), 7);
        }
    }

    /// Once a build could not be mapped from the directory, the next ones do
    /// not try (a `noexec` mount would fail, and warn, for every build).
    #[test]
    fn after_a_build_that_cannot_be_mapped_the_next_are_loaded_from_memory() {
        use crate::runtime::test_component::{returning, run};
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("cache");
        std::fs::write(&scratch, "").unwrap();
        let engine = Engine::default();
        let compiled = engine.precompile_component(&returning(7)).unwrap();
        let builds = UncachedBuilds::new(Some(&scratch));
        assert_eq!(run(&engine, &builds.load(&engine, &compiled).unwrap()), 7);
        // The directory is possible now: not tried again.
        std::fs::remove_file(&scratch).unwrap();
        let next = builds.load(&engine, &compiled).unwrap();
        assert!(!scratch.exists(), "not created: never tried");
        assert_eq!(run(&engine, &next), 7);
    }

    /// Where the cache has no build, one made ahead of time is loaded and
    /// runs, and nothing is compiled or written; one that fails its
    /// checksum, lies in a directory others could write, or was made with
    /// other settings than the engine's is compiled here instead.
    #[test]
    fn a_build_made_ahead_of_time_loads_where_the_cache_has_none() {
        use crate::runtime::test_component::{returning, run};
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (cache_dir, ahead) = (dir.path().join("cache"), dir.path().join("precompiled"));
        let engine = Engine::default();
        let mut cache = ArtifactCache::new(Some(&cache_dir), &engine);
        cache.set_precompiled(Some(&ahead));
        let wasm = returning(7);
        let digest = sha256_digest(&wasm);
        let never = || -> anyhow::Result<Vec<u8>> { panic!("compiled") };
        let compiled = engine.precompile_component(&wasm).unwrap();
        create_precompiled_dir(&ahead).unwrap();
        let artifact = write_precompiled(&ahead, &digest, &compiled).unwrap();
        let (component, outcome) = cache.load_or_compile(&engine, &digest, never).unwrap();
        assert_eq!(outcome, CacheOutcome::Precompiled);
        assert_eq!(run(&engine, &component), 7);
        assert!(!cache_dir.exists(), "nothing written");
        let mode = std::fs::metadata(&artifact).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "an image's reader may be any user");

        let fresh = || {
            let _ = std::fs::remove_dir_all(&cache_dir);
            cache.load_or_compile(&engine, &digest, compiling(&engine, &wasm))
        };
        // The cache's own build, once there, comes first.
        let own = ArtifactCache::new(Some(&cache_dir), &engine);
        own.load_or_compile(&engine, &digest, compiling(&engine, &wasm))
            .unwrap();
        assert!(matches!(cache.lookup(&engine, &digest), Lookup::Hit(_)));
        // A symlink in its place, to a sound build elsewhere: not followed.
        let elsewhere = dir.path().join("elsewhere.cwasm");
        std::fs::rename(&artifact, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &artifact).unwrap();
        assert_eq!(
            fresh().unwrap().1,
            CacheOutcome::Miss,
            "a symlink is not followed"
        );
        std::fs::remove_file(&artifact).unwrap();
        std::fs::rename(&elsewhere, &artifact).unwrap();
        assert_eq!(fresh().unwrap().1, CacheOutcome::Precompiled);
        let set = |m: u32| std::fs::set_permissions(&ahead, PermissionsExt::from_mode(m));
        set(0o777).unwrap();
        assert_eq!(
            fresh().unwrap().1,
            CacheOutcome::Corrupt,
            "others may write there"
        );
        set(0o755).unwrap();
        let mut flipped = compiled.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0xff;
        std::fs::write(&artifact, &flipped).unwrap();
        assert_eq!(
            fresh().unwrap().1,
            CacheOutcome::Corrupt,
            "not what was written"
        );
        // A FIFO for the sidecar is not waited on; a link for it not followed.
        let sidecar = artifact.with_extension("xxh3");
        let saved = std::fs::read(&sidecar).unwrap();
        std::fs::remove_file(&sidecar).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &sidecar,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(fresh().unwrap().1, CacheOutcome::Corrupt, "a FIFO");
        std::fs::remove_file(&sidecar).unwrap();
        std::fs::write(dir.path().join("sum"), &saved).unwrap();
        std::os::unix::fs::symlink(dir.path().join("sum"), &sidecar).unwrap();
        assert_eq!(fresh().unwrap().1, CacheOutcome::Miss, "a link");
        std::fs::remove_file(&sidecar).unwrap();
        std::fs::write(&sidecar, &saved).unwrap();
        // Sound, but made by an engine with other settings: wasmtime refuses it.
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let other = Engine::new(&config)
            .unwrap()
            .precompile_component(&wasm)
            .unwrap();
        write_precompiled(&ahead, &digest, &other).unwrap();
        let (component, outcome) = fresh().unwrap();
        assert_eq!(outcome, CacheOutcome::Miss);
        assert_eq!(run(&engine, &component), 7);
        // Only a sha256 digest names a file.
        assert!(precompiled_entry(&ahead, "sha256:../../etc/passwd").is_none());
        assert!(write_precompiled(&ahead, "../x", &compiled).is_err());
    }

    /// A precompiled-dir serves only when it and every directory above it
    /// are Tend's alone, or sticky above it (`/tmp`); each problem is said
    /// with what fixes it.
    #[test]
    fn a_precompiled_dir_serves_only_when_it_and_those_above_are_tends_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let set = |p: &Path, m: u32| std::fs::set_permissions(p, PermissionsExt::from_mode(m));
        let (above, builds) = (dir.path().join("above"), dir.path().join("above/builds"));
        create_precompiled_dir(&builds).unwrap();
        assert_eq!(
            precompiled_dir_problem(&builds),
            None,
            "under a sticky /tmp"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&builds, &link).unwrap();
        assert_eq!(precompiled_dir_problem(&link), None);
        set(&builds, 0o777).unwrap();
        let problem = precompiled_dir_problem(&builds).unwrap();
        assert!(
            problem.contains("chmod o-w") && problem.contains("not loaded"),
            "{problem}"
        );
        set(&builds, 0o755).unwrap();
        set(&above, 0o777).unwrap();
        for named in [&builds, &link] {
            let problem = precompiled_dir_problem(named).unwrap();
            assert!(problem.contains("in place of precompiled-dir"), "{problem}");
        }
        set(&above, 0o1777).unwrap();
        assert_eq!(precompiled_dir_problem(&builds), None, "sticky");
        // Sticky, but another user's: they may rename what is in it.
        std::os::unix::fs::chown(&above, Some(65534), None).unwrap();
        let problem = precompiled_dir_problem(&builds).unwrap();
        assert!(problem.contains("uid 65534"), "{problem}");
        let missing = precompiled_dir_problem(&dir.path().join("missing")).unwrap();
        assert!(missing.contains("is not a directory"), "{missing}");
    }

    #[test]
    fn eviction_keeps_entries_in_use_and_bounds_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ArtifactCache::new(Some(dir.path()), &engine);
        // Three distinct components: the empty one plus a custom section each.
        let components: Vec<Vec<u8>> = (0..3u8)
            .map(|i| [EMPTY_COMPONENT, &[0x00, 0x03, 0x01, b'x', b'0' + i]].concat())
            .collect();
        let digests: Vec<String> = components.iter().map(|c| sha256_hex(c)).collect();
        for (component, digest) in components.iter().zip(&digests) {
            cache
                .load_or_compile(&engine, digest, compiling(&engine, component))
                .unwrap();
        }
        let artifact = |d: &String| cache.entry(d).unwrap().0;
        let in_use = std::collections::HashSet::from([digests[0].clone()]);
        assert_eq!(
            cache.evict(&in_use, u64::MAX),
            0,
            "under the bound nothing goes"
        );
        assert_eq!(cache.evict(&in_use, 0), 2, "everything not in use goes");
        assert!(artifact(&digests[0]).exists());
        assert!(!artifact(&digests[1]).exists() && !artifact(&digests[2]).exists());
        assert!(!artifact(&digests[1]).with_extension("xxh3").exists());
    }

    #[test]
    fn engines_with_other_settings_use_other_entries() {
        let dir = tempfile::tempdir().unwrap();
        let plain = Engine::default();
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let epoch = Engine::new(&config).unwrap();
        let digest = sha256_hex(EMPTY_COMPONENT);
        let a = ArtifactCache::new(Some(dir.path()), &plain);
        let b = ArtifactCache::new(Some(dir.path()), &epoch);
        assert_ne!(a.entry(&digest), b.entry(&digest));
    }

    /// A valid artifact and its matching sidecar are still not loaded when
    /// anyone but Tend could have written them or their directory: an
    /// unkeyed checksum proves nothing against a writer.
    #[test]
    fn an_entry_others_could_write_is_recompiled_never_loaded() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let engine = Engine::default();
        let cache = ArtifactCache::new(Some(&cache_dir), &engine);
        let digest = sha256_hex(EMPTY_COMPONENT);
        cache
            .load_or_compile(&engine, &digest, compiling(&engine, EMPTY_COMPONENT))
            .unwrap();
        let (artifact, checksum) = cache.entry(&digest).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&cache_dir), 0o700);
        assert_eq!((mode(&artifact), mode(&checksum)), (0o600, 0o600));
        assert!(matches!(cache.lookup(&engine, &digest), Lookup::Hit(_)));
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        // A group's write counts unless the group is root's: the checksum's
        // group is made another (nogroup) first.
        std::os::unix::fs::chown(&checksum, None, Some(65534)).unwrap();
        assert!(matches!(cache.lookup(&engine, &digest), Lookup::Hit(_)));
        for (path, widened) in [(&artifact, 0o602), (&checksum, 0o620), (&cache_dir, 0o777)] {
            let before = mode(path);
            set(path, widened);
            assert!(
                matches!(cache.lookup(&engine, &digest), Lookup::Corrupt(_)),
                "{} at {widened:o}",
                path.display()
            );
            set(path, before);
        }
        // Another user's file (chown needs root, as Tend's tests do).
        std::os::unix::fs::chown(&artifact, Some(65534), None).unwrap();
        assert!(matches!(cache.lookup(&engine, &digest), Lookup::Corrupt(_)));
    }
}
