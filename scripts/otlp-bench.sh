#!/usr/bin/env bash
# The OTLP receiver's benchmark (docs/benchmarks-history.md, "The OTLP receiver"):
# export bodies per second and the p50/p99 of the 200 for ringwal-otlp on
# the log at `written` and at `durable`, against the same receiver writing
# each body straight to a file with an fdatasync per body, with 1 KiB,
# 64 KiB and 1 MiB bodies; medians of the runs, side by side.
#
#   scripts/otlp-bench.sh [DIR] [-- extra `ringwal-otlp bench` flags]
#
# DIR (default target/otlp-bench) holds the runs' scratch directories: a
# real disk, not tmpfs. Prints the command, the date, the machine and its
# load before and after, then the Markdown table. About two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/otlp-bench
if [[ $# -gt 0 && $1 != "--" ]]; then
    dir=$1
    shift
fi
[[ ${1:-} == "--" ]] && shift

cargo build --release -q -p ringwal-otlp
mkdir -p "$dir"
fs=$(df -T "$dir" | awk 'NR == 2 { print $2 " on " $1 }')
cmd=(target/release/ringwal-otlp bench --dir "$dir" "$@")
echo "command: ${cmd[*]}"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs, $(uname -sr), $fs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# Ahead of other work on a shared machine, as scripts/bench.sh runs.
if [[ $(id -u) -eq 0 ]]; then
    nice -n -10 "${cmd[@]}"
else
    "${cmd[@]}"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
