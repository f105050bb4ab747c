//! `tend:plugin/files` answered by the adapter.

use super::adapter::PluginFiles;
use crate::capabilities::Capability;
use crate::wit::{files, types};

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl files::Host for PluginFiles {
    async fn read(&mut self, path: String) -> WitResult<Vec<u8>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "read", (path,), |(path,)| this.read(path))
            .await
    }
    async fn write(
        &mut self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> WitResult<bool> {
        let this = &*self;
        let args = (path, contents, mode);
        this.call
            .answer(Self::NAME, super::WRITE, args, |(path, contents, mode)| {
                this.write(path, contents, mode)
            })
            .await
    }
    async fn remove(&mut self, path: String) -> WitResult<bool> {
        let this = &*self;
        this.call
            .answer(Self::NAME, super::REMOVE, (path,), |(path,)| {
                this.remove(path)
            })
            .await
    }
    async fn list_dir(&mut self, path: String) -> WitResult<Vec<files::DirEntry>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "list-dir", (path,), |(path,)| this.list(path))
            .await
    }
    async fn stat(&mut self, path: String) -> WitResult<Option<files::Metadata>> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "stat", (path,), |(path,)| this.metadata(path))
            .await
    }
}
