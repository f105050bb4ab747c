#!/usr/bin/env bash
# A real containerd (Debian's containerd 1.6, its built-in CRI plugin, runc) on a private
# socket, with a real OCI registry (distribution 2.8) to pull from and a stalling proxy in
# front of that registry to make pulls hang. No registry outside the machine is needed:
# the images are built here (mkimage.py) and imported or pushed.
#   containerd.sh start DIR REGISTRY_PORT STALL_PORT
#        start everything under DIR; prints the CRI endpoint, unix://DIR/containerd.sock,
#        and returns once the CRI answers, the images are imported and the registry holds
#        its images. The registry listens on 127.0.0.1:REGISTRY_PORT, the stalling proxy
#        (MODE=stall: blobs of 10 kB or more never finish) on 127.0.0.1:STALL_PORT.
#   containerd.sh stop DIR
#        removes every pod sandbox over CRI (gRPC with curl: no CRI client needed), kills
#        this containerd's shims and what they run, the proxy, the registry and
#        containerd by PID, unmounts everything under DIR, removes the dead shim sockets
#        of this peer's shims, the peer's cgroups and the hosts.toml start wrote; fails
#        if any of its processes, mounts or cgroups remain.
# Environment (start):
#   IMAGE_CACHE  where to keep the built image archives across peers (default: none,
#              built in DIR/images at every start, which costs about 1.5 s)
#   CERTS_DIR  the CRI's registry.config_path (default DIR/certs.d). The script writes
#              hosts.toml only for its own plain-http registries (127.0.0.1:REGISTRY_PORT,
#              127.0.0.1:STALL_PORT), never for docker.io: that is for the test (mirror-gate).
#              stop removes those two again.
# What the peer holds:
#   imported: localhost/tend/pause:v1 (the sandbox image: a static pause built with gcc),
#             localhost/tend/busybox:v1 (static busybox, entrypoint /bin/sh)
#   registry: exp/big:v1 (busybox plus a 4 MB incompressible layer; pulls of it through
#             STALL_PORT hang, as long as its blobs are not already in containerd's store)
#             library/pause:3.9 (a small image for docker.io-style pulls through a mirror)
# In DIR: containerd.sock, config.toml, containerd.log, registry.log (its access log shows
# every request, with containerd's ?ns=docker.io), proxy.log, *.pid, cgroup-parent (the
# cgroup parent a sandbox must name: /NAME, so the peer can remove its cgroups),
# root/ state/ runc/ (containerd's and runc's state).
# Several peers can run at once with distinct DIRs and ports. Outside DIR: containerd 1.6
# hard-codes its shims' sockets in /run/containerd/s (stop removes this peer's), and pod
# cgroups go to /sys/fs/cgroup[/*]/tend-cri-<hash of DIR> (stop removes them).
# Only hostNetwork sandboxes: no CNI network is configured (they need an empty hostname).
# Needs root and: containerd runc (containerd, runc), ctr (containerd), skopeo,
# docker-registry, curl (with HTTP/2), gcc, /bin/busybox static (busybox-static), python3;
# cargo xtask and .ci/run install them. Adapted from the shared recipe containerd-cri.sh.
set -euo pipefail
usage="usage: containerd.sh start DIR REGISTRY_PORT STALL_PORT | stop DIR"
cmd=${1:?$usage}
[ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$2"
dir=$(realpath "$2")
self=$(realpath "$0")
here=$(dirname "$self")
sock=$dir/containerd.sock
namespace=k8s.io
pause_image=localhost/tend/pause:v1
busybox_image=localhost/tend/busybox:v1
# One cgroup parent per peer, named after DIR (a cgroup name cannot hold DIR itself).
cgroup_parent=tend-cri-$(printf %s "$dir" | sha256sum | cut -c1-16)

# Debian's python3 (stdlib only) before any other on PATH: a pyenv shim costs 0.3 s a start.
python=$(command -v /usr/bin/python3 || command -v python3 || true)

now() { echo "${EPOCHREALTIME/[.,]/}"; } # microseconds

# Whether PID is alive and one of the peer's: its command line names DIR (containerd, the
# shims, the registry, the proxy) or it lives in the peer's cgroups (what the shims run).
ours() {
  local pid=$1 arg line
  local -a args
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  mapfile -d '' args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  for arg in "${args[@]}"; do
    case $arg in "$dir" | *"$dir/"*) return 0 ;; esac
  done
  while IFS= read -r line; do
    case ${line#*:*:} in "/$cgroup_parent" | "/$cgroup_parent/"*) return 0 ;; esac
  done 2>/dev/null <"/proc/$pid/cgroup"
  return 1
}

# PIDs of the peer's processes, except `containerd.sh start|stop` themselves.
leftovers() {
  local p pid i
  local -a args
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    ours "$pid" || continue
    mapfile -d '' args <"$p/cmdline" 2>/dev/null || continue
    [ ${#args[@]} -gt 0 ] || continue # a zombie
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
      case "${args[i]##*/} ${args[i + 1]}" in "containerd.sh start" | "containerd.sh stop") continue 2 ;; esac
    done
    echo "$pid"
  done
}

# PIDs of this containerd's shims: `-address DIR/containerd.sock` on their command line.
shims() {
  local p i
  local -a args
  for p in /proc/[0-9]*; do
    mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
    case ${args[0]:-} in *containerd-shim*) ;; *) continue ;; esac
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
      if [ "${args[i]}" = -address ] && [ "${args[i + 1]}" = "$sock" ]; then
        echo "${p#/proc/}"
        break
      fi
    done
  done
}

# PID and all its descendants, children first.
descendants() {
  local child
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do descendants "$child"; done
  echo "$1"
}

# Paths of the unix sockets PID listens on (for a shim: its socket in /run/containerd/s).
listening_sockets() {
  local fd inodes=" "
  for fd in /proc/"$1"/fd/*; do
    fd=$(readlink "$fd" 2>/dev/null) || continue
    case $fd in socket:\[*\]) inodes+="${fd:8:-1} " ;; esac
  done
  # /proc/net/unix: Num RefCount Protocol Flags Type St Inode Path; St 01 = listening.
  awk -v inodes="$inodes" 'NR > 1 && $6 == "01" && index(inodes, " " $7 " ") && $8 ~ /^\// { print $8 }' \
    "/proc/$1/net/unix" 2>/dev/null || true
}

# Wait until PID is gone (or is no longer ours); false after SECONDS.
wait_gone() { # PID SECONDS
  local deadline=$(($(now) + $2 * 1000000))
  while ours "$1"; do
    (($(now) < deadline)) || return 1
    sleep 0.02
  done
}

# SIGTERM, then SIGKILL after 5 s: the process whose PID is in DIR/NAME.pid, if still ours.
stop_pidfile() { # NAME
  local pid
  pid=$(cat "$dir/$1.pid" 2>/dev/null || true)
  if ours "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 5; then
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 5 || true
    fi
  fi
  rm -f "$dir/$1.pid"
}

# CRI calls without a CRI client: gRPC is HTTP/2 (curl, with prior knowledge, on the
# unix socket) carrying length-prefixed protobuf messages, and the few messages needed
# here are strings and messages of strings, written by hand (as hex).
hex_of() { printf %s "$1" | od -An -v -tx1 | tr -d ' \n'; }
pb_string() { # FIELD STRING: a length-delimited field; STRING shorter than 128 bytes
  local h
  h=$(hex_of "$2")
  printf '%02x%02x%s' $((($1 << 3) | 2)) $((${#h} / 2)) "$h"
}
pb_message() { # FIELD HEX: an embedded message, shorter than 128 bytes
  printf '%02x%02x%s' $((($1 << 3) | 2)) $((${#2} / 2)) "$2"
}
# A unary call: SERVICE/METHOD (e.g. runtime.v1.RuntimeService/Version), the request
# as hex; the response (its gRPC frame) goes to OUT. True when grpc-status is 0.
cri() { # SERVICE/METHOD HEX [OUT]
  local frame headers
  frame=$(printf '00%08x%s' $((${#2} / 2)) "$2") # not compressed, 4-byte length, message
  headers=$(printf "$(sed 's/../\\x&/g' <<<"$frame")" |
    curl -sS --max-time "${CRI_TIMEOUT:-30}" --http2-prior-knowledge --unix-socket "$sock" \
      -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @- -D - -o "${3:-/dev/null}" \
      "http://localhost/$1" 2>/dev/null) || return 1
  grep -qi '^grpc-status: *0' <<<"$headers"
}
# Whether the CRI knows IMAGE (ImageStatus answers with an image, not an empty message).
cri_has_image() { # IMAGE
  local out=$dir/.image-status
  cri runtime.v1.ImageService/ImageStatus "$(pb_message 1 "$(pb_string 1 "$1")")" "$out" &&
    [ "$(stat -c %s "$out")" -gt 5 ]
}

# The peer's mount points under DIR, deepest first.
mounts_under_dir() {
  awk '{ print $5 }' /proc/self/mountinfo | while IFS= read -r m; do
    m=$(printf '%b' "${m//\\/\\0}") # mountinfo escapes space, tab, newline, backslash in octal
    case $m in "$dir" | "$dir/"*) echo "$m" ;; esac
  done | sort -r
}

# The cgroup v1 and v2 hierarchies' copies of the peer's cgroup parent.
peer_cgroups() {
  local g
  for g in /sys/fs/cgroup/"$cgroup_parent" /sys/fs/cgroup/*/"$cgroup_parent"; do
    [ -d "$g" ] && echo "$g"
  done
  return 0
}

need() {
  local c
  for c in containerd:containerd containerd-shim-runc-v2:containerd ctr:containerd runc:runc \
    skopeo:skopeo docker-registry:docker-registry curl:curl gcc:gcc; do
    command -v "${c%%:*}" >/dev/null ||
      { echo "${c%%:*} is not installed: apt-get install ${c#*:}" >&2; exit 1; }
  done
  if ! [ -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
    echo "a static /bin/busybox is needed for the busybox image: apt-get install busybox-static" >&2
    exit 1
  fi
  [ -n "$python" ] || { echo "python3 is not installed: apt-get install python3" >&2; exit 1; }
  curl -V | grep -q HTTP2 || { echo "curl has no HTTP/2 support" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "the containerd peer needs root (runc, mounts, cgroups)" >&2; exit 1; }
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# hosts.toml for a plain-http registry on loopback.
hosts_toml() { # CERTS_DIR PORT
  mkdir -p "$1/127.0.0.1:$2"
  printf '%s\n' "server = \"http://127.0.0.1:$2\"" "[host.\"http://127.0.0.1:$2\"]" \
    '  capabilities = ["pull", "resolve"]' >"$1/127.0.0.1:$2/hosts.toml"
}

write_config() { # CERTS_DIR REGISTRY_PORT
  mkdir -p "$dir"/{root,state,runc,opt,registry}
  cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
# Not needed by the CRI, noisy or host-wide: off.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # This VM lacks CAP_SYS_RESOURCE: runc cannot set oom_score_adj=-998 for the sandbox.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$1"
TOML
  # Not Debian's default registry config: that one requires htpasswd auth. Its access log
  # (stdout) shows every request.
  cat >"$dir/registry.yml" <<YML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$2
YML
}

build_images() { # INTO
  local d=$1
  mkdir -p "$d"
  cat >"$d/pause.c" <<'C'
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
static void down(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction a = {0};
  a.sa_handler = down; sigaction(SIGINT, &a, 0); sigaction(SIGTERM, &a, 0);
  a.sa_handler = reap; a.sa_flags = SA_NOCLDSTOP; sigaction(SIGCHLD, &a, 0);
  for (;;) pause();
}
C
  echo "pulled from the peer's registry as docker.io/library/pause:3.9" >"$d/docker-io.txt"
  head -c 4000000 /dev/urandom >"$d/random.bin" # incompressible: a pull moves 4 MB
  local -a jobs=()
  "$python" "$here/mkimage.py" "$d/busybox.tar" "$busybox_image" '["/bin/sh"]' \
    /bin/busybox:/bin/busybox /bin/busybox:/bin/sh >/dev/null &
  jobs+=($!)
  "$python" "$here/mkimage.py" "$d/big.tar" localhost/exp/big:v1 '["/bin/sh"]' \
    /bin/busybox:/bin/busybox /bin/busybox:/bin/sh "$d/random.bin:/data/random.bin:0644" >/dev/null &
  jobs+=($!)
  gcc -Os -static -s -o "$d/pause" "$d/pause.c"
  "$python" "$here/mkimage.py" "$d/pause.tar" "$pause_image" '["/pause"]' "$d/pause:/pause" >/dev/null
  "$python" "$here/mkimage.py" "$d/library-pause.tar" docker.io/library/pause:3.9 '["/pause"]' \
    "$d/pause:/pause" "$d/docker-io.txt:/etc/tend-peer:0644" >/dev/null
  for job in "${jobs[@]}"; do wait "$job"; done
  rm -f "$d/random.bin" "$d/pause" "$d/pause.c" "$d/docker-io.txt"
}

# The directory of the image archives: IMAGE_CACHE/<key>, built there once (atomically:
# peers may start in parallel), when IMAGE_CACHE is set; else DIR/images.
images_dir() {
  if [ -z "${IMAGE_CACHE:-}" ]; then
    build_images "$dir/images"
    echo "$dir/images"
    return
  fi
  local key tmp
  key=$({ declare -f build_images; cat "$here/mkimage.py"; sha256sum /bin/busybox; } | sha256sum | cut -c1-16)
  if ! [ -f "$IMAGE_CACHE/$key/done" ]; then
    mkdir -p "$IMAGE_CACHE"
    tmp=$(mktemp -d "$IMAGE_CACHE/.build.XXXXXX")
    build_images "$tmp"
    touch "$tmp/done"
    mv -T "$tmp" "$IMAGE_CACHE/$key" 2>/dev/null || rm -rf "$tmp" # another peer was faster
  fi
  echo "$IMAGE_CACHE/$key"
}

case $cmd in
start)
  [ $# -eq 4 ] || { echo "$usage" >&2; exit 2; }
  registry_port=$3 stall_port=$4
  certs=${CERTS_DIR:-$dir/certs.d}
  mkdir -p "$certs"
  certs=$(realpath "$certs")
  need
  if [ -n "$(leftovers)" ]; then echo "a containerd peer already runs in $dir" >&2; exit 1; fi
  if [ -n "$(mounts_under_dir)" ]; then echo "mounts remain under $dir: run containerd.sh stop first" >&2; exit 1; fi
  for port in "$registry_port" "$stall_port"; do
    port_free "$port" || { echo "port $port on 127.0.0.1 is in use" >&2; exit 1; }
  done
  t0=$(now)
  # On any failure from here: say why, stop what started, exit 1.
  trap 'rc=$?; if [ $rc != 0 ]; then
      for f in containerd registry proxy; do echo "--- $dir/$f.log" >&2; tail -n 30 "$dir/$f.log" >&2 2>/dev/null || true; done
      "$self" stop "$dir" >&2 || true
    fi' EXIT
  rm -rf "$dir"/{root,state,runc,opt,registry,images} "$dir"/*.log "$dir"/*.pid "$sock" "$sock.ttrpc"
  write_config "$certs" "$registry_port"
  hosts_toml "$certs" "$registry_port"
  hosts_toml "$certs" "$stall_port"
  # stop removes them: the caller's directory is left as the caller had it.
  printf '%s\n' "$certs/127.0.0.1:$registry_port" "$certs/127.0.0.1:$stall_port" >"$dir/hosts-written"
  echo "$cgroup_parent" >"$dir/cgroup-parent"
  # Every process in the background has its stdio on files: a caller reading this
  # script's output must not wait for them.
  containerd --config "$dir/config.toml" </dev/null >"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  docker-registry serve "$dir/registry.yml" </dev/null >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/registry.pid"
  MODE=stall "$python" "$here/stallproxy.py" "$stall_port" "http://127.0.0.1:$registry_port" "$dir/proxy.pid" \
    </dev/null >"$dir/proxy.log" 2>&1 &
  echo $! >"$dir/proxy.pid" # the proxy writes the same once it listens
  images=$(images_dir) # while they start
  # Ready: the CRI answers (not merely containerd: the CRI plugin starts after it).
  deadline=$(($(now) + 20000000))
  until CRI_TIMEOUT=2 cri runtime.v1.RuntimeService/Version ""; do
    ours "$(cat "$dir/containerd.pid")" || { echo "containerd exited at start" >&2; exit 1; }
    (($(now) < deadline)) || { echo "the CRI did not answer on $sock within 20 s" >&2; exit 1; }
    sleep 0.02
  done
  for port in "$registry_port" "$stall_port"; do
    deadline=$(($(now) + 10000000))
    until curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/v2/" 2>/dev/null; do
      (($(now) < deadline)) || { echo "nothing answered GET /v2/ on 127.0.0.1:$port within 10 s" >&2; exit 1; }
      sleep 0.02
    done
  done
  # Images: two imported (not pulled), two only in the registry (pulls are real).
  # (One import at a time: concurrent imports contend for the same ingest ref.)
  { ctr -a "$sock" -n "$namespace" images import "$images/pause.tar" >/dev/null &&
    ctr -a "$sock" -n "$namespace" images import "$images/busybox.tar" >/dev/null; } &
  p1=$!
  skopeo copy -q --dest-tls-verify=false "oci-archive:$images/big.tar" \
    "docker://127.0.0.1:$registry_port/exp/big:v1" &
  p2=$!
  skopeo copy -q --dest-tls-verify=false "oci-archive:$images/library-pause.tar" \
    "docker://127.0.0.1:$registry_port/library/pause:3.9"
  wait $p1
  wait $p2
  # The CRI learns of imported images from containerd's events, a moment later.
  deadline=$(($(now) + 10000000))
  until cri_has_image "$pause_image" && cri_has_image "$busybox_image"; do
    (($(now) < deadline)) || { echo "the CRI does not list the imported images after 10 s" >&2; exit 1; }
    sleep 0.02
  done
  rm -f "$dir/.image-status"
  echo "containerd peer ready in $((($(now) - t0) / 1000)) ms" >"$dir/ready"
  echo "unix://$sock"
  ;;

stop)
  failed=0
  containerd_pid=$(cat "$dir/containerd.pid" 2>/dev/null || true)
  # 1. Politely, over CRI: stop and remove every pod sandbox (and so its containers,
  # its shim, its mounts, its cgroup). A sandbox's id is its pause container's id.
  if ours "$containerd_pid" && [ -S "$sock" ]; then
    for id in $(timeout 10 ctr -a "$sock" -n "$namespace" containers ls -q \
      'labels."io.cri-containerd.kind"==sandbox' 2>/dev/null || true); do
      cri runtime.v1.RuntimeService/StopPodSandbox "$(pb_string 1 "$id")" || echo "containerd peer: StopPodSandbox $id failed" >&2
      cri runtime.v1.RuntimeService/RemovePodSandbox "$(pb_string 1 "$id")" || echo "containerd peer: RemovePodSandbox $id failed" >&2
    done
  fi
  # 2. Whatever is left of this containerd's shims: each shim and what it runs, by PID,
  # noting first the sockets they listen on (in the shared /run/containerd/s).
  shim_sockets=()
  kill_shims() {
    local shim
    local -a victims=()
    for shim in $(shims); do
      mapfile -t -O ${#shim_sockets[@]} shim_sockets < <(listening_sockets "$shim")
      mapfile -t -O ${#victims[@]} victims < <(descendants "$shim")
    done
    [ ${#victims[@]} -gt 0 ] || return 0
    kill -KILL "${victims[@]}" 2>/dev/null || true
    for pid in "${victims[@]}"; do wait_gone "$pid" 5 || true; done
  }
  kill_shims
  # What the shims ran, should a shim have died before them (the sandboxes' cgroups).
  for g in $(peer_cgroups); do
    for pid in $(find "$g" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  # 3. The proxy, the registry, containerd.
  stop_pidfile proxy
  stop_pidfile registry
  stop_pidfile containerd
  kill_shims # a shim containerd started to clean up after a killed one
  # Anything else of the peer's still running (say a proxy whose start failed): by PID.
  for pid in $(leftovers); do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in $(leftovers); do wait_gone "$pid" 5 || true; done
  # 4. Mounts under DIR (sandboxes' /dev/shm, rootfs overlays, netns), deepest first.
  for m in $(mounts_under_dir); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  # 5. Sockets of this peer's dead shims. Only dead ones: nothing accepts on them.
  for s in "${shim_sockets[@]}"; do
    [ -S "$s" ] || continue
    if ! "$python" -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$s" 2>/dev/null; then
      rm -f "$s"
    fi
  done
  # 6. The peer's cgroups, deepest first, once empty.
  for g in $(peer_cgroups); do
    deadline=$(($(now) + 5000000))
    while [ -n "$(find "$g" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && (($(now) < deadline)); do sleep 0.02; done
    find "$g" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # 7. State (not the logs and configs). Nothing is mounted there any more.
  if [ -z "$(mounts_under_dir)" ]; then
    rm -rf --one-file-system "$dir"/{root,state,runc,opt,registry,images}
  fi
  rm -f "$sock" "$sock.ttrpc" "$dir/proxy.pid.tmp"
  # The hosts.toml start wrote in the caller's certs.d (only those).
  while IFS= read -r d; do
    rm -f "$d/hosts.toml"
    rmdir "$d" 2>/dev/null || true
  done 2>/dev/null <"$dir/hosts-written" || true
  rm -f "$dir/hosts-written"
  # Verify.
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "containerd peer: processes left behind:" >&2
    for pid in $left; do echo "  $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" >&2; done
    failed=1
  fi
  left=$(mounts_under_dir)
  if [ -n "$left" ]; then
    echo "containerd peer: mounts left under $dir:" $left >&2
    failed=1
  fi
  left=$(peer_cgroups)
  if [ -n "$left" ]; then
    echo "containerd peer: cgroups not removed:" $left >&2
    failed=1
  fi
  exit $failed
  ;;

*)
  echo "$usage" >&2
  exit 2
  ;;
esac
