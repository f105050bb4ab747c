#!/usr/bin/env bash
# A real OCI registry (distribution 2.8, Debian package docker-registry) on loopback.
#   registry.sh start DIR PORT [REMOTEURL]
#                                start it, PID in DIR/registry.pid; returns once GET /v2/ answers 200.
#                                With REMOTEURL (say http://127.0.0.1:5000): a pull-through cache
#                                of that registry (distribution's proxy mode; read-only)
#   registry.sh stop DIR         stop the registry whose PID is in DIR/registry.pid
# Its access log (every request, with its query string) and warnings: DIR/registry.log.
# Needs: docker-registry, curl (cargo xtask installs them).
set -euo pipefail
cmd=${1:?usage: registry.sh start DIR PORT [REMOTEURL] | stop DIR}
dir=${2:?usage: registry.sh start DIR PORT [REMOTEURL] | stop DIR}
pidfile=$dir/registry.pid

case $cmd in
start)
  port=${3:?usage: registry.sh start DIR PORT [REMOTEURL]}
  remoteurl=${4:-}
  command -v docker-registry >/dev/null || { echo "docker-registry is not installed: apt-get install docker-registry" >&2; exit 1; }
  mkdir -p "$dir/data"
  # Not Debian's default config: that one requires htpasswd auth.
  cat > "$dir/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
http:
  addr: 127.0.0.1:$port
CONFIG
  if [ -n "$remoteurl" ]; then
    printf 'proxy:\n  remoteurl: %s\n' "$remoteurl" >>"$dir/config.yml"
  fi
  docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" 2>/dev/null; then exit 0; fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "docker-registry exited at start:" >&2; cat "$dir/registry.log" >&2; exit 1
    fi
    sleep 0.1
  done
  echo "docker-registry did not answer on 127.0.0.1:$port within 10 s" >&2
  exit 1
  ;;
stop)
  [ -f "$pidfile" ] || exit 0
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; exit 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  ;;
*)
  echo "usage: registry.sh start DIR PORT [REMOTEURL] | stop DIR" >&2
  exit 2
  ;;
esac
