//! `tend:plugin/files` answered by the adapter.

use super::adapter::PluginFiles;
use super::backend::FileKind;
use crate::wit::{files, types};
use wasmtime::component::{HasSelf, Linker};

type WitResult<T> = Result<T, types::Error>;

pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PluginFiles,
) -> wasmtime::Result<()> {
    files::add_to_linker::<T, HasSelf<PluginFiles>>(linker, get)
}

fn file_kind(kind: FileKind) -> files::FileKind {
    match kind {
        FileKind::File => files::FileKind::File,
        FileKind::Directory => files::FileKind::Directory,
        FileKind::Symlink => files::FileKind::Symlink,
        FileKind::Other => files::FileKind::Other,
    }
}

impl files::Host for PluginFiles {
    async fn read(&mut self, path: String) -> WitResult<Vec<u8>> {
        let result = PluginFiles::read(self, path).await;
        self.call.counted("files", "read", result)
    }
    async fn write(
        &mut self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> WitResult<bool> {
        let result = PluginFiles::write(self, path, contents, mode).await;
        self.call.counted("files", "write", result)
    }
    async fn remove(&mut self, path: String) -> WitResult<bool> {
        let result = PluginFiles::remove(self, path).await;
        self.call.counted("files", "remove", result)
    }
    async fn list_dir(&mut self, path: String) -> WitResult<Vec<files::DirEntry>> {
        let result = PluginFiles::list(self, path).await;
        let entries = self.call.counted("files", "list-dir", result)?;
        Ok(entries
            .into_iter()
            .map(|e| files::DirEntry {
                name: e.name,
                kind: file_kind(e.kind),
            })
            .collect())
    }
    async fn stat(&mut self, path: String) -> WitResult<Option<files::Metadata>> {
        let result = PluginFiles::metadata(self, path).await;
        let meta = self.call.counted("files", "stat", result)?;
        Ok(meta.map(|m| files::Metadata {
            kind: file_kind(m.kind),
            size: m.size,
            mode: m.mode,
            modified_ms: m.modified_ms,
        }))
    }
}
