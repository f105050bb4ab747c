#!/usr/bin/env bash
# The C SDK's unit test (tend_test.c: the JSON extractor on hostile input),
# compiled natively with gcc, AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")"
cc=${CC:-gcc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$cc" -std=gnu11 -g -Wall -Wextra -Werror -Wno-attributes -fsanitize=address,undefined \
  -fno-sanitize-recover=all -Ibindings tend_test.c tend.c bindings/plugin_helpers.c -o "$out/test"
"$out/test"
