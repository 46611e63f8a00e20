#!/usr/bin/env bash
# The device floor alone: what the disk under DIR does for durable writes
# with no log in the way, measured by the harness (O_DIRECT + RWF_DSYNC
# writes on a preallocated, zero-written file: 4 KiB at 1 and 8 in flight,
# 1 MiB at 4 in flight) and, as a cross-check of the harness itself, by
# fio running the same three jobs on the same kind of file.
#
#   scripts/floor.sh [DIR]        (default /tmp)
#
# Installs fio with apt-get when it is missing and this runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp}
secs=${FLOOR_SECS:-3}

cargo build --release --quiet --manifest-path benches/Cargo.toml
harness=${CARGO_TARGET_DIR:-benches/target}/release/harness
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! "$harness" --dir "$dir" --out "$out" \
    --systems floor-4k-qd1,floor-4k-qd8,floor-1m-qd4 \
    --workloads closed,large --producers 1 --secs "$secs" \
    --floor-file-mib 1024 >"$out/stdout" 2>"$out/stderr"; then
    cat "$out/stderr" >&2
    exit 1
fi
sed -n '1,4p;/^== closed/,/^$/p' "$out/stdout"

if ! command -v fio >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
    else
        echo "floor: fio is not installed; skipping the cross-check" >&2
        exit 0
    fi
fi

work=$(mktemp -d -p "$dir" floor-fio.XXXXXX)
trap 'rm -rf "$out" "$work"' EXIT
file=$work/floor
# Lay the file out once: allocated and written with zeros, then synced.
fio --name=layout --filename="$file" --size=1G --rw=write --bs=1M \
    --direct=1 --zero_buffers --end_fsync=1 --output=/dev/null

job() { # name bs depth engine
    echo "-- fio $1: $2 writes, O_DIRECT + O_DSYNC, $3 in flight ($4)"
    fio --name="$1" --filename="$file" --size=1G --overwrite=1 \
        --rw=write --bs="$2" --direct=1 --sync=dsync --ioengine="$4" \
        --iodepth="$3" --time_based --runtime="$secs" \
        --percentile_list=50:99:99.9 2>&1 |
        grep -E 'IOPS=|clat percentiles|th=\[' | sed 's/^ */   /'
}
echo
echo "== fio cross-check (same file layout, same sizes and depths) =="
job qd1-4k 4k 1 psync
job qd8-4k 4k 8 io_uring
job qd4-1m 1M 4 io_uring
