#!/usr/bin/env bash
# The fake Kubernetes API server (tests/peers/kube-apiserver.py) on loopback.
#   kube-apiserver.sh start DIR [PORT [ARGS...]]
#                          start it (PORT 0 or absent: a free port), PID in DIR/kube-apiserver.pid;
#                          prints its URL (http://127.0.0.1:PORT) once GET /version answers.
#                          DIR/kubeconfig points kubectl at it; ARGS go to the server
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

# Alive and not a zombie (nobody may reap an orphan here).
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

case $cmd in
start)
  port=${3:-0}
  shift $(($# < 3 ? $# : 3))
  python=${KUBE_FAKE_PYTHON:-$here/../../target/venv/bin/python}
  if ! "$python" -c 'import aiohttp, jsonpatch, yaml' 2>/dev/null; then
    echo "the fake API server needs aiohttp, jsonpatch and PyYAML in $python: run \`cargo xtask test\`" >&2
    exit 1
  fi
  mkdir -p "$dir"
  rm -f "$dir/port"
  setsid "$python" "$here/kube-apiserver.py" "$port" --state-dir "$dir" "$@" \
    </dev/null >/dev/null 2>"$dir/server.err" &
  pid=$!
  for _ in $(seq 1 200); do
    if [ -s "$dir/port" ]; then
      url=http://127.0.0.1:$(cat "$dir/port")
      if curl -fsS -o /dev/null "$url/version" 2>/dev/null; then
        echo "$url"
        exit 0
      fi
    fi
    if ! running "$pid"; then
      echo "the fake API server exited at start:" >&2
      cat "$dir/server.err" >&2
      exit 1
    fi
    sleep 0.05
  done
  echo "the fake API server did not answer within 10 s" >&2
  kill -KILL "$pid" 2>/dev/null || true
  exit 1
  ;;
stop)
  [ -f "$pidfile" ] || exit 0
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    running "$pid" || { rm -f "$pidfile" "$dir/port"; exit 0; }
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.1
  rm -f "$pidfile" "$dir/port"
  if running "$pid"; then
    echo "the fake API server (PID $pid) did not stop" >&2
    exit 1
  fi
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
