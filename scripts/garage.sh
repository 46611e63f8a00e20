#!/usr/bin/env bash
# A throwaway single-node Garage (an S3 server) on loopback, for the tests
# that ship segments to object storage: a real server, not a mock, so that
# what passes here passes against S3. Everything (config, metadata, data,
# log, pid) lives under DIR; the ports are free ones (or given), so that
# parallel runs do not collide. Needs `garage` on the PATH
# (`cargo install garage --locked`).
#
#   eval "$(scripts/garage.sh start DIR [S3_PORT RPC_PORT])"
#   scripts/garage.sh stop DIR
#
# `start` prints GARAGE_PID, AWS_ENDPOINT_URL, AWS_REGION,
# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and RINGWAL_S3_BUCKET, one
# assignment a line, once S3 answers. On a DIR that has already run a
# node it starts that node again, on the same ports, data, bucket and
# key: a test stops S3 for a while and brings it back this way.
set -euo pipefail

usage() { echo "usage: $0 start DIR [S3_PORT RPC_PORT] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
conf=$dir/garage.toml
bucket=ringwal-test

g() { garage -c "$conf" "$@"; }

# Alive and not a zombie: the server is nobody's child once `start` has
# exited, and a container's init may be slow to reap it.
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null && ! grep -q '^[^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port nothing listens on (the caller may pass ports the OS chose instead).
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        listening "$p" || { echo "$p"; return; }
    done
}

# Poll `$@` for up to 60 s, giving up early if the server died.
wait_for() {
    local what=$1; shift
    for _ in $(seq 600); do
        "$@" >/dev/null 2>&1 && return
        alive "$(cat "$dir/garage.pid")" || break
        sleep 0.1
    done
    echo "garage.sh: $what did not come up; the end of $dir/garage.log:" >&2
    tail -n 20 "$dir/garage.log" >&2
    exit 1
}

# An unauthenticated request answered with any HTTP status line: the S3
# endpoint is serving.
s3_answers() (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'HEAD /%s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$bucket" >&3
    local line
    read -r -t 5 line <&3 || line=
    exec 3<&-
    [[ $line == HTTP/* ]]
)

stop() {
    local pid
    pid=$(cat "$dir/garage.pid" 2>/dev/null || true)
    # SIGKILL: an outage as a client sees it, at once. A graceful stop
    # waits for every client's idle keep-alive connection to close. Nothing
    # is lost: what Garage wrote is in the page cache, and its metadata
    # engines survive a killed process.
    if alive "$pid"; then
        kill -9 "$pid"
        while alive "$pid"; do sleep 0.05; done
    fi
    # Gone, so that a later stop cannot hit a process that reused the pid.
    rm -f "$dir/garage.pid"
}

case $cmd in
stop) stop; exit ;;
start) ;;
*) usage ;;
esac

first=
if [ ! -e "$conf" ]; then
    first=1
    s3=${3:-$(free_port)}
    rpc=${4:-$(free_port)}
    # LMDB is Garage's default engine; SQLite when a build leaves it out.
    engine=sqlite
    [[ $(garage --version 2>&1) == *lmdb* ]] && engine=lmdb
    mkdir -p "$dir/meta" "$dir/data"
    cat >"$conf" <<EOF
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "$engine"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"

[s3_api]
api_bind_addr = "127.0.0.1:$s3"
s3_region = "garage"
EOF
fi
s3=$(sed -n 's/^api_bind_addr = "127.0.0.1:\([0-9]*\)"$/\1/p' "$conf")

stop
# Detached from our stdout, so that a caller reading it sees its end when
# this script exits.
NO_COLOR=1 garage -c "$conf" server </dev/null >>"$dir/garage.log" 2>&1 &
echo $! >"$dir/garage.pid"
# A failed start stops what it started: nothing else knows of it.
trap 'status=$?; [ $status = 0 ] || stop; exit $status' EXIT
wait_for "Garage's RPC" g status

if [ -n "$first" ]; then
    node=$(g node id -q)
    g layout assign -z dc1 -c 1GB "${node%%@*}" >/dev/null
    g layout apply --version 1 >/dev/null
    wait_for "the layout" g health -q
    g bucket create "$bucket" >/dev/null
    g key create "$bucket" >/dev/null
    g bucket allow --read --write --owner "$bucket" --key "$bucket" >/dev/null
    {
        echo "AWS_ENDPOINT_URL=http://127.0.0.1:$s3"
        echo "AWS_REGION=garage"
        g key export-env "$bucket" | grep -E '^AWS_(ACCESS_KEY_ID|SECRET_ACCESS_KEY)='
        echo "RINGWAL_S3_BUCKET=$bucket"
    } >"$dir/env"
fi
wait_for "the cluster" g health -q
wait_for "S3 on port $s3" s3_answers "$s3"

echo "GARAGE_PID=$(cat "$dir/garage.pid")"
cat "$dir/env"
