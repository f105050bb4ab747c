#!/usr/bin/env bash
# The fake Kubernetes API server (tests/peers/kube-apiserver.py) on loopback.
#   kube-apiserver.sh start DIR [PORT [ARGS...]]
#                          start it (PORT 0 or absent: a free port), PID in DIR/kube-apiserver.pid;
#                          prints its URL (http://127.0.0.1:PORT) once GET /version answers.
#                          DIR/kubeconfig points kubectl at it as the admin (over HTTPS,
#                          DIR/tls-port); without credentials a request is system:anonymous
#                          and refused as a real server refuses it. ARGS go to the server
#                          (--history N, --bookmark-interval S).
#   kube-apiserver.sh stop DIR
#                          SIGTERM the server whose PID is in DIR/kube-apiserver.pid, SIGKILL
#                          after 5 s; fails if it is still running.
# Its request log: DIR/kube-apiserver.log; its stderr: DIR/server.err.
# Needs target/venv with aiohttp, jsonpatch and PyYAML (`cargo xtask test` installs them),
# or KUBE_FAKE_PYTHON naming a python that has them. The Rust harness (KubeApi in
# tests/src/peers/kube.rs) starts the server itself, as its child.
set -euo pipefail
usage="usage: kube-apiserver.sh start DIR [PORT [ARGS...]] | stop DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
pidfile=$dir/kube-apiserver.pid

# shellcheck source=lib.sh
source "$here/lib.sh"

case $cmd in
start)
  port=${3:-0}
  shift $(($# < 3 ? $# : 3))
  python=${KUBE_FAKE_PYTHON:-$here/../../target/venv/bin/python}
  start_python_peer "the fake API server" "$python" "aiohttp, jsonpatch, yaml" kube-apiserver.py /version "$dir" "$port" "$@"
  ;;
stop)
  failed=0
  stop_pidfile "$pidfile" || failed=1
  rm -f "$dir/port"
  exit $failed
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
