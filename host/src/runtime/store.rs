//! The data of one call's `Store`: the WASI context (no ambient authority),
//! the memory limiter, and the capability adapters the linker answers from.

use crate::capabilities::{Capabilities, HasCapabilities};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Caps the total linear memory of one instance (all its memories together),
/// and remembers whether it had to refuse growth.
pub(super) struct MemoryLimiter {
    pub(super) limit: usize,
    pub(super) used: usize,
    pub(super) exceeded: bool,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let used = self.used + desired.saturating_sub(current);
        if used > self.limit {
            self.exceeded = true;
            return Err(wasmtime::Error::msg(format!(
                "memory limit of {} bytes exceeded",
                self.limit
            )));
        }
        self.used = used;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// The data of one call's `Store`.
pub struct CallState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: MemoryLimiter,
    pub(super) caps: Capabilities,
}

impl HasCapabilities for CallState {
    fn capabilities(&mut self) -> &mut Capabilities {
        &mut self.caps
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
