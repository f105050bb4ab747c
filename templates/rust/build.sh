#!/bin/sh
# Builds {{name}}.wasm, a WebAssembly component for Tend.
set -eu
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --profile plugin --target wasm32-wasip2
target="${CARGO_TARGET_DIR:-target}"
cp "$target/wasm32-wasip2/plugin/{{name_snake}}.wasm" {{name}}.wasm
echo "built {{name}}.wasm"
