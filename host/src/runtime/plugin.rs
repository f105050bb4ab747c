//! A plugin compiled once: the validated component and its `InstancePre`,
//! shared by every reconcile until the file changes.

use super::cache::{CacheOutcome, Lookup, sha256_digest};
use super::store::CallState;
use super::{Compiler, Runtime};
use crate::wit::PluginPre;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wasmtime::component::Component;

/// The export every plugin must provide.
pub const RECONCILER_EXPORT: &str = "tend:plugin/reconciler@0.1.0";

pub struct CompiledPlugin {
    pub path: PathBuf,
    /// "sha256:<hex>" of the component file.
    pub digest: String,
    pub component: Component,
    pub pre: PluginPre<CallState>,
    /// Interfaces the component imports, for `tend plugins inspect`.
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub compiler: Compiler,
    pub cache: CacheOutcome,
    /// Time to compile or load from cache, and validate.
    pub load_time: Duration,
}

/// Why a plugin file could not be loaded; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid WebAssembly component: {cause}")]
    Compile { path: PathBuf, cause: String },
    #[error("{path}: does not export {RECONCILER_EXPORT} as Tend 0.1 defines it: {cause}")]
    Exports { path: PathBuf, cause: String },
    #[error("{path}: imports something Tend does not provide: {cause}")]
    Imports { path: PathBuf, cause: String },
    /// A plugin from a registry could not be pulled or verified (the text
    /// names the reference, the cause and the fix).
    #[error("{0}")]
    Fetch(String),
}

/// The build [`Runtime::load_quick`] serves on a compile-cache miss.
struct QuickBuild {
    component: Component,
    compiler: Compiler,
    cache: CacheOutcome,
    /// Why Winch refused the component, when Cranelift built it instead.
    winch_refused: Option<String>,
}

impl Runtime {
    /// Compile with Winch; if Winch refuses (a proposal it does not implement,
    /// such as tail calls in QuickJS `--opt-size` builds), compile and cache
    /// with Cranelift instead. A component Cranelift refuses too is invalid:
    /// its error is Cranelift's, so the fall-back never hides a broken file.
    fn compile_quick(&self, wasm: &[u8], digest: &str) -> anyhow::Result<QuickBuild> {
        let winch_error = match Component::new(&self.baseline.engine, wasm) {
            Ok(component) => {
                return Ok(QuickBuild {
                    component,
                    compiler: Compiler::Winch,
                    cache: CacheOutcome::Miss,
                    winch_refused: None,
                });
            }
            Err(e) => e,
        };
        let (component, cache) =
            self.optimized
                .cache
                .load_or_compile(&self.optimized.engine, wasm, digest)?;
        Ok(QuickBuild {
            component,
            compiler: Compiler::Cranelift,
            cache,
            winch_refused: Some(format!("{winch_error:#}")),
        })
    }

    /// Read, compile with Cranelift (or load from the cache) and validate a
    /// component file. CPU-heavy on a cache miss: call it off the async executor.
    pub fn load(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        self.load_with(path, false)
    }

    /// Like [`Runtime::load`], but on a cache miss compile with Winch, about
    /// four times faster, so a new plugin can run at once; the caller then swaps
    /// in the Cranelift build from [`Runtime::load`] when it is ready. A
    /// component Winch cannot compile is built (and cached) by Cranelift at once.
    pub fn load_quick(&self, path: &Path) -> Result<CompiledPlugin, LoadError> {
        self.load_with(path, true)
    }

    fn load_with(&self, path: &Path, quick: bool) -> Result<CompiledPlugin, LoadError> {
        let started = Instant::now();
        let wasm = crate::untrusted::read(path, crate::untrusted::MAX_COMPONENT_BYTES).map_err(
            |source| LoadError::Read {
                path: path.to_path_buf(),
                source,
            },
        )?;
        let digest = sha256_digest(&wasm);
        let compile_error = |e: anyhow::Error| LoadError::Compile {
            path: path.to_path_buf(),
            cause: format!("{e:#}"),
        };
        let cached = match quick {
            true => match self.optimized.cache.lookup(&self.optimized.engine, &digest) {
                Lookup::Hit(component) => Some(component),
                Lookup::Absent | Lookup::Corrupt => None,
            },
            false => None,
        };
        let (tier, compiler, component, cache) = match cached {
            Some(component) => (
                &self.optimized,
                Compiler::Cranelift,
                component,
                CacheOutcome::Hit,
            ),
            None if quick => {
                let quick = self.compile_quick(&wasm, &digest).map_err(compile_error)?;
                if let Some(why) = &quick.winch_refused {
                    tracing::warn!(file = %path.display(), "Winch cannot compile it ({why}); compiled by Cranelift instead");
                }
                let tier = match quick.compiler {
                    Compiler::Winch => &self.baseline,
                    Compiler::Cranelift => &self.optimized,
                };
                (tier, quick.compiler, quick.component, quick.cache)
            }
            None => {
                let (component, cache) = self
                    .optimized
                    .cache
                    .load_or_compile(&self.optimized.engine, &wasm, &digest)
                    .map_err(compile_error)?;
                (&self.optimized, Compiler::Cranelift, component, cache)
            }
        };
        let ty = component.component_type();
        let imports: Vec<String> = ty
            .imports(&tier.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let exports: Vec<String> = ty
            .exports(&tier.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        if !exports.iter().any(|e| e == RECONCILER_EXPORT) {
            return Err(LoadError::Exports {
                path: path.to_path_buf(),
                cause: format!("it exports [{}]", exports.join(", ")),
            });
        }
        let instance_pre =
            tier.linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::Imports {
                    path: path.to_path_buf(),
                    cause: format!("{e:#}"),
                })?;
        let pre = PluginPre::new(instance_pre).map_err(|e| LoadError::Exports {
            path: path.to_path_buf(),
            cause: format!("{e:#}"),
        })?;
        Ok(CompiledPlugin {
            path: path.to_path_buf(),
            digest,
            component,
            pre,
            imports,
            exports,
            compiler,
            cache,
            load_time: started.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CanonicalFunctionSection, CodeSection, ComponentAliasSection, ComponentExportKind,
        ComponentExportSection, ComponentTypeSection, ExportKind, ExportSection, Function,
        FunctionSection, InstanceSection, Instruction, Module, ModuleSection, PrimitiveValType,
        TypeSection,
    };

    /// A component exporting `run: func() -> u32` whose core function reaches
    /// its result through `return_call` (a tail call, which Winch does not
    /// implement): 42.
    fn tail_call_component() -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function([], [wasm_encoder::ValType::I32]);
        let mut functions = FunctionSection::new();
        functions.function(0).function(0);
        let mut exports = ExportSection::new();
        exports.export("run", ExportKind::Func, 0);
        let mut code = CodeSection::new();
        let mut run = Function::new([]);
        run.instruction(&Instruction::ReturnCall(1));
        run.instruction(&Instruction::End);
        let mut answer = Function::new([]);
        answer.instruction(&Instruction::I32Const(42));
        answer.instruction(&Instruction::End);
        code.function(&run).function(&answer);
        let mut module = Module::new();
        module
            .section(&types)
            .section(&functions)
            .section(&exports)
            .section(&code);

        let mut component = wasm_encoder::Component::new();
        component.section(&ModuleSection(&module));
        let mut instances = InstanceSection::new();
        instances.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
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

    fn run(engine: &wasmtime::Engine, component: &Component) -> u32 {
        let mut store = wasmtime::Store::new(engine, ());
        store.set_epoch_deadline(u64::MAX / 2);
        let linker = wasmtime::component::Linker::new(engine);
        let instance = linker.instantiate(&mut store, component).unwrap();
        let run = instance
            .get_typed_func::<(), (u32,)>(&mut store, "run")
            .unwrap();
        run.call(&mut store, ()).unwrap().0
    }

    #[test]
    fn a_component_winch_refuses_is_built_by_cranelift_and_runs() {
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(Some(cache.path())).unwrap();
        let wasm = tail_call_component();
        let digest = sha256_digest(&wasm);
        assert!(
            Component::new(&runtime.baseline.engine, &wasm).is_err(),
            "the test needs a component Winch refuses"
        );

        let first = runtime.compile_quick(&wasm, &digest).unwrap();
        assert_eq!(first.compiler, Compiler::Cranelift);
        assert_eq!(first.cache, CacheOutcome::Miss);
        let why = first.winch_refused.expect("the fall-back is recorded");
        assert!(why.contains("tail call"), "{why}");
        assert_eq!(run(&runtime.optimized.engine, &first.component), 42);

        let again = runtime.compile_quick(&wasm, &digest).unwrap();
        assert_eq!(
            again.cache,
            CacheOutcome::Hit,
            "the Cranelift build was cached"
        );
    }

    #[test]
    fn a_component_winch_compiles_is_built_by_winch() {
        let runtime = Runtime::new(None).unwrap();
        let wasm = b"\0asm\x0d\0\x01\0";
        let build = runtime.compile_quick(wasm, "sha256:empty").unwrap();
        assert_eq!(build.compiler, Compiler::Winch);
        assert!(build.winch_refused.is_none());
    }

    #[test]
    fn a_corrupt_component_is_still_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(Some(&dir.path().join("cache"))).unwrap();
        let mut wasm = tail_call_component();
        let end = wasm.len() - 4;
        wasm.truncate(end);
        let file = dir.path().join("broken.wasm");
        std::fs::write(&file, &wasm).unwrap();
        match runtime.load_quick(&file) {
            Err(LoadError::Compile { .. }) => {}
            Err(other) => panic!("expected a compile error, got {other}"),
            Ok(_) => panic!("a truncated component loaded"),
        }
        assert!(
            !dir.path().join("cache").exists(),
            "nothing was cached for it"
        );
    }
}
