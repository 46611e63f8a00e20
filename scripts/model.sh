#!/usr/bin/env bash
# The model-based contract test (cli/tests/cli/model.rs) with many seeds: every
# answer of the library and of `ringwal verify/stat/cat/dump` checked
# against one model of the API, on a real disk and through power losses
# and failed writes on the simulated disk. CI runs 200 seeds of each; run
# this after any change to retention, recovery, readers or the write path.
# A failure names its seed; replay it with RINGWAL_MODEL_SEED=<seed>
# (the real-disk family runs threads, so a replay may take a few tries).
#
#   scripts/model.sh [SEEDS]       # default 3000 seeds per family
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-3000}"
echo "model: $seeds seeds per family"
RINGWAL_MODEL_SEEDS="$seeds" cargo test --release -p ringwal-cli --test cli -- model:: --nocapture 2>&1 \
    | grep -E "model \(|panicked|test result|left|right"
