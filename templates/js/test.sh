#!/bin/sh
# The unit tests, with Node's own runner, against the SDK's fakes
# ({{tend}}/target/tend-fakes.wasm, or $TEND_FAKES_WASM; `cargo xtask lang js`
# in {{tend}} builds it). The SDK is linked into node_modules as package.json's
# dependency says (no registry needed).
set -eu
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1; then
  echo "test.sh: no node on PATH: install Node.js 20 or later" >&2
  exit 1
fi
fakes=${TEND_FAKES_WASM:-{{tend}}/target/tend-fakes.wasm}
if [ ! -f "$fakes" ]; then
  echo "test.sh: no fakes module at $fakes: \`cargo xtask lang js\` in {{tend}} builds it (or set TEND_FAKES_WASM)" >&2
  exit 1
fi
export TEND_FAKES_WASM="$fakes"
mkdir -p node_modules/@tend
ln -sfn "{{tend}}/sdk/js" node_modules/@tend/sdk
node --test
