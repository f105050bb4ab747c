//! The node's filesystem through cap-std: every path is opened relative to a
//! directory handle on the granted root, so symlinks cannot lead out of it.

use super::backend::{DirEntry, FileBackend, FileKind, Metadata};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};
use std::io::{self, Write};
use std::path::Path;

pub struct RealFiles;

/// The filesystem work itself, run on the blocking pool by [`RealFiles`].
struct Blocking;

fn open_root(root: &Path, create: bool) -> Result<Dir, CapError> {
    if create {
        std::fs::create_dir_all(root).map_err(|e| io_error(root, Path::new(""), e))?;
    }
    Dir::open_ambient_dir(root, cap_std::ambient_authority())
        .map_err(|e| io_error(root, Path::new(""), e))
}

/// Map an I/O error on `root/rel` to the capability error a plugin can act on.
fn io_error(root: &Path, rel: &Path, e: io::Error) -> CapError {
    let path = root.join(rel);
    let path = path.display();
    match e.kind() {
        io::ErrorKind::NotFound => CapError::NotFound(format!("{path} does not exist")),
        io::ErrorKind::PermissionDenied => CapError::Denied(format!(
            "{path}: {e} (paths resolve inside the granted root {}; symlinks may not lead out of it)",
            root.display()
        )),
        io::ErrorKind::AlreadyExists | io::ErrorKind::DirectoryNotEmpty => {
            CapError::Conflict(format!("{path}: {e}"))
        }
        io::ErrorKind::NotADirectory
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::InvalidInput => CapError::Invalid(format!("{path}: {e}")),
        _ => CapError::Other(format!("{path}: {e}")),
    }
}

fn kind_of(file_type: cap_std::fs::FileType) -> FileKind {
    if file_type.is_symlink() {
        FileKind::Symlink
    } else if file_type.is_dir() {
        FileKind::Directory
    } else if file_type.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

/// The directory holding `rel` and its file name.
fn split(rel: &Path) -> (&Path, &std::ffi::OsStr) {
    (
        rel.parent().unwrap_or(Path::new("")),
        rel.file_name().unwrap_or_default(),
    )
}

fn remove_stale_temp_files(dir: &Dir, prefix: &str) {
    let Ok(entries) = dir.entries() else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(prefix) && name.ends_with(".tmp") {
            let _ = dir.remove_file(&*name);
        }
    }
}

fn dir_or_self(dir: &Dir, rel: &Path) -> io::Result<Dir> {
    if rel.as_os_str().is_empty() {
        dir.try_clone()
    } else {
        dir.open_dir(rel)
    }
}

/// Open `rel` without blocking (a FIFO would block an ordinary open forever)
/// and read it if it is a regular file of at most `max` bytes.
fn read_regular(dir: &Dir, root: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, CapError> {
    use std::io::Read;
    let err = |e| io_error(root, rel, e);
    let nonblocking = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    let file = dir
        .open_with(rel, OpenOptions::new().read(true).custom_flags(nonblocking))
        .map_err(err)?;
    let meta = file.metadata().map_err(err)?;
    if !meta.is_file() {
        return Err(CapError::Invalid(format!(
            "{} is not a regular file (a FIFO, socket, device or directory): files reads only regular files",
            root.join(rel).display()
        )));
    }
    if meta.len() > max {
        return Err(CapError::Invalid(format!(
            "{} is {} bytes, more than the {max} one read may return",
            root.join(rel).display(),
            meta.len()
        )));
    }
    let mut contents = Vec::with_capacity(meta.len() as usize);
    // `take`: a file that grows while it is read still stops at the bound.
    file.into_std()
        .take(max + 1)
        .read_to_end(&mut contents)
        .map_err(err)?;
    if contents.len() as u64 > max {
        return Err(CapError::Invalid(format!(
            "{} grew past {max} bytes while it was read",
            root.join(rel).display()
        )));
    }
    Ok(contents)
}

impl Blocking {
    fn read(&self, root: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, CapError> {
        read_regular(&open_root(root, false)?, root, rel, max)
    }

    fn write(&self, root: &Path, rel: &Path, contents: &[u8], mode: u32) -> Result<bool, CapError> {
        let err = |e| io_error(root, rel, e);
        let dir = open_root(root, true)?;
        let (parent_rel, name) = split(rel);
        // An existing entry in the way (say, a symlink leading out of the root)
        // is reported by open_dir below, with the real reason.
        if !parent_rel.as_os_str().is_empty()
            && let Err(e) = dir.create_dir_all(parent_rel)
            && e.kind() != io::ErrorKind::AlreadyExists
        {
            return Err(err(e));
        }
        let parent = dir_or_self(&dir, parent_rel).map_err(err)?;
        let mode = mode & 0o777;
        match parent.symlink_metadata(name) {
            Ok(meta)
                if meta.is_file()
                    && meta.mode() & 0o7777 == mode
                    && meta.len() == contents.len() as u64 =>
            {
                let name = Path::new(name);
                if read_regular(&parent, root, name, contents.len() as u64)? == contents {
                    return Ok(false);
                }
            }
            Ok(meta) if meta.is_dir() => {
                return Err(CapError::Invalid(format!(
                    "{} is a directory",
                    root.join(rel).display()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        // Temp file in the same directory, fsync, rename over, fsync the directory:
        // a crash leaves either the old or the new content, never a mix, plus at
        // worst a stale temp file, which the next write of this file removes.
        let prefix = format!(".{}.tend-", name.to_string_lossy());
        remove_stale_temp_files(&parent, &prefix);
        let tmp = format!("{prefix}{}.tmp", fastrand::u64(..));
        let result = (|| {
            let mut file = parent.open_with(
                &tmp,
                OpenOptions::new().write(true).create_new(true).mode(mode),
            )?;
            file.write_all(contents)?;
            file.set_permissions(Permissions::from_mode(mode))?;
            file.sync_all()?;
            parent.rename(&tmp, &parent, name)?;
            // Directory handles from cap-std are O_PATH: open one for reading to fsync.
            parent
                .open_with(".", OpenOptions::new().read(true))?
                .sync_all()
        })();
        if result.is_err() {
            let _ = parent.remove_file(&tmp);
        }
        result.map(|()| true).map_err(err)
    }

    fn remove(&self, root: &Path, rel: &Path) -> Result<bool, CapError> {
        let err = |e| io_error(root, rel, e);
        let dir = match open_root(root, false) {
            Err(CapError::NotFound(_)) => return Ok(false),
            other => other?,
        };
        let meta = match dir.symlink_metadata(rel) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            other => other.map_err(err)?,
        };
        if meta.is_dir() {
            dir.remove_dir(rel)
        } else {
            dir.remove_file(rel)
        }
        .map_err(err)?;
        Ok(true)
    }

    fn list(&self, root: &Path, rel: &Path) -> Result<Vec<DirEntry>, CapError> {
        let err = |e| io_error(root, rel, e);
        let dir = dir_or_self(&open_root(root, false)?, rel).map_err(err)?;
        let mut entries = Vec::new();
        for entry in dir.entries().map_err(err)? {
            let entry = entry.map_err(err)?;
            let kind = kind_of(entry.file_type().map_err(err)?);
            entries.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn metadata(&self, root: &Path, rel: &Path) -> Result<Option<Metadata>, CapError> {
        let dir = match open_root(root, false) {
            Err(CapError::NotFound(_)) => return Ok(None),
            other => other?,
        };
        let meta = if rel.as_os_str().is_empty() {
            dir.dir_metadata()
        } else {
            dir.symlink_metadata(rel)
        };
        match meta {
            Ok(m) => Ok(Some(Metadata {
                kind: kind_of(m.file_type()),
                size: m.len(),
                mode: m.mode() & 0o7777,
                modified_ms: m
                    .modified()
                    .ok()
                    .and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(root, rel, e)),
        }
    }
}

/// Run a blocking filesystem operation off the async executor.
async fn blocking<T: Send + 'static>(
    op: impl FnOnce() -> Result<T, CapError> + Send + 'static,
) -> Result<T, CapError> {
    tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| CapError::Other(format!("file operation failed: {e}")))?
}

fn owned(root: &Path, rel: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    (root.to_path_buf(), rel.to_path_buf())
}

#[async_trait::async_trait]
impl FileBackend for RealFiles {
    async fn read(&self, root: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, CapError> {
        let (root, rel) = owned(root, rel);
        blocking(move || Blocking.read(&root, &rel, max)).await
    }

    async fn write(
        &self,
        permit: Permit,
        root: &Path,
        rel: &Path,
        contents: Vec<u8>,
        mode: u32,
    ) -> Result<bool, CapError> {
        let (root, rel) = owned(root, rel);
        // A write the deadline cut off still journals its real result when it completes.
        blocking(permit.travels_with(move || Blocking.write(&root, &rel, &contents, mode))).await
    }

    async fn remove(&self, permit: Permit, root: &Path, rel: &Path) -> Result<bool, CapError> {
        let (root, rel) = owned(root, rel);
        blocking(permit.travels_with(move || Blocking.remove(&root, &rel))).await
    }

    async fn list(&self, root: &Path, rel: &Path) -> Result<Vec<DirEntry>, CapError> {
        let (root, rel) = owned(root, rel);
        blocking(move || Blocking.list(&root, &rel)).await
    }

    async fn metadata(&self, root: &Path, rel: &Path) -> Result<Option<Metadata>, CapError> {
        let (root, rel) = owned(root, rel);
        blocking(move || Blocking.metadata(&root, &rel)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn write_is_atomic_reports_changes_and_leaves_no_temp_files() {
        let dir = root();
        let rel = Path::new("docker.io/hosts.toml");
        assert!(Blocking.write(dir.path(), rel, b"one", 0o600).unwrap());
        assert!(!Blocking.write(dir.path(), rel, b"one", 0o600).unwrap());
        assert!(
            Blocking.write(dir.path(), rel, b"one", 0o644).unwrap(),
            "mode change"
        );
        assert!(Blocking.write(dir.path(), rel, b"two", 0o644).unwrap());
        assert_eq!(std::fs::read(dir.path().join(rel)).unwrap(), b"two");
        let names: Vec<_> = Blocking
            .list(dir.path(), Path::new("docker.io"))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["hosts.toml"]);
        let meta = Blocking.metadata(dir.path(), rel).unwrap().unwrap();
        assert_eq!(
            (meta.kind, meta.size, meta.mode),
            (FileKind::File, 3, 0o644)
        );
    }

    #[test]
    fn a_temp_file_left_by_a_crash_is_removed_by_the_next_write() {
        let dir = root();
        std::fs::write(dir.path().join(".hosts.toml.tend-7.tmp"), b"half").unwrap();
        std::fs::write(dir.path().join(".other.tend-7.tmp"), b"not ours to judge").unwrap();
        assert!(
            Blocking
                .write(dir.path(), Path::new("hosts.toml"), b"x", 0o644)
                .unwrap()
        );
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [".other.tend-7.tmp", "hosts.toml"]);
    }

    #[test]
    fn symlinks_out_of_the_root_are_refused() {
        let dir = root();
        let outside = root();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        for rel in ["escape/secret", "link"] {
            let err = Blocking
                .read(dir.path(), Path::new(rel), 1 << 20)
                .unwrap_err();
            assert!(matches!(err, CapError::Denied(_)), "{rel}: {err}");
        }
        let err = Blocking
            .write(dir.path(), Path::new("escape/secret"), b"x", 0o644)
            .unwrap_err();
        assert!(matches!(err, CapError::Denied(_)), "{err}");
        // Writing over a link inside the root replaces the link, as rename does.
        assert!(
            Blocking
                .write(dir.path(), Path::new("link"), b"x", 0o644)
                .unwrap()
        );
        assert!(
            !std::fs::symlink_metadata(dir.path().join("link"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
    }

    #[test]
    fn only_regular_files_are_read_and_never_with_a_blocking_open() {
        let dir = root();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = Blocking
            .read(dir.path(), Path::new("fifo"), 1 << 20)
            .unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        std::fs::write(dir.path().join("big"), vec![0u8; 100]).unwrap();
        let err = Blocking.read(dir.path(), Path::new("big"), 99).unwrap_err();
        assert!(
            err.to_string()
                .contains("more than the 99 one read may return"),
            "{err}"
        );
        assert_eq!(
            Blocking
                .read(dir.path(), Path::new("big"), 100)
                .unwrap()
                .len(),
            100
        );
    }

    #[test]
    fn setuid_setgid_and_sticky_bits_never_reach_the_disk() {
        let dir = root();
        assert!(
            Blocking
                .write(dir.path(), Path::new("x"), b"x", 0o7755)
                .unwrap()
        );
        let mode = std::fs::metadata(dir.path().join("x"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
            0o755
        );
    }

    #[test]
    fn remove_and_missing_paths() {
        let dir = root();
        let rel = Path::new("a/b");
        Blocking.write(dir.path(), rel, b"x", 0o644).unwrap();
        assert!(matches!(
            Blocking.remove(dir.path(), Path::new("a")),
            Err(CapError::Conflict(_))
        ));
        assert!(Blocking.remove(dir.path(), rel).unwrap());
        assert!(!Blocking.remove(dir.path(), rel).unwrap());
        assert!(Blocking.remove(dir.path(), Path::new("a")).unwrap());
        assert_eq!(Blocking.metadata(dir.path(), rel).unwrap(), None);
        assert!(matches!(
            Blocking.read(dir.path(), rel, 1 << 20),
            Err(CapError::NotFound(_))
        ));
    }
}
