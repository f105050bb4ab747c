#!/usr/bin/env bash
# A real Prometheus (2.x, Debian package prometheus) on loopback, scraping and
# evaluating rules every second.
#   prometheus.sh start DIR PORT RULES TARGET...
#                     start it, PID in DIR/prometheus.pid; returns once /-/ready answers 200.
#                     Each TARGET is HOST:PORT=NODE: scraped as job "tend-metrics" (the
#                     ServiceMonitor's job: the Service's name) with the label node=NODE (the
#                     ServiceMonitor's relabeling); RULES is a rule file it evaluates.
#   prometheus.sh stop DIR   stop the Prometheus whose PID is in DIR/prometheus.pid
# Its log: DIR/prometheus.log. Needs: prometheus, curl (.ci/run installs them).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
usage="usage: prometheus.sh start DIR PORT RULES TARGET... | stop DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
pidfile=$dir/prometheus.pid

case $cmd in
start)
  port=${3:?$usage}
  rules=${4:?$usage}
  shift 4
  command -v prometheus >/dev/null || { echo "prometheus is not installed: apt-get install prometheus" >&2; exit 1; }
  mkdir -p "$dir/data"
  {
    printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n'
    printf 'rule_files:\n  - %s\n' "$rules"
    printf 'scrape_configs:\n  - job_name: tend-metrics\n    static_configs:\n'
    for target in "$@"; do
      printf '      - targets: ["%s"]\n        labels: {node: "%s"}\n' "${target%%=*}" "${target#*=}"
    done
  } >"$dir/prometheus.yml"
  setsid prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$port" >"$dir/prometheus.log" 2>&1 &
  echo $! >"$pidfile"
  wait_for "$(cat "$pidfile")" "curl -fsS -o /dev/null http://127.0.0.1:$port/-/ready 2>/dev/null" \
    prometheus "$dir/prometheus.log"
  ;;
stop)
  stop_pidfile "$pidfile"
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
