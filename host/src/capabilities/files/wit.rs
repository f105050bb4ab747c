//! `tend:plugin/files` answered by the adapter.

use super::adapter::PluginFiles;
use crate::capabilities::Capability;
use crate::wit::{files, types};

type WitResult<T> = Result<T, types::Error>;

impl files::Host for PluginFiles {
    async fn read(&mut self, path: String) -> WitResult<Vec<u8>> {
        let result = PluginFiles::read(self, path).await;
        self.call.counted(Self::NAME, "read", result)
    }
    async fn write(
        &mut self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> WitResult<bool> {
        let result = PluginFiles::write(self, path, contents, mode).await;
        self.call.counted(Self::NAME, super::WRITE, result)
    }
    async fn remove(&mut self, path: String) -> WitResult<bool> {
        let result = PluginFiles::remove(self, path).await;
        self.call.counted(Self::NAME, super::REMOVE, result)
    }
    async fn list_dir(&mut self, path: String) -> WitResult<Vec<files::DirEntry>> {
        let result = PluginFiles::list(self, path).await;
        self.call.counted(Self::NAME, "list-dir", result)
    }
    async fn stat(&mut self, path: String) -> WitResult<Option<files::Metadata>> {
        let result = PluginFiles::metadata(self, path).await;
        self.call.counted(Self::NAME, "stat", result)
    }
}
