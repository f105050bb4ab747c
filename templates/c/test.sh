#!/usr/bin/env bash
# {{name}}'s unit test: the plugin and Tend's C SDK compiled natively (gcc, with
# AddressSanitizer and UBSan) beside test.c's stubs of the imports, then run.
set -euo pipefail
cd "$(dirname "$0")"
sdk="{{tend}}/sdk/c"
cc=${CC:-gcc}
command -v "$cc" >/dev/null || { echo "test.sh: $cc not found: install gcc (Debian) or set CC" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -Wno-attributes: the bindings' wasm export attributes mean nothing natively.
"$cc" -std=gnu11 -g -Wall -Wextra -Werror -Wno-attributes -fsanitize=address,undefined \
  -fno-sanitize-recover=all -I"$sdk" -I"$sdk/bindings" \
  {{name_snake}}.c test.c "$sdk/tend.c" "$sdk/bindings/plugin_helpers.c" -o "$out/test"
"$out/test"
