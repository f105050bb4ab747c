#!/bin/sh
# The unit tests, with pytest, against the SDK's fakes ({{tend}}/target/tend-fakes.wasm
# unless TEND_FAKES_WASM says otherwise; `cargo xtask lang python` in {{tend}} builds it).
# Python: $PYTHON, else python3 from PATH when it has pytest and wasmtime, else
# the venv `cargo xtask lang python` makes ({{tend}}/target/venv).
set -eu
cd "$(dirname "$0")"
venv="{{tend}}/target/venv/bin/python3"
has_tools() { "$1" -c "import pytest, wasmtime" >/dev/null 2>&1; }
if [ -n "${PYTHON:-}" ]; then
  python=$PYTHON
elif command -v python3 >/dev/null 2>&1 && has_tools python3; then
  python=python3
elif [ -x "$venv" ]; then
  python=$venv
elif command -v python3 >/dev/null 2>&1; then
  python=python3
else
  echo "test.sh: no python3 on PATH: install Python 3 (Debian: apt-get install python3 python3-venv), or set PYTHON" >&2
  exit 1
fi
if ! has_tools "$python"; then
  echo "test.sh: $python cannot import pytest and wasmtime: pip install pytest wasmtime==48.0.0" >&2
  echo "  (or run \`cargo xtask lang python\` in {{tend}}, which makes {{tend}}/target/venv with both)" >&2
  exit 1
fi
fakes=${TEND_FAKES_WASM:-{{tend}}/target/tend-fakes.wasm}
if [ ! -f "$fakes" ]; then
  echo "test.sh: no fakes module at $fakes: \`cargo xtask lang python\` in {{tend}} builds it (or set TEND_FAKES_WASM)" >&2
  exit 1
fi
export TEND_FAKES_WASM="$fakes"
PYTHONPATH="{{tend}}/sdk/python:.${PYTHONPATH:+:$PYTHONPATH}" "$python" -m pytest -q -p no:cacheprovider test_{{name_snake}}.py
