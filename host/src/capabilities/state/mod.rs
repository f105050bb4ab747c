//! `tend:plugin/state`: each plugin's own persistent key-value store. It is
//! the plugin's memory, not the node: writes do not pass the mutation gate,
//! and in a dry run they land in an overlay the same reconcile reads back.

mod adapter;
mod backend;
mod fake;
mod real;
mod wit;

pub use adapter::PluginState;
pub use backend::{StateBackend, StateLimits};
pub use fake::FakeState;
pub use real::RedbState;
/// The rules crate's bounds, shared with the SDK's fake.
pub use tend_rules::state::{MAX_KEY, MAX_VALUE};

use crate::capabilities::call::Call;
use crate::capabilities::capability::{AlwaysGranted, BackendEnv, Capability, NoSettings};
use crate::wit::state;
use std::sync::Arc;
use std::sync::Mutex;
use wasmtime::component::{HasSelf, Linker};

impl Capability for PluginState {
    const NAME: &'static str = "state";
    const MUTATIONS: &'static [&'static str] = &[];
    type Grant = AlwaysGranted;
    type Settings = NoSettings;
    type Limits = StateLimits;
    type Backend = dyn StateBackend;
    type Fake = FakeState;

    fn describe_grant(_: &AlwaysGranted) -> Vec<String> {
        vec!["always granted (its own keys only)".into()]
    }

    fn real(_: &NoSettings, env: &BackendEnv) -> anyhow::Result<Arc<dyn StateBackend>> {
        Ok(Arc::new(RedbState::open(
            &env.state_dir.join("state.redb"),
        )?))
    }

    fn fake() -> (Arc<dyn StateBackend>, Arc<FakeState>) {
        let fake = Arc::new(FakeState::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn StateBackend>,
        _: &AlwaysGranted,
        limits: &StateLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginState {
            backend: backend.clone(),
            limits: *limits,
            call: call.clone(),
            overlay: Mutex::default(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        state::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginState {
    async fn get(&self, key: String) -> Result<Option<Vec<u8>>, CapError> {
        self.get(&key).await
    }
    async fn set(&self, key: String, value: Vec<u8>) -> Result<(), CapError> {
        self.set(&key, value).await
    }
    async fn delete(&self, key: String) -> Result<bool, CapError> {
        self.delete(&key).await
    }
    async fn list_keys(&self, prefix: String) -> Result<Vec<String>, CapError> {
        self.list_keys(&prefix).await
    }
}
