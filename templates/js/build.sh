#!/bin/sh
# Builds {{name}}.wasm, a WebAssembly component for Tend: esbuild bundles
# {{name_snake}}.js with the SDK ({{tend}}/sdk/js), componentize-qjs embeds the
# bundle in the QuickJS engine. Both come from PATH: `cargo xtask lang js` in
# {{tend}} installs them into {{tend}}/target/npm/node_modules/.bin.
set -eu
cd "$(dirname "$0")"
node "{{tend}}/sdk/js/bin/tend-js-build.mjs" {{name_snake}}.js {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
