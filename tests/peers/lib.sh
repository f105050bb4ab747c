# Shared by the peer scripts (kube-apiserver.sh, openstack.sh, moto.sh):
# sourced, not run. Every peer is started with setsid and stopped by its PID.

# Alive and not a zombie (nobody may reap an orphan here).
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# Stop the process whose PID is in file $1: SIGTERM, SIGKILL after 5 s; fails
# if it still runs.
stop_pidfile() {
  local pidfile=$1 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    running "$pid" || { rm -f "$pidfile"; return 0; }
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.1
  rm -f "$pidfile"
  if running "$pid"; then
    echo "$(basename "$pidfile" .pid) (PID $pid) did not stop" >&2
    return 1
  fi
}

# Wait (at most 20 s) until the shell command $2 succeeds while the process $1
# lives. $3 names it in messages; $4 is its stderr, shown when it exits early.
wait_for() {
  local pid=$1 check=$2 what=$3 err=$4
  for _ in $(seq 1 400); do
    if eval "$check"; then return 0; fi
    if ! running "$pid"; then
      echo "$what exited at start:" >&2
      cat "$err" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "$what did not answer within 20 s" >&2
  kill -KILL "$pid" 2>/dev/null || true
  return 1
}
