#!/usr/bin/env bash
# Builds {{name}}.wasm: Go compiles the plugin for GOOS=wasip1 as a reactor
# (-buildmode=c-shared; the bindings' runtime links to Go's runtime by name,
# hence -checklinkname=0), then wasm-tools embeds world `plugin` from Tend's
# WIT and turns the module into a component with the WASI preview-1 reactor
# adapter. Offline: GOPROXY=off, the SDK comes from the Tend checkout.
set -euo pipefail
cd "$(dirname "$0")"
tend="{{tend}}"
adapter=${TEND_ADAPTER:-$tend/target/tools/wasi_snapshot_preview1.reactor.wasm}
for tool in go wasm-tools; do
  command -v $tool >/dev/null || {
    echo "build.sh: $tool not found: put $tend/target/venv/bin on PATH (\`cargo xtask lang go\` in $tend installs Go and wasm-tools there)" >&2
    exit 1
  }
done
# go.mod's go line is the oldest Go that builds this, and GOTOOLCHAIN=local
# forbids downloading a newer one: say where Tend's Go is rather than let go
# fail with only "go.mod requires go >= ...". (From /, away from go.mod.)
need=$(sed -n 's/^go //p' go.mod)
have=$(cd / && GOTOOLCHAIN=local go version 2>/dev/null | awk '{print $3}') || true
have=${have#go}
have=${have:-"0 (go version failed)"}
[ "$(printf '%s\n' "$need" "$have" | sort -V | head -n1)" = "$need" ] || {
  echo "build.sh: $(command -v go) is Go $have, older than go.mod's go $need: put $tend/target/venv/bin first on PATH (\`cargo xtask lang go\` in $tend installs Go $need or later there)" >&2
  exit 1
}
[ -f "$adapter" ] || {
  echo "build.sh: no WASI adapter at $adapter: run \`cargo xtask lang go\` in $tend, or set TEND_ADAPTER" >&2
  exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -checklinkname=0' -o "$out/core.wasm" .
wasm-tools component embed "$tend/wit" --world plugin "$out/core.wasm" -o "$out/embedded.wasm"
wasm-tools component new "$out/embedded.wasm" --adapt "wasi_snapshot_preview1=$adapter" -o {{name}}.wasm
echo "built $(pwd)/{{name}}.wasm"
