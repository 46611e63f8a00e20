#!/usr/bin/env bash
# The cost of encryption and of each codec on durable appends, side by
# side in one run: JSON telemetry records of 1 KiB (16 producers) and
# 64 KiB (8 producers), encryption off and on, codecs none, lz4, zstd;
# ROUNDS rounds with the cases alternating, medians reported.
#
#   scripts/at-rest.sh [ROUNDS] [SECS]      (defaults 3 and 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-3}
cargo build --release -q -p ringwal-cli
bin=target/release/ringwal
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 32 /dev/urandom > "$work/key"
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for size in 1024 65536; do
    producers=$([ "$size" = 1024 ] && echo 16 || echo 8)
    for enc in off on; do
      for codec in none lz4 zstd; do
        key=()
        [ "$enc" = on ] && key=(--key-file "$work/key")
        "$bin" bench --secs "$secs" --size "$size" --producers "$producers" \
          --payload telemetry --compress "$codec" "${key[@]}" \
          --json "$work/r-$size-$enc-$codec-$round.json" > /dev/null
      done
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print("| records | encryption | codec | records/s | MB/s (payload) | p99 µs | stored / payload bytes | vs plain, none |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for size in (1024, 65536):
    base = None
    for enc in ("off", "on"):
        for codec in ("none", "lz4", "zstd"):
            rs = [json.load(open(f"{work}/r-{size}-{enc}-{codec}-{r}.json")) for r in range(1, rounds + 1)]
            rps = statistics.median(r["records_per_s"] for r in rs)
            p99 = statistics.median(r["p99_us"] for r in rs)
            ratio = statistics.median(r["stored_per_payload_byte"] for r in rs)
            base = base or rps
            print(f"| {size // 1024} KiB | {enc} | {codec} | {rps:,.0f} | {rps * size / 1e6:,.1f} | {p99:,.0f} | {ratio:.3f} | {rps / base:.2f}x |")
PY
