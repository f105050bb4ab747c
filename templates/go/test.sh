#!/usr/bin/env bash
# {{name}}'s unit tests: `go test`, natively, against tend/sdk/fake's scripted
# host. Offline: the SDK and its runtime come from the Tend checkout through
# go.mod's replace directives.
set -euo pipefail
cd "$(dirname "$0")"
tend="{{tend}}"
command -v go >/dev/null || {
  echo "test.sh: go not found: put $tend/target/venv/bin on PATH (\`cargo xtask lang go\` in $tend installs Go there)" >&2
  exit 1
}
# go.mod's go line is the oldest Go that builds this, and GOTOOLCHAIN=local
# forbids downloading a newer one: say where Tend's Go is rather than let go
# fail with only "go.mod requires go >= ...". (From /, away from go.mod.)
need=$(sed -n 's/^go //p' go.mod)
have=$(cd / && GOTOOLCHAIN=local go version 2>/dev/null | awk '{print $3}') || true
have=${have#go}
have=${have:-"0 (go version failed)"}
[ "$(printf '%s\n' "$need" "$have" | sort -V | head -n1)" = "$need" ] || {
  echo "test.sh: $(command -v go) is Go $have, older than go.mod's go $need: put $tend/target/venv/bin first on PATH (\`cargo xtask lang go\` in $tend installs Go $need or later there)" >&2
  exit 1
}
export GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
go vet .
go test .
