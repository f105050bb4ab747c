//! Small components for the runtime's tests, built with wasm-encoder: a core
//! module's function `run` lifted as the component's `run: func() -> u32`.

use wasm_encoder::{
    CanonicalFunctionSection, CodeSection, Component, ComponentAliasSection, ComponentExportKind,
    ComponentExportSection, ComponentTypeSection, DataSection, ExportKind, ExportSection, Function,
    FunctionSection, InstanceSection, MemorySection, Module, ModuleSection, PrimitiveValType,
    TableSection, TypeSection, ValType,
};
use wasmtime::Engine;

/// What a test module holds besides its functions.
#[derive(Default)]
pub struct Extras {
    pub tables: Option<TableSection>,
    pub memories: Option<MemorySection>,
    pub data: Option<DataSection>,
}

/// A core module whose functions are all `() -> i32`, the first exported as
/// `run`.
pub fn module(functions: &[Function], extras: &Extras) -> Module {
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    let mut declared = FunctionSection::new();
    for _ in functions {
        declared.function(0);
    }
    let mut exports = ExportSection::new();
    exports.export("run", ExportKind::Func, 0);
    let mut code = CodeSection::new();
    for function in functions {
        code.function(function);
    }
    let mut module = Module::new();
    module.section(&types).section(&declared);
    if let Some(tables) = &extras.tables {
        module.section(tables);
    }
    if let Some(memories) = &extras.memories {
        module.section(memories);
    }
    module.section(&exports).section(&code);
    if let Some(data) = &extras.data {
        module.section(data);
    }
    module
}

/// The component around `module`, instantiated `copies` times (the first
/// copy's `run` is the export).
pub fn exporting_run(module: &Module, copies: u32) -> Vec<u8> {
    let mut component = Component::new();
    component.section(&ModuleSection(module));
    let mut instances = InstanceSection::new();
    for _ in 0..copies {
        instances.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
    }
    component.section(&instances);
    let mut aliases = ComponentAliasSection::new();
    aliases.alias(wasm_encoder::Alias::CoreInstanceExport {
        instance: 0,
        kind: ExportKind::Func,
        name: "run",
    });
    component.section(&aliases);
    let mut func_types = ComponentTypeSection::new();
    func_types
        .function()
        .params(Vec::<(&str, wasm_encoder::ComponentValType)>::new())
        .result(Some(PrimitiveValType::U32.into()));
    component.section(&func_types);
    let mut lifts = CanonicalFunctionSection::new();
    lifts.lift(0, 0, []);
    component.section(&lifts);
    let mut component_exports = ComponentExportSection::new();
    component_exports.export("run", ComponentExportKind::Func, 0, None);
    component.section(&component_exports);
    component.finish()
}

/// `run` in a fresh instance of `component`.
pub fn run(engine: &Engine, component: &wasmtime::component::Component) -> u32 {
    let mut store = wasmtime::Store::new(engine, ());
    store.set_epoch_deadline(u64::MAX / 2);
    let linker = wasmtime::component::Linker::new(engine);
    let instance = linker.instantiate(&mut store, component).unwrap();
    let run = instance
        .get_typed_func::<(), (u32,)>(&mut store, "run")
        .unwrap();
    run.call(&mut store, ()).unwrap().0
}

/// A component whose `run` returns `value`.
pub fn returning(value: i32) -> Vec<u8> {
    let mut function = Function::new([]);
    function.instruction(&wasm_encoder::Instruction::I32Const(value));
    function.instruction(&wasm_encoder::Instruction::End);
    exporting_run(&module(&[function], &Extras::default()), 1)
}

/// The line of /proc/self/maps whose address range holds `address`.
pub fn mapping_holding(address: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find(|line| {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            range.is_some_and(|(start, end)| {
                let hex = |n| usize::from_str_radix(n, 16).unwrap_or(0);
                (hex(start)..hex(end)).contains(&address)
            })
        })
        .map(str::to_string)
}

/// Whether `component`'s compiled image is a mapping of a file with no name
/// (deleted, or never linked) in `dir`.
pub fn mapped_from_unnamed_file_in(
    dir: &std::path::Path,
    component: &wasmtime::component::Component,
) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap();
    mapping_holding(component.image_range().start as usize)
        .is_some_and(|line| line.contains(&*dir.to_string_lossy()) && line.ends_with("(deleted)"))
}
