#!/bin/sh
# Builds {{name}}.wasm, a WebAssembly component for Tend: esbuild bundles
# {{name_snake}}.js with the SDK ({{tend}}/sdk/js), componentize-qjs embeds the
# bundle in the QuickJS engine. Both come from PATH, else from
# {{tend}}/target/npm/node_modules/.bin, where `cargo xtask lang js` in {{tend}}
# installs the versions the SDK pins ({{tend}}/sdk/js/tooling/package-lock.json).
set -eu
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1; then
  echo "build.sh: no node on PATH: install Node.js 20 or later" >&2
  exit 1
fi
tools="{{tend}}/target/npm/node_modules/.bin"
for tool in esbuild componentize-qjs; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ ! -x "$tools/$tool" ]; then
      echo "build.sh: $tool not found on PATH nor in $tools: run \`cargo xtask lang js\` in {{tend}}, which installs it there" >&2
      exit 1
    fi
    PATH="$tools:$PATH"
  fi
done
node "{{tend}}/sdk/js/bin/tend-js-build.mjs" {{name_snake}}.js {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
