#!/usr/bin/env bash
# The front door, tried as an operator would: one `ringwal` command per
# case, each checked for its exit status and its words, each printing one
# line of what it found. The cases are the mistakes that used to cost more
# than they touched: a key that does not fit the log, a checkpoint one
# digit past the end, a restore from a mistyped URL, a time with a UTC
# offset, a cron job reopening an encrypted log, a segment size given
# alone, one flipped byte in the oldest segment. Exits non-zero if any
# case does not hold.
#
#   scripts/front-door.sh [RINGWAL_BINARY]
#
# Without a binary it builds the debug one (`cargo build -p ringwal-cli`).
# CI runs it after the tests. Needs the binary, coreutils, python3 and a
# writable temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
    cargo build -q -p ringwal-cli
    bin=target/debug/ringwal
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# expect STATUS WHAT CMD...: run CMD, holding it to STATUS; its stderr is
# left in $work/err and its stdout in $work/out.
expect() {
    local want=$1 what=$2
    shift 2
    local got=0
    "$@" >"$work/out" 2>"$work/err" </dev/null || got=$?
    if [ "$got" = "$want" ]; then
        return 0
    fi
    echo "FAIL: $what: status $got, want $want: $*" >&2
    sed 's/^/  stderr: /' "$work/err" >&2
    return 1
}

# says WHAT TEXT: the last command's stderr or stdout holds TEXT.
says() {
    if grep -qF -- "$2" "$work/err" "$work/out"; then
        return 0
    fi
    echo "FAIL: $1: no \"$2\" in its output" >&2
    sed 's/^/  stderr: /' "$work/err" >&2
    return 1
}

# case NAME FUNCTION: run one case, counting it.
case_() {
    if "$2"; then
        passed=$((passed + 1))
        echo "ok: $1"
    else
        failed=$((failed + 1))
        echo "FAILED: $1"
    fi
}

# A key file with BYTE repeated 32 times, mode 0600.
key() {
    head -c 32 /dev/zero | tr '\0' "\\$(printf '%03o' "$2")" >"$1"
    chmod 600 "$1"
}

wrong_key() {
    local log=$work/keyed k1=$work/k1 k2=$work/k2
    key "$k1" 1
    key "$k2" 2
    seq 1 5 | "$bin" append "$log" --key-file "$k1" >/dev/null
    # The log's own bytes (the lock file takes each writer's process id).
    local before
    before=$(cat "$log"/*.wal "$log"/*.manifest | md5sum)
    expect 2 "append with another key" sh -c "seq 6 9 | '$bin' append '$log' --key-file '$k2'" &&
        says "append with another key" "the key given is not the one it was written with" &&
        [ "$(cat "$log"/*.wal "$log"/*.manifest | md5sum)" = "$before" ] &&
        expect 2 "verify with another key" "$bin" verify "$log" --key-file "$k2" &&
        expect 2 "append without a key" sh -c "seq 6 9 | '$bin' append '$log'" &&
        expect 0 "cat with the key" "$bin" cat "$log" --key-file "$k1" &&
        [ "$(cat "$work/out")" = "$(seq 1 5)" ]
}

checkpoint_past_the_end() {
    local log=$work/ckpt
    seq 1 3000 | "$bin" append "$log" --segment-bytes 65536 >/dev/null
    local segments
    segments=$(ls "$log"/*.wal | wc -l)
    expect 2 "checkpoint --up-to 999999" "$bin" checkpoint "$log" --up-to 999999 &&
        says "checkpoint --up-to 999999" "is past the end of the log (last LSN 3000)" &&
        [ "$(ls "$log"/*.wal | wc -l)" = "$segments" ] &&
        expect 0 "checkpoint --up-to 999999 --force" "$bin" checkpoint "$log" --up-to 999999 --force &&
        [ "$(ls "$log"/*.wal | wc -l)" = 1 ]
}

restore_from_an_empty_url() {
    expect 2 "restore from a URL with no archive" \
        "$bin" restore "file://$work/no/such/place" "$work/restored" &&
        says "restore from a URL with no archive" "no archive of this node there" &&
        [ ! -e "$work/restored" ]
}

time_with_an_offset() {
    local log=$work/timed
    seq 1 3 | "$bin" append "$log" >/dev/null
    # An hour ahead of UTC, an hour from now: nothing was written since.
    local later
    later=$(TZ=UTC-1 date -d '+1 hour' +%Y-%m-%dT%H:%M:%S+01:00)
    expect 0 "cat --since $later" "$bin" cat "$log" --since "$later" &&
        [ ! -s "$work/out" ] &&
        expect 0 "cat --until $later" "$bin" cat "$log" --until "$later" &&
        [ "$(cat "$work/out")" = "$(seq 1 3)" ]
}

encrypted_reopen_cycles() {
    local plain=$work/cron-plain sealed=$work/cron-sealed k=$work/kc
    key "$k" 7
    for i in $(seq 1 100); do
        echo "line $i" | "$bin" append "$plain" --segment-bytes 1048576 >/dev/null
        echo "line $i" | "$bin" append "$sealed" --segment-bytes 1048576 --key-file "$k" >/dev/null
    done
    local p s
    p=$(du -sk "$plain" | cut -f1)
    s=$(du -sk "$sealed" | cut -f1)
    echo "  100 reopen-and-append cycles: plain ${p} KiB, encrypted ${s} KiB on disk"
    [ "$s" -le "$p" ] &&
        expect 0 "cat the encrypted log" "$bin" cat "$sealed" --key-file "$k" &&
        [ "$(wc -l <"$work/out")" = 100 ]
}

segment_size_alone() {
    local log=$work/small
    expect 0 "append with --segment-bytes 1048576 alone" \
        sh -c "seq 1 10 | '$bin' append '$log' --segment-bytes 1048576" &&
        expect 0 "bench with --segment-mib 1 alone" \
            "$bin" bench -q --segment-mib 1 --secs 0.2 --producers 1
}

salvage_a_flipped_byte() {
    local log=$work/salvage
    seq -f "record %08g xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" 1 30000 |
        "$bin" append "$log" --segment-bytes 1048576 >/dev/null
    local oldest
    oldest=$(ls "$log"/*.wal | head -1)
    python3 - "$oldest" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[500000] ^= 0x40
open(p, 'wb').write(b)
PY
    local before
    before=$(cat "$log"/*.wal | md5sum)
    expect 1 "verify after one flipped byte" "$bin" verify "$log" &&
        says "verify after one flipped byte" "ringwal recover $log --dry-run" &&
        expect 0 "recover --salvage --dry-run" "$bin" recover "$log" --salvage --dry-run &&
        [ "$(cat "$log"/*.wal | md5sum)" = "$before" ] &&
        expect 0 "recover --salvage --apply" "$bin" recover "$log" --salvage --apply &&
        says "recover --salvage --apply" "applied" &&
        grep 'records kept' "$work/out" | sed 's/^/  /' &&
        expect 0 "verify after the salvage" "$bin" verify "$log" &&
        expect 0 "cat after the salvage" "$bin" cat "$log" &&
        [ "$(wc -l <"$work/out")" -ge 29990 ] &&
        echo "  cat reads $(wc -l <"$work/out") of 30000 records" &&
        expect 0 "append after the salvage" sh -c "echo more | '$bin' append '$log'" &&
        [ "$(cat "$work/out")" = 30001 ]
}

case_ "a key that does not fit the log is refused, and verify says so" wrong_key
case_ "one flipped byte: salvage keeps every record but the damaged ones" salvage_a_flipped_byte
case_ "checkpoint past the end is refused unless --force" checkpoint_past_the_end
case_ "restore from a URL with no archive is no damage" restore_from_an_empty_url
case_ "times with a UTC offset" time_with_an_offset
case_ "100 reopen cycles of an encrypted log cost no more than plain" encrypted_reopen_cycles
case_ "a segment size alone opens" segment_size_alone
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
