#!/usr/bin/env bash
# Acknowledgement tails across segment rolls with the CPUs busy: durable
# 1 KiB records from 4 producers, 8 MiB segments (a roll every few
# thousand records), while two busy-looping processes compete for the
# machine's CPUs (a 2-CPU VM has none to spare). The io_uring and threaded
# backends alternate, ROUNDS times each; the report gives each run's
# records/s, p99, p99.9 and max, and the medians per backend.
#
#   scripts/contention.sh [ROUNDS] [SECS]     # default 3 rounds of 10 s
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
secs="${2:-10}"
cargo build --release --quiet -p ringwal-cli
bin=target/release/ringwal
out=$(mktemp -d)
hogs=()
cleanup() {
    for h in "${hogs[@]}"; do kill "$h" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT
for _ in 1 2; do
    sh -c 'while :; do :; done' &
    hogs+=($!)
done
echo "contention: ${#hogs[@]} busy loops; $rounds rounds of $secs s per backend" >&2
for r in $(seq 1 "$rounds"); do
    for b in uring threaded; do
        "$bin" bench --backend "$b" --producers 4 --size 1024 --secs "$secs" \
            --segment-mib 8 --json "$out/$b-$r.json" >/dev/null
    done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'backend':<9} {'run':>3} {'rec/s':>9} {'p99 us':>8} {'p99.9 us':>9} {'max us':>9} {'rolls':>5}")
for b in ("uring", "threaded"):
    runs = [json.load(open(f"{out}/{b}-{r}.json")) for r in range(1, rounds + 1)]
    for i, j in enumerate(runs, 1):
        print(f"{b:<9} {i:>3} {j['records_per_s']:>9.0f} {j['p99_us']:>8} {j['p999_us']:>9} {j['max_us']:>9} {j['rolls']:>5}")
    med = lambda k: statistics.median(j[k] for j in runs)
    print(f"{b:<9} med {med('records_per_s'):>9.0f} {med('p99_us'):>8.0f} {med('p999_us'):>9.0f} {med('max_us'):>9.0f}")
PY
