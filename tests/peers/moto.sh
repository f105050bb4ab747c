#!/usr/bin/env bash
# moto_server (an EC2 emulator, PyPI moto[server]) behind the project's proxy
# (tests/peers/aws-proxy.py: request log and fault switches), both on loopback.
#   moto.sh start DIR [PORT]
#                 start moto_server on a free port (PID in DIR/moto.pid, its URL in
#                 DIR/moto-url), warm it with one EC2 call (the first takes 1.5-2 s), then
#                 the proxy on PORT (0 or absent: a free port; PID in DIR/aws-proxy.pid);
#                 prints the proxy's URL, which is what Tend's AWS backend is pointed at.
#   moto.sh stop DIR
#                 SIGTERM the proxy and moto by their PIDs, SIGKILL after 5 s; fails if
#                 either is still running.
# Their stderr: DIR/moto.err, DIR/aws-proxy.err. Needs target/venv with moto[server] and
# aiohttp (`cargo xtask test` installs them), or AWS_PEER_PYTHON naming a python that has
# them. Seed state with tests/peers/aws-seed.py (boto3). The Rust harness (AwsPeer in
# tests/src/peers/aws.rs) starts both itself, as its children.
set -euo pipefail
usage="usage: moto.sh start DIR [PORT] | stop DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
here=$(cd "$(dirname "$0")" && pwd)

# shellcheck source=lib.sh
source "$here/lib.sh"

case $cmd in
start)
  port=${3:-0}
  venv=$here/../../target/venv/bin
  python=${AWS_PEER_PYTHON:-$venv/python}
  moto_server=$(dirname "$python")/moto_server
  if ! "$python" -c 'import aiohttp, moto.server, boto3' 2>/dev/null || [ ! -x "$moto_server" ]; then
    echo "the AWS peer needs moto[server] and aiohttp in $python: run \`cargo xtask test\`" >&2
    exit 1
  fi
  mkdir -p "$dir"
  rm -f "$dir/port"
  moto_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  moto_url=http://127.0.0.1:$moto_port
  setsid "$moto_server" -H 127.0.0.1 -p "$moto_port" </dev/null >/dev/null 2>"$dir/moto.err" &
  echo $! >"$dir/moto.pid"
  echo "$moto_url" >"$dir/moto-url"
  # The first EC2 call loads moto's EC2 backend (1.5-2 s): make it now, not in a test.
  warm="curl -fsS -o /dev/null -X POST -d 'Action=DescribeInstances&Version=2016-11-15' \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0' \
    $moto_url/ 2>/dev/null"
  wait_for "$(cat "$dir/moto.pid")" "$warm" moto "$dir/moto.err" || exit 1
  setsid "$python" "$here/aws-proxy.py" "$port" "$moto_url" --state-dir "$dir" \
    </dev/null >/dev/null 2>"$dir/aws-proxy.err" &
  proxy_pid=$!
  wait_for "$proxy_pid" '[ -s "$dir/port" ] && curl -fsS -o /dev/null "http://127.0.0.1:$(cat "$dir/port")/proxy/faults" 2>/dev/null' \
    aws-proxy "$dir/aws-proxy.err" || exit 1
  echo "http://127.0.0.1:$(cat "$dir/port")"
  ;;
stop)
  failed=0
  stop_pidfile "$dir/aws-proxy.pid" || failed=1
  stop_pidfile "$dir/moto.pid" || failed=1
  rm -f "$dir/port" "$dir/moto-url"
  exit $failed
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
