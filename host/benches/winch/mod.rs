//! Winch, wasmtime's baseline compiler, for the benches that time it.

/// An engine that compiles with Winch, as the host's first build of a plugin
/// does (its own, unshared).
pub fn winch_engine() -> wasmtime::Engine {
    let mut config = wasmtime::Config::new();
    config
        .strategy(wasmtime::Strategy::Winch)
        .epoch_interruption(true)
        .wasm_component_model(true);
    wasmtime::Engine::new(&config).unwrap()
}
