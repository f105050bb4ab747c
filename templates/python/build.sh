#!/bin/sh
# Builds {{name}}.wasm, a WebAssembly component for Tend, with componentize-py
# 0.25.1 (the SDK uses the module names it generates): from PATH, else from the
# venv `cargo xtask lang python` makes in {{tend}}/target/venv.
set -eu
cd "$(dirname "$0")"
tool=componentize-py
if ! command -v "$tool" >/dev/null 2>&1; then
  tool="{{tend}}/target/venv/bin/componentize-py"
  if [ ! -x "$tool" ]; then
    echo "build.sh: componentize-py not found: pip install componentize-py==0.25.1" >&2
    echo "  (or run \`cargo xtask lang python\` in {{tend}}, which installs it in {{tend}}/target/venv)" >&2
    exit 1
  fi
fi
"$tool" -d "{{tend}}/wit" -w plugin componentize app -p . -p "{{tend}}/sdk/python" -o {{name}}.wasm
echo "built {{name}}.wasm"
