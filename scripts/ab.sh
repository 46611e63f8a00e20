#!/usr/bin/env bash
# Two builds of ringwal side by side: alternating rounds of `ringwal bench`
# per case, medians of records/s and p99, and the ratio new/old. For a
# change that must not slow the write path (the shared machine is noisy:
# only ratios measured in one run mean anything).
#
#   scripts/ab.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECS]
#
# Cases: 1 KiB x 16 and 1 MiB x 4 producers, durable (CASES overrides,
# as "size:producers" pairs). EXTRA holds more `ringwal bench` arguments
# for both builds (say "--level accepted --key-file K").
set -euo pipefail
old=${1:?old ringwal binary}
new=${2:?new ringwal binary}
rounds=${3:-5}
secs=${4:-3}
cases=${CASES:-"1024:16 1048576:4"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for case in $cases; do
    size=${case%%:*}
    producers=${case##*:}
    for r in $(seq 1 "$rounds"); do
        for which in old new; do
            bin=$old
            [ "$which" = new ] && bin=$new
            "$bin" bench -q --secs "$secs" --size "$size" --producers "$producers" \
                ${EXTRA:-} --json "$out/$size-$producers-$which-$r.json" >/dev/null
        done
    done
done
python3 - "$out" "$cases" <<'PY'
import json, statistics, sys, glob, os
out, cases = sys.argv[1], sys.argv[2].split()
print(f"{'case':>16} {'old rec/s':>10} {'new rec/s':>10} {'ratio':>6} {'old p99':>9} {'new p99':>9}")
for case in cases:
    size, producers = case.split(":")
    med = {}
    for which in ("old", "new"):
        runs = [json.load(open(f)) for f in glob.glob(os.path.join(out, f"{size}-{producers}-{which}-*.json"))]
        med[which] = (statistics.median(r["records_per_s"] for r in runs),
                      statistics.median(r["p99_us"] for r in runs))
    (o, op), (n, np_) = med["old"], med["new"]
    print(f"{size + ' B x ' + producers:>16} {o:>10.0f} {n:>10.0f} {n / o:>6.2f} {op:>7.0f}us {np_:>7.0f}us")
PY
