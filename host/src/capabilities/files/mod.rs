//! `tend:plugin/files`: files on the node by absolute path, confined to the
//! plugin's granted roots (cap-std), written atomically, mutated only through
//! the mutation gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::PluginFiles;
pub use backend::{DirEntry, FileBackend, FileKind, Metadata};
pub use fake::FakeFiles;
pub use grants::{FileGrant, Resolved, resolve};
pub use real::RealFiles;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability, NoLimits, NoSettings};
use crate::wit::files;
use std::sync::Arc;
use tend_rules::wit::files::Function;
use wasmtime::component::{HasSelf, Linker};

/// The mutating operations, as budgets, the journal, call counts and the
/// fake name them.
const WRITE: &str = Function::Write.name();
const REMOVE: &str = Function::Remove.name();

impl Capability for PluginFiles {
    const NAME: &'static str = "files";
    const MUTATIONS: &'static [&'static str] = &[WRITE, REMOVE];
    type Grant = Vec<FileGrant>;
    type Settings = NoSettings;
    type Limits = NoLimits;
    type Backend = dyn FileBackend;
    type Fake = FakeFiles;

    fn describe_grant(grants: &Vec<FileGrant>) -> Vec<String> {
        grants
            .iter()
            .map(|g| {
                let access = if g.write { "read-write" } else { "read-only" };
                format!("{} ({access})", g.path.display())
            })
            .collect()
    }

    fn real(_: &NoSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn FileBackend>> {
        Ok(Arc::new(RealFiles))
    }

    fn fake() -> (Arc<dyn FileBackend>, Arc<FakeFiles>) {
        let fake = Arc::new(FakeFiles::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn FileBackend>,
        grants: &Vec<FileGrant>,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginFiles {
            backend: backend.clone(),
            grants: grants.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        files::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginFiles {
    async fn read(&self, path: String) -> Result<Vec<u8>, CapError> {
        self.read(path).await
    }
    async fn write(
        &self,
        path: String,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<bool, CapError> {
        self.write(path, contents, mode).await
    }
    async fn remove(&self, path: String) -> Result<bool, CapError> {
        self.remove(path).await
    }
    async fn list_dir(&self, path: String) -> Result<Vec<crate::wit::files::DirEntry>, CapError> {
        self.list(path).await
    }
    async fn stat(&self, path: String) -> Result<Option<crate::wit::files::Metadata>, CapError> {
        self.metadata(path).await
    }
}
