#!/usr/bin/env bash
# The OpenStack fake (tests/peers/openstack-fake.py: Keystone v3, Nova, Neutron) on loopback.
#   openstack.sh start DIR [PORT [ARGS...]]
#                     start it (PORT 0 or absent: a free port), PID in DIR/openstack-fake.pid;
#                     prints its URL (http://127.0.0.1:PORT) once GET /identity/v3 answers.
#                     ARGS go to the fake (--token-ttl SECONDS, --max-limit N).
#                     The fake writes DIR/clouds.yaml with two clouds for the `openstack`
#                     CLI and openstacksdk (OS_CLIENT_CONFIG_FILE=DIR/clouds.yaml):
#                       tend-fake      password auth: user tend / tend-secret, project
#                                      cluster, domain Default, region RegionOne
#                       tend-fake-app  application credential tend-app / app-secret
#   openstack.sh stop DIR
#                     SIGTERM the fake whose PID is in DIR/openstack-fake.pid, SIGKILL after
#                     5 s; fails if it is still running.
# Its stderr: DIR/server.err. Needs target/venv with aiohttp (`cargo xtask test` installs
# it), or OPENSTACK_FAKE_PYTHON naming a python that has it. The Rust harness
# (OpenStackFake in tests/src/peers/openstack.rs) starts the fake itself, as its child.
set -euo pipefail
usage="usage: openstack.sh start DIR [PORT [ARGS...]] | stop DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
here=$(cd "$(dirname "$0")" && pwd)
pidfile=$dir/openstack-fake.pid

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
  python=${OPENSTACK_FAKE_PYTHON:-$here/../../target/venv/bin/python}
  if ! "$python" -c 'import aiohttp' 2>/dev/null; then
    echo "the OpenStack fake needs aiohttp in $python: run \`cargo xtask test\`" >&2
    exit 1
  fi
  mkdir -p "$dir"
  rm -f "$dir/port"
  setsid "$python" "$here/openstack-fake.py" "$port" --state-dir "$dir" "$@" \
    </dev/null >/dev/null 2>"$dir/server.err" &
  pid=$!
  for _ in $(seq 1 200); do
    if [ -s "$dir/port" ]; then
      url=http://127.0.0.1:$(cat "$dir/port")
      if curl -fsS -o /dev/null "$url/identity/v3" 2>/dev/null; then
        echo "$url"
        exit 0
      fi
    fi
    if ! running "$pid"; then
      echo "the OpenStack fake exited at start:" >&2
      cat "$dir/server.err" >&2
      exit 1
    fi
    sleep 0.05
  done
  echo "the OpenStack fake did not answer within 10 s" >&2
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
    echo "the OpenStack fake (PID $pid) did not stop" >&2
    exit 1
  fi
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
