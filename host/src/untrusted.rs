//! Reading a file Tend did not write: a path from a recording, the command
//! line or the operator's settings may name a device (`/dev/zero` is endless),
//! a FIFO (an ordinary open blocks until a writer comes, forever) or a file
//! far larger than anything Tend reads. Every such path is opened here:
//! without blocking, regular files only (checked on the open file, so a swap
//! after the check changes nothing), and never more than a bound is read.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest component file Tend reads (the biggest guests, Python's, are
/// about 20 MB; the OCI pull default stops at 64 MiB).
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;
/// The largest small text file Tend reads: a config, a key, a docker
/// config, a unit file.
pub const MAX_TEXT_BYTES: u64 = 4 << 20;

/// The bytes of the regular file at `path`, at most `max` of them; an error
/// (kind `InvalidInput`, saying what the path is) for anything else.
pub fn read(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    read_open(file, max)
}

/// [`read`], as UTF-8 text.
pub fn read_to_string(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// The bytes of `file` (opened without blocking) if it is a regular file of
/// at most `max` bytes.
pub fn read_open(file: File, max: u64) -> io::Result<Vec<u8>> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket, device or directory): only regular files are read",
        ));
    }
    if meta.len() > max {
        return Err(too_large(max));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // `take`: a file that grows while it is read still stops at the bound.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(bytes)
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("larger than the {} MiB read here", max >> 20),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn devices_fifos_and_directories_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let started = Instant::now();
        for path in [Path::new("/dev/zero"), &fifo, dir.path()] {
            let err = read(path, MAX_TEXT_BYTES).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{path:?}: {err}");
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_regular_file_is_read_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 2 << 20]).unwrap();
        assert_eq!(read(&path, 2 << 20).unwrap().len(), 2 << 20);
        let err = read(&path, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("larger than the 1 MiB"), "{err}");
        assert_eq!(read_to_string(&path, 2 << 20).unwrap().len(), 2 << 20);
    }
}
