#!/usr/bin/env bash
# A real systemd (Debian's systemd 252) as PID 1 of its own pid/mount/uts/ipc/cgroup
# namespaces, with a private D-Bus system bus. It runs on the host's root filesystem (no
# chroot, no network namespace), so its units run host binaries (sh, sleep, curl) as root
# and reach peers on the host's loopback.
#   systemd.sh start DIR   start it; prints its bus address, unix:path=DIR/run/dbus/system_bus_socket,
#                          and returns once org.freedesktop.systemd1 answers on that bus.
#                          Unit files go in DIR/units: the manager's only unit path.
#   systemd.sh stop DIR    Manager.Exit, then SIGKILL of the namespace's PID 1 (the kernel then
#                          kills everything in the namespace); removes its cgroup; fails if any
#                          process whose cgroup or command line references the peer remains.
# Several peers can run at once with distinct DIRs. In DIR: units/, run/ (the manager's
# /run), console.log (the manager's console: its log and the units' output), cgroup (the
# path of the peer's cgroup v2 directory), script.pid, unshare.pid, pid1 (host PIDs).
# Needs: root, a cgroup2 mount (pure v2, or hybrid with /sys/fs/cgroup/unified), systemd
# and busctl (systemd), dbus-daemon (dbus), unshare (util-linux), script (bsdutils); cargo xtask
# installs them. Adapted from the shared recipe systemd-in-namespace.sh (issue 8).
set -euo pipefail
usage="usage: systemd.sh start DIR | stop DIR"
cmd=${1:?$usage}
[ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$2"
dir=$(realpath "$2") # the same path inside and outside: the namespaces share the root fs
self=$(realpath "$0")
bus_socket=$dir/run/dbus/system_bus_socket
address=unix:path=$bus_socket

# The cgroup v2 hierarchy as this process sees it.
cgroup_root() {
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then echo /sys/fs/cgroup
  elif [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then echo /sys/fs/cgroup/unified
  else echo "no cgroup2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified" >&2; exit 1; fi
}
# One cgroup per peer, named after DIR (a cgroup name cannot hold DIR itself): the
# manager's cgroup namespace is rooted there, and stop can find it from DIR alone.
cgroup_name=tend-systemd-$(printf %s "$dir" | sha256sum | cut -c1-16)
cgroup=$(cgroup_root)/$cgroup_name

# Whether PID is alive and still the process we recorded (PIDs are reused): its command
# line names DIR (script, unshare), or it lives in the peer's cgroup (the manager).
ours() {
  local pid=$1 arg line
  local -a args
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  mapfile -d '' args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  for arg in "${args[@]}"; do
    case $arg in "$dir" | *"$dir/"*) return 0 ;; esac
  done
  while IFS= read -r line; do
    case $line in "0::/$cgroup_name" | "0::/$cgroup_name/"*) return 0 ;; esac
  done 2>/dev/null <"/proc/$pid/cgroup"
  return 1
}

# Host PIDs of every process that references the peer, except `systemd.sh start|stop`
# themselves (this script, its subshells, a start that is cleaning up after itself).
leftovers() {
  local p pid i
  local -a args
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    ours "$pid" || continue
    mapfile -d '' args <"$p/cmdline" 2>/dev/null || continue
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
      case "${args[i]##*/} ${args[i + 1]}" in "systemd.sh start" | "systemd.sh stop") continue 2 ;; esac
    done
    echo "$pid"
  done
}

# Wait until PID is gone (or is no longer ours); false after SECONDS. Deadlines are in
# microseconds: ${EPOCHREALTIME/[.,]/}.
wait_gone() { # PID SECONDS
  local deadline=$((${EPOCHREALTIME/[.,]/} + $2 * 1000000))
  while ours "$1"; do
    ((${EPOCHREALTIME/[.,]/} < deadline)) || return 1
    sleep 0.02
  done
}

write_units() {
  # Minimal stand-ins for the standard targets (the host's units are not on the unit
  # path), so units with DefaultDependencies=yes load and start, and Manager.Exit can
  # stop everything and exit (exit.target).
  local d=$dir/units
  mkdir -p "$d"
  unit() {
    local file=$1 description=$2
    shift 2
    printf '%s\n' "[Unit]" "Description=$description" "DefaultDependencies=no" "$@" >"$d/$file"
  }
  unit peer.target "Tend test peer boot target" "Requires=basic.target dbus.socket dbus.service" \
    "After=basic.target dbus.service" "AllowIsolate=yes"
  unit basic.target "Basic System" "Requires=sysinit.target" \
    "Wants=sockets.target timers.target paths.target slices.target" \
    "After=sysinit.target sockets.target timers.target paths.target slices.target"
  unit sysinit.target "System Initialization" "Wants=local-fs.target" "After=local-fs.target"
  unit local-fs.target "Local File Systems"
  unit sockets.target "Sockets"
  unit timers.target "Timers"
  unit paths.target "Paths"
  unit slices.target "Slices" "Wants=-.slice system.slice" "After=-.slice system.slice"
  unit shutdown.target "Shutdown" "RefuseManualStart=yes"
  unit umount.target "Unmount" "RefuseManualStart=yes"
  unit final.target "Final" "RefuseManualStart=yes" "After=shutdown.target umount.target"
  unit exit.target "Exit the Container" "Requires=systemd-exit.service" \
    "After=systemd-exit.service" "AllowIsolate=yes"
  unit systemd-exit.service "Exit the Container" \
    "Requires=shutdown.target umount.target final.target" \
    "After=shutdown.target umount.target final.target" "SuccessAction=exit-force"
  # The system bus, socket-activated as on a real host. Its socket is in the manager's
  # /run, which is DIR/run on the host: that is how host processes reach the manager
  # (systemd's own /run/systemd/private is useless from outside the pid namespace).
  unit dbus.socket "D-Bus System Message Bus Socket" "Before=sockets.target"
  printf '%s\n' "[Socket]" "ListenStream=/run/dbus/system_bus_socket" >>"$d/dbus.socket"
  unit dbus.service "D-Bus System Message Bus" "Requires=dbus.socket" "After=dbus.socket"
  printf '%s\n' "[Service]" "Type=notify" "NotifyAccess=main" \
    "ExecStart=/usr/bin/dbus-daemon --system --address=systemd: --nofork --nopidfile --systemd-activation --nosyslog" \
    >>"$d/dbus.service"
  # The journal: Debian's two units without their sandboxing and without the /dev/log
  # socket (/dev is the host's). The manager adds After=systemd-journald.socket to every
  # unit with StandardOutput=journal; its own log stays on the console (console.log), and
  # so does journald's (SYSTEMD_LOG_TARGET=console: never the host's kmsg).
  # RestrictAddressFamilies=AF_UNIX: systemd 252's journald opens an audit netlink socket
  # and switches the kernel's auditing on (the whole VM's; no Audit= setting before 253);
  # without AF_NETLINK it finds no audit and goes on.
  unit systemd-journald.socket "Journal Socket" "Before=sockets.target"
  printf '%s\n' "[Socket]" "ListenDatagram=/run/systemd/journal/socket" \
    "ListenStream=/run/systemd/journal/stdout" "PassCredentials=yes" "PassSecurity=yes" \
    "ReceiveBuffer=8M" "SocketMode=0666" "Timestamping=us" >>"$d/systemd-journald.socket"
  unit systemd-journald.service "Journal Service" "Requires=systemd-journald.socket" \
    "After=systemd-journald.socket" "Before=sysinit.target"
  printf '%s\n' "[Service]" "Type=notify" "ExecStart=/lib/systemd/systemd-journald" \
    "Sockets=systemd-journald.socket" "FileDescriptorStoreMax=4224" \
    "Environment=SYSTEMD_LOG_TARGET=console" \
    "RestrictAddressFamilies=AF_UNIX" >>"$d/systemd-journald.service"
  printf '%s\n' "Wants=systemd-journald.socket systemd-journald.service" \
    "After=systemd-journald.service" >>"$d/sysinit.target"
}

# journald's settings, in the manager's /run (the host's /etc stays untouched).
# Storage=volatile: the namespace shares the host's /var, where /var/log/journal may
# exist, so anything but volatile could write the host's journal; volatile keeps the
# files in the manager's /run/log/journal, DIR/run/log/journal on the host. Nothing is
# read from or written to the host's kernel log, console or terminals. Explicit sizes:
# the defaults keep 15% of the disk free (up to 4G) and would delete a flood's entries
# on a nearly full disk. No rate limit by default, so a test's writes all arrive: in
# systemd 252 a unit cannot turn it off (LogRateLimitIntervalSec=0 means "the default"),
# but a unit can turn it on (LogRateLimitIntervalSec=30s, LogRateLimitBurst=N).
write_journald_conf() {
  mkdir -p "$dir/run/systemd/journald.conf.d"
  printf '%s\n' "[Journal]" "Storage=volatile" "ReadKMsg=no" "ForwardToKMsg=no" \
    "ForwardToConsole=no" "ForwardToWall=no" "ForwardToSyslog=no" \
    "RuntimeMaxUse=256M" "RuntimeKeepFree=64M" "RateLimitIntervalSec=0" \
    >"$dir/run/systemd/journald.conf.d/50-tend-peer.conf"
}

case $cmd in
start)
  for c in /lib/systemd/systemd:systemd busctl:systemd dbus-daemon:dbus unshare:util-linux script:util-linux; do
    command -v "${c%%:*}" >/dev/null ||
      { echo "${c%%:*} is not installed: apt-get install ${c#*:}" >&2; exit 1; }
  done
  [ "$(id -u)" = 0 ] || { echo "the systemd peer needs root (namespaces, cgroups)" >&2; exit 1; }
  if [ -n "$(leftovers)" ]; then echo "a systemd peer already runs in $dir" >&2; exit 1; fi
  rm -rf "$dir/run" "$dir/console.log"
  # Manager defaults: /run/systemd/system.conf.d is read at boot and on daemon-reload.
  # No journald runs: units' stdout/stderr go to the console, which is console.log.
  mkdir -p "$dir/run/systemd/system.conf.d" "$dir/empty" "$dir/etc-systemd"
  printf '%s\n' "[Manager]" "LogColor=no" "ShowStatus=no" "DefaultStandardOutput=tty" \
    "DefaultStandardError=inherit" "DefaultTimeoutStopSec=10s" \
    >"$dir/run/systemd/system.conf.d/50-tend-peer.conf"
  write_units
  write_journald_conf
  mkdir -p "$cgroup"
  echo "$cgroup" >"$dir/cgroup"
  home_cgroup=$(cgroup_root)$(sed -n 's/^0:://p' /proc/self/cgroup)
  # script(1) gives the manager a pty as its /dev/console and copies it to console.log.
  # setsid: no controlling terminal or process group shared with the caller. The `ns`
  # stage runs in that pty; its stdio must not hold the caller's pipes open.
  TEND_PEER_SELF=$self TEND_PEER_DIR=$dir setsid script -q -f -e \
    -c 'exec "$TEND_PEER_SELF" ns "$TEND_PEER_DIR"' "$dir/console.log" \
    </dev/null >/dev/null 2>&1 &
  # The new cgroup namespace is rooted at the cgroup of the process that creates it, so
  # the `ns` stage enters the peer's cgroup before unshare. Once unshare has forked the
  # namespace's PID 1, move unshare back out: the manager then finds only itself in its
  # root cgroup (cgroup v2 has no internal processes; init.scope starts clean).
  up=""
  deadline=$((${EPOCHREALTIME/[.,]/} + 5000000))
  while ((${EPOCHREALTIME/[.,]/} < deadline)); do
    up=$(cat "$dir/unshare.pid" 2>/dev/null || true)
    if [ -n "$up" ] && [ "$(readlink "/proc/$up/ns/cgroup" 2>/dev/null)" != "$(readlink /proc/self/ns/cgroup)" ] &&
      [ -n "$(cat "/proc/$up/task/$up/children" 2>/dev/null)" ]; then
      echo "$up" >"$home_cgroup/cgroup.procs"
      break
    fi
    up=""
    sleep 0.01
  done
  if [ -z "$up" ]; then
    echo "the systemd peer's namespaces were not created; $dir/console.log:" >&2
    cat "$dir/console.log" >&2 2>/dev/null || true
    "$self" stop "$dir" || true
    exit 1
  fi
  pid1=$(cat "/proc/$up/task/$up/children")
  pid1=${pid1%% *}
  echo "$pid1" >"$dir/pid1"
  # Ready: the manager answers on the bus and its boot transaction is over (no job of
  # ours is running, so a test's first job is the only one).
  deadline=$((${EPOCHREALTIME/[.,]/} + 10000000))
  while ((${EPOCHREALTIME/[.,]/} < deadline)); do
    state=$(busctl --address="$address" get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 \
      org.freedesktop.systemd1.Manager SystemState 2>/dev/null || true)
    case $state in *'"running"'* | *'"degraded"'*)
      echo "$address"
      exit 0
      ;;
    esac
    ours "$pid1" || break
    sleep 0.02
  done
  echo "systemd did not come up (state: ${state:-no answer on $address}); $dir/console.log:" >&2
  cat "$dir/console.log" >&2 2>/dev/null || true
  "$self" stop "$dir" || true
  exit 1
  ;;

ns) # Internal: in script's pty, as the caller of unshare.
  echo "$PPID" >"$dir/script.pid"
  echo $$ >"$cgroup/cgroup.procs"
  echo $$ >"$dir/unshare.pid"
  # --pid --fork: the manager is PID 1 of its namespace, so killing it kills the
  # namespace; --mount-proc: a /proc showing that namespace. --mount: the mounts below
  # stay private (unshare makes / rprivate). --uts: the manager sets its own hostname.
  # --ipc: no shared SysV IPC with the host. --cgroup: the manager sees the peer's
  # cgroup as its root and runs its units below it. No --net: units reach host loopback.
  exec unshare --fork --pid --mount --uts --ipc --cgroup --mount-proc --propagation private \
    "$self" inner "$dir"
  ;;

inner) # Internal: PID 1 of the new namespaces; becomes systemd.
  mount --bind "$dir/run" /run # the manager's /run is DIR/run on the host
  # Enabling a unit writes links into /etc/systemd/system: the peer's own copy, so a
  # test never leaves links in the host's.
  mount --bind "$dir/etc-systemd" /etc/systemd/system
  # Only the cgroup2 hierarchy, rooted at the peer's cgroup (the host's hybrid v1
  # hierarchies are unmounted here, in this mount namespace only).
  umount -R /sys/fs/cgroup
  # Read-only /sys (this mount only): the manager does not touch host devices and, with
  # `container` set, skips udev-related setup.
  mount -o remount,bind,ro /sys
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
  # Most sysctls are global: make them read-only so the manager cannot change the host's.
  mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
  mount --bind "$(tty)" /dev/console # the manager logs to /dev/console: script's pty
  # Wait until start has moved unshare out of our cgroup (see start).
  deadline=$((${EPOCHREALTIME/[.,]/} + 5000000))
  while ((${EPOCHREALTIME/[.,]/} < deadline)); do
    mapfile -t procs </sys/fs/cgroup/cgroup.procs
    [ "${procs[*]}" = 1 ] && break
    sleep 0.01
  done
  export container=tend-test-peer                      # "we are in a container"
  export SYSTEMD_UNIT_PATH="$dir/units"                # only the peer's units, none of the host's
  export SYSTEMD_GENERATOR_PATH="$dir/empty"           # no generators (fstab, sysv, getty...)
  export SYSTEMD_ENVIRONMENT_GENERATOR_PATH="$dir/empty"
  exec /lib/systemd/systemd --system --unit=peer.target \
    --log-target=console --log-level="${LOG_LEVEL:-info}" </dev/null
  ;;

stop)
  script_pid=$(cat "$dir/script.pid" 2>/dev/null || true)
  unshare_pid=$(cat "$dir/unshare.pid" 2>/dev/null || true)
  pid1=$(cat "$dir/pid1" 2>/dev/null || true)
  if [ -z "$pid1" ] && [ -n "$unshare_pid" ]; then
    pid1=$(cat "/proc/$unshare_pid/task/$unshare_pid/children" 2>/dev/null || true)
    pid1=${pid1%% *}
  fi
  # Gracefully first, like `systemctl exit`: the manager stops its units (ExecStop runs)
  # and exits.
  if ours "$pid1"; then
    timeout 2 busctl --address="$address" call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
      org.freedesktop.systemd1.Manager Exit >/dev/null 2>&1 || true
    wait_gone "$pid1" 5 || true
  fi
  # When PID 1 of a pid namespace dies, the kernel SIGKILLs every process in it.
  if ours "$pid1"; then
    kill -KILL "$pid1" 2>/dev/null || true
    wait_gone "$pid1" 5 || true
  fi
  # Anything still in the peer's cgroup (say unshare, when start failed before moving it
  # out): cgroup.kill SIGKILLs the whole subtree.
  if [ -e "$cgroup/cgroup.kill" ]; then echo 1 >"$cgroup/cgroup.kill" 2>/dev/null || true; fi
  # unshare exits with its child, script with unshare; by PID if they do not.
  for pid in "$unshare_pid" "$script_pid"; do
    if ! wait_gone "$pid" 2; then
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 2 || true
    fi
  done
  # Remove the cgroup, deepest first, once empty.
  if [ -d "$cgroup" ]; then
    deadline=$((${EPOCHREALTIME/[.,]/} + 5000000))
    until grep -q '^populated 0' "$cgroup/cgroup.events" 2>/dev/null || ((${EPOCHREALTIME/[.,]/} > deadline)); do
      sleep 0.02
    done
    find "$cgroup" -depth -type d -exec rmdir {} + 2>/dev/null || true
  fi
  rm -rf "$dir/run" "$dir/script.pid" "$dir/unshare.pid" "$dir/pid1"
  failed=0
  if [ -d "$cgroup" ]; then
    echo "systemd peer: cgroup $cgroup was not removed" >&2
    failed=1
  fi
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "systemd peer: processes left behind:" >&2
    for pid in $left; do echo "  $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" >&2; done
    failed=1
  fi
  exit $failed
  ;;

*)
  echo "$usage" >&2
  exit 2
  ;;
esac
