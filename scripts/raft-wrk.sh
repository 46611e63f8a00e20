#!/usr/bin/env bash
# HTTP load on a 3-node ringwal-kv cluster on loopback: wrk with 64
# connections POSTing unique keys to the leader's /kv/put, once per log
# store, each store on a fresh cluster in fresh directories.
#
#   scripts/raft-wrk.sh
#
# Environment: BIN (a ringwal-kv binary to run; default: build this
# tree's, release), STORES (default "ringwal memory"; "default" runs the node
# without --store), SECS per run (default 10), CONNS (64), THREADS (2),
# VALUE_BYTES (128), ROUNDS (default 3: the stores alternate, each round in
# a new order), DIR (default a temporary directory on /var/tmp), SNAPSHOT_EVERY
# (default 100000: the state grows with every key, and a snapshot of it
# every few entries would be what is measured). Installs wrk with apt-get
# when it is missing (as root). Loopback only; each run is bounded by SECS.
set -euo pipefail
cd "$(dirname "$0")/.."

stores=${STORES:-ringwal memory}
secs=${SECS:-10}
conns=${CONNS:-64}
threads=${THREADS:-2}
value_bytes=${VALUE_BYTES:-128}
rounds=${ROUNDS:-3}
snapshot_every=${SNAPSHOT_EVERY:-100000}

if ! command -v wrk >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "raft-wrk: installing wrk" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
    else
        echo "raft-wrk: no wrk; install it (apt-get install wrk)" >&2
        exit 1
    fi
fi
for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "raft-wrk: $tool is needed" >&2; exit 1; }
done

bin=${BIN:-}
if [[ -z $bin ]]; then
    echo "raft-wrk: building ringwal-kv (release)" >&2
    cargo build --release --quiet -p ringwal-raft --features kv --bin ringwal-kv
    bin=${CARGO_TARGET_DIR:-target}/release/ringwal-kv
fi

base=${DIR:-$(mktemp -d /var/tmp/raft-wrk.XXXXXX)}
mkdir -p "$base"
lua="$base/put.lua"
# Unique keys: each wrk thread numbers its requests, keys carry the
# thread's number. A reply counts as a success only if it is 200 and the
# raft result is Ok.
cat >"$lua" <<LUA
local threads = {}
function setup(thread)
    thread:set("tid", #threads)
    table.insert(threads, thread)
end
function init(args)
    n = 0
    failed = 0
    value = string.rep("v", $value_bytes)
end
function request()
    n = n + 1
    local body = string.format('{"Set":{"key":"t%d-%d","value":"%s"}}', tid, n, value)
    return wrk.format("POST", "/kv/put", {["Content-Type"] = "application/json"}, body)
end
function response(status, headers, body)
    if status ~= 200 or string.sub(body, 1, 5) ~= '{"Ok"' then
        failed = failed + 1
    end
end
function done(summary, latency, requests)
    local f = 0
    for _, t in ipairs(threads) do
        f = f + t:get("failed")
    end
    io.write(string.format("not ok: %d of %d\n", f, summary.requests))
end
LUA

pids=()
stop_nodes() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    pids=()
}
cleanup() {
    stop_nodes
    # A directory of our own making goes too (a given DIR stays).
    if [[ -z ${DIR:-} ]]; then rm -rf "$base"; fi
}
trap cleanup EXIT

# Start three nodes of store $1 in $2, initialize them; prints the leader's
# address.
cluster() {
    local store=$1 dir=$2 port=$((20000 + RANDOM % 10000)) flags=()
    [[ $store != default ]] && flags=(--store "$store")
    local addrs=()
    for id in 1 2 3; do
        local addr="127.0.0.1:$((port + id))"
        addrs+=("$addr")
        "$bin" node --id "$id" --addr "$addr" --dir "$dir/$id" "${flags[@]}" \
            --snapshot-every "$snapshot_every" --keep 1000 \
            >"$dir/$id.out" 2>"$dir/$id.err" &
        pids+=($!)
    done
    for a in "${addrs[@]}"; do
        for _ in $(seq 100); do
            curl -sf "http://$a/metrics" >/dev/null && break
            sleep 0.1
        done
    done
    "$bin" init --node "${addrs[0]}" "1=${addrs[0]}" "2=${addrs[1]}" "3=${addrs[2]}"
    local leader=
    for _ in $(seq 100); do
        leader=$(curl -sf "http://${addrs[0]}/metrics" | jq -r '.current_leader // empty')
        [[ -n $leader ]] && break
        sleep 0.1
    done
    [[ -n $leader ]] || { echo "raft-wrk: no leader" >&2; return 1; }
    echo "${addrs[$((leader - 1))]}"
}

echo "raft-wrk: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); nproc $(nproc); dirs in $base" \
    "($(stat -f -c %T "$base")); $conns connections, $threads threads, $secs s," \
    "$value_bytes B values; loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
read -r -a order <<<"$stores"
for ((r = 0; r < rounds; r++)); do
    n=${#order[@]}
    for ((k = 0; k < n; k++)); do
        store=${order[$(((k + r) % n))]}
        dir="$base/$store-$r"
        mkdir -p "$dir"
        # Not in a command substitution: its subshell would keep the
        # nodes' pids, and stop_nodes would leave every cluster running.
        cluster "$store" "$dir" >"$dir/leader"
        leader=$(<"$dir/leader")
        # A second of warm-up, then the measured run.
        wrk -t1 -c4 -d1s -s "$lua" "http://$leader" >/dev/null
        out=$(wrk -t"$threads" -c"$conns" -d"${secs}s" --latency -s "$lua" "http://$leader")
        rate=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
        p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        bad=$(awk '/^not ok:/ {print $3 " of " $5}' <<<"$out")
        echo "round $((r + 1)) store $store: $rate req/s p50 $p50 p99 $p99; not ok $bad;" \
            "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
        stop_nodes
        rm -rf "$dir"
    done
done
echo "raft-wrk: loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
