#!/usr/bin/env bash
# Kill torture: the SIGKILL crash loops of the library's `crash` test
# binary (tests/crash/: the library writer and the collector) and of the
# CLI's `crash` tests (cli/tests/cli/crash.rs, `ringwal append`, in the
# CLI's one test binary), for as long as asked. Every kill is followed by a full recovery check (every record
# acknowledged durable is present byte for byte, LSNs dense, nothing
# invented). A failing run prints its seed; rerun it with
# RINGWAL_TEST_SEED=<seed>.
#
#   scripts/torture.sh [KILLS]     # default 2000 kills per loop
#   RINGWAL_CRASH_ROOT=/mnt/xfs scripts/torture.sh 500   # on another filesystem
set -euo pipefail
cd "$(dirname "$0")/.."
kills="${1:-2000}"
echo "torture: $kills kills per loop (CLI writer, library writer on both backends, written mode, collector)"
RINGWAL_KILLS="$kills" cargo test --release -p ringwal-cli --test cli -- crash:: --nocapture --test-threads=1 2>&1 \
    | grep -E "kills,|seed|panicked|test result|skipped"
RINGWAL_KILLS="$kills" cargo test --release -p ringwal --test crash -- --nocapture --test-threads=1 2>&1 \
    | grep -E "kills,|seed|panicked|test result|skipped"
