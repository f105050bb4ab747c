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
  start_python_peer "the OpenStack fake" "$python" "aiohttp" openstack-fake.py /identity/v3 "$dir" "$port" "$@"
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
