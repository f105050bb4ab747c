#!/bin/sh
# The unit tests, natively, against the SDK's in-memory fakes.
set -eu
cd "$(dirname "$0")"
cargo test
