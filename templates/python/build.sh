#!/bin/sh
# Builds {{name}}.wasm, a WebAssembly component for Tend, with componentize-py.
set -eu
cd "$(dirname "$0")"
componentize-py -d "{{tend}}/wit" -w plugin componentize app -p . -p "{{tend}}/sdk/python" -o {{name}}.wasm
echo "built {{name}}.wasm"
