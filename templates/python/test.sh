#!/bin/sh
# The unit tests, with pytest, against the SDK's fakes ({{tend}}/target/tend-fakes.wasm
# unless TEND_FAKES_WASM says otherwise; `cargo xtask lang python` builds it).
set -eu
cd "$(dirname "$0")"
PYTHONPATH="{{tend}}/sdk/python:.${PYTHONPATH:+:$PYTHONPATH}" python -m pytest -q -p no:cacheprovider test_{{name_snake}}.py
