#!/usr/bin/env bash
# The sync methods side by side: `dsync` (RWF_DSYNC per write) against
# `grouped` (plain writes, one fdatasync for every write completed since
# the last), on the io_uring and the threaded backends, durable records,
# every combination once per round, rounds alternating; the report gives
# medians per combination.
#
#   scripts/sync-methods.sh [ROUNDS] [SECS]         # 1 KiB x 1 and 64 producers,
#                                                   # 64 KiB x 8, 1 MiB x 4
#   BUSY=2 scripts/sync-methods.sh [ROUNDS] [SECS]  # 1 KiB x 4 producers, 8 MiB
#                                                   # segments, with two busy loops
#                                                   # beside the writer (CPU contention)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
secs="${2:-3}"
busy="${BUSY:-0}"
cargo build --release --quiet -p ringwal-cli
bin=target/release/ringwal
out=$(mktemp -d)
hogs=()
cleanup() {
    for h in "${hogs[@]}"; do kill "$h" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT
segment_mib=64
if [ "$busy" -gt 0 ]; then
    # Small segments, so that rolls are part of the run.
    cases=("1024 4")
    segment_mib=8
    for _ in $(seq 1 "$busy"); do
        sh -c 'while :; do :; done' &
        hogs+=($!)
    done
else
    cases=("1024 1" "1024 64" "65536 8" "1048576 4")
fi
echo "sync-methods: $rounds rounds of $secs s; $busy busy loops; $(date -u '+%F %H:%M UTC'); loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$rounds"); do
    for c in "${cases[@]}"; do
        read -r size producers <<<"$c"
        for be in uring threaded; do
            for sm in dsync grouped; do
                "$bin" bench --secs "$secs" --size "$size" --producers "$producers" \
                    --backend "$be" --sync-method "$sm" --segment-mib "$segment_mib" \
                    --json "$out/$r-$size-$producers-$be-$sm.json" >/dev/null
            done
        done
    done
done
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$out" <<'PY'
import collections, glob, json, os, statistics, sys
runs = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    _, size, producers, be, sm = os.path.basename(f)[:-5].split("-")
    runs[(int(size), int(producers), be, sm)].append(json.load(open(f)))
print("| size B | producers | backend | sync | records/s | MB/s | p50 µs | p99 µs | syncs/s | records/write |")
print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
for k in sorted(runs):
    v = runs[k]
    med = lambda f: statistics.median(x[f] for x in v)
    syncs = statistics.median(x["syncs"] / x["secs"] for x in v)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {med('records_per_s'):,.0f} | {med('mb_per_s'):,.1f} "
          f"| {med('p50_us'):,.0f} | {med('p99_us'):,.0f} | {syncs:,.0f} | {med('records_per_write'):.1f} |")
PY
