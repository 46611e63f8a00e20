#!/usr/bin/env bash
# The ringwal-raft kill test (raft/tests/raft/kill.rs) in a loop: three
# ringwal-kv node processes, SIGKILL of leaders then followers, and after
# every restart a check that each node holds every acknowledged write
# exactly once.
#
#   scripts/raft-kill-loop.sh [RUNS]
#
# RUNS (default 10) runs of the test; RINGWAL_RAFT_KILLS kills per run
# (default 100 here; the test alone defaults to 10). PROFILE=release runs
# the optimized build. Stops at the first failing run; each run's output
# goes to $OUT (default target/raft-kill-loop/<UTC time>)/run-N.log.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-10}
export RINGWAL_RAFT_KILLS=${RINGWAL_RAFT_KILLS:-100}
out=${OUT:-target/raft-kill-loop/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"
profile=()
[[ ${PROFILE:-} == release ]] && profile=(--release)

# Build once: the test and the node binary it runs (cargo builds the
# binary for the test).
cargo test "${profile[@]}" -p ringwal-raft --test raft --no-run

total_kills=0
total_acked=0
for ((i = 1; i <= runs; i++)); do
    log="$out/run-$i.log"
    start=$(date +%s)
    if ! cargo test "${profile[@]}" -p ringwal-raft --test raft -- kill:: --nocapture >"$log" 2>&1; then
        echo "run $i/$runs FAILED after $(($(date +%s) - start)) s; see $log" >&2
        grep -E "panicked|lost|applied twice|misplaced" "$log" | head -20 >&2 || true
        exit 1
    fi
    figures=$(grep -E '^kills: ' "$log" | tail -1)
    kills=$(sed -E 's/^kills: ([0-9]+).*/\1/' <<<"$figures")
    acked=$(sed -E 's/.*acknowledged: ([0-9]+).*/\1/' <<<"$figures")
    total_kills=$((total_kills + kills))
    total_acked=$((total_acked + acked))
    echo "run $i/$runs ok in $(($(date +%s) - start)) s: $figures"
done
echo "all $runs runs passed: $total_kills kills, $total_acked acknowledged writes, 0 lost"
