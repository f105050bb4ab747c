#!/bin/sh
# The unit tests, with Node's own runner, against the SDK's fakes
# ({{tend}}/target/tend-fakes.wasm, or $TEND_FAKES_WASM). The SDK is linked
# into node_modules as package.json's dependency says (no registry needed).
set -eu
cd "$(dirname "$0")"
mkdir -p node_modules/@tend
ln -sfn "{{tend}}/sdk/js" node_modules/@tend/sdk
node --test
