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

# start_python_peer WHAT PYTHON IMPORTS SCRIPT PROBE DIR PORT [ARGS...]:
# start the peer SCRIPT (beside these scripts) with PYTHON, which must import
# IMPORTS (a Python import list), as `SCRIPT PORT --state-dir DIR ARGS...`;
# it writes DIR/port and its PID file. Print its URL once GET URL+PROBE
# answers. WHAT names it in messages; its stderr is DIR/server.err.
start_python_peer() {
  local what=$1 python=$2 imports=$3 script=$4 probe=$5 dir=$6 port=$7
  shift 7
  if ! "$python" -c "import $imports" 2>/dev/null; then
    echo "$what needs $imports in $python: run \`cargo xtask test\`" >&2
    return 1
  fi
  mkdir -p "$dir"
  rm -f "$dir/port"
  setsid "$python" "$(dirname "${BASH_SOURCE[0]}")/$script" "$port" --state-dir "$dir" "$@" \
    </dev/null >/dev/null 2>"$dir/server.err" &
  local pid=$! check
  check="[ -s '$dir/port' ] && curl -fsS -o /dev/null \"http://127.0.0.1:\$(cat '$dir/port')$probe\" 2>/dev/null"
  wait_for "$pid" "$check" "$what" "$dir/server.err" || return 1
  echo "http://127.0.0.1:$(cat "$dir/port")"
}
