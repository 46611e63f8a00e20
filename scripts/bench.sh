#!/usr/bin/env bash
# The standard benchmark matrix of issue 4, in one run on one disk:
# durable 1 KiB records in a closed loop at 1, 4, 16 and 64 producers,
# 1 MiB records at 4 producers, the open-loop rate sweep (p99 < 1 ms),
# and recovery of a 1 GiB log. ringwal (both backends), okaywal,
# raft-engine, walrus, a hand-written group commit, tokio-uring and the
# device floor, each in a fresh directory, runs interleaved.
#
#   scripts/bench.sh [OUT_DIR] [-- extra harness flags]
#
# OUT_DIR (default benches/results/<UTC time>) receives table.txt,
# results.json and chart.svg; benches/results/latest points at it.
# Flags after `--` go to the harness, e.g. `-- --dir /mnt/nvme --sla-ms 5`
# (see `"$harness" --help`). About 15 minutes on a
# 2-CPU VM. Run as root so the recovery test can drop the page cache.
set -euo pipefail
cd "$(dirname "$0")/.."

out="benches/results/$(date -u +%Y%m%d-%H%M%S)"
if [[ $# -gt 0 && $1 != "--" ]]; then
    out=$1
    shift
fi
[[ ${1:-} == "--" ]] && shift

# raft-engine builds lz4 from C source: it needs a C compiler.
if ! command -v cc >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "bench: installing a C compiler (raft-engine's lz4-sys needs one)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential >/dev/null
    else
        echo "bench: no C compiler (cc); install build-essential or gcc" >&2
        exit 1
    fi
fi

echo "bench: building the harness (release)" >&2
cargo build --release --quiet --manifest-path benches/Cargo.toml
harness=${CARGO_TARGET_DIR:-benches/target}/release/harness

mkdir -p "$out"
if [[ $(id -u) -ne 0 ]]; then
    echo "bench: not root: the recovery test cannot drop the page cache (the report says so)" >&2
fi
# On a shared machine other processes steal the CPUs the systems under test
# need; as root, run the whole harness (every system alike) ahead of them.
prio=()
if [[ $(id -u) -eq 0 ]]; then
    prio=(nice -n -10)
fi
"${prio[@]}" "$harness" --out "$out" "$@"
mkdir -p benches/results
ln -sfn "$(cd "$out" && pwd)" benches/results/latest
echo "bench: results in $out" >&2
