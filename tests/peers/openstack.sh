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

# shellcheck source=lib.sh
source "$here/lib.sh"

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
  probe='[ -s "$dir/port" ] && curl -fsS -o /dev/null "http://127.0.0.1:$(cat "$dir/port")/identity/v3" 2>/dev/null'
  wait_for "$pid" "$probe" "the OpenStack fake" "$dir/server.err" || exit 1
  echo "http://127.0.0.1:$(cat "$dir/port")"
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
