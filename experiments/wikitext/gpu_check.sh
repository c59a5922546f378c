#!/usr/bin/env bash
# One device call on a lent GPU (an H100/H200; at most 9 minutes): the GPU tests, the throughput
# benchmark at the blog's shape (dhwt vs HF GPT-2, fp32 and bf16-mixed), then exp 1 at the
# reference settings (experiments/wikitext/gpu.toml, bf16-mixed) for as many of its 16,000 steps
# as the rest of the budget allows, and the KNN match between its two members over the snapshots
# (searched on the GPU). Results in $OUT (8 files; see experiments/wikitext/LOG.md, "GPU").
#
#   OUT=DIR DHWT_DATA=../shared/data bash experiments/wikitext/gpu_check.sh
#
# exp 1 runs in segments: first SEGMENT steps (default 1,000: the first checkpoint), timed with
# everything a run does (data, evaluations, snapshots, checkpoints); then one extension
# (`--resume --steps N`, the same run as one of N steps, since gpu.toml's lr is constant) to the
# most steps the measured rate fits into what is left of BUDGET seconds. The run directory stays
# on the machine (its snapshots and checkpoints are GBs); a later call on the same machine
# continues it with `--resume --steps M`.
# Knobs (a dry run on the CPU, or a shorter call): CONFIG, DEVICE, SEGMENT, BUDGET, CURVES (seconds
# kept for the curves), TESTS=0, BENCH=0.
set -u
OUT=${OUT:-gpu-check}
BUDGET=${BUDGET:-500}          # seconds for the whole script
CONFIG=${CONFIG:-experiments/wikitext/gpu.toml}
DEVICE=${DEVICE:-cuda}
SEGMENT=${SEGMENT:-1000}
RUN=${RUN:-runs/gpu-exp1}
PY=${PYTHON:-python3}
DATA=${DHWT_DATA:-../shared/data}
export DHWT_DATA=$DATA TIKTOKEN_CACHE_DIR=$DATA/gpt2/tiktoken_cache PYTHONPATH=$PWD
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
log() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET - SECONDS)); }

log "start; $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
        torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" 2>&1 | tee -a "$LOG"

if [ "${TESTS:-1}" = 1 ]; then
    log "tests"
    # the built-in grammars (synthetic/) import as dhwt.synthetic from an install only
    $PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >> "$LOG" 2>&1
    timeout 200 $PY -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/training/test_gpu.py \
        tests/training/test_precision.py tests/training/test_device.py \
        tests/analysis/test_knn_precision.py > "$OUT/tests.txt" 2>&1
    log "tests exit $? ($(tail -1 "$OUT/tests.txt"))"
fi

if [ "${BENCH:-1}" = 1 ]; then
    log "benchmark, blog shape"
    timeout 150 $PY experiments/benchmarks/bench_text_throughput.py --device "$DEVICE" \
        --shape blog --dropout 0.2 --precision bf16-mixed --precision fp32 --rounds 3 \
        --steps 10 > "$OUT/bench.txt" 2>&1
    log "benchmark exit $?"
    cat "$OUT/bench.txt" >> "$LOG"
fi

train() {  # train ARGS...: exp 1's run (a new one with --config, else --resume), logged
    $PY -m dhwt train --device "$DEVICE" --out "$RUN" "$@" >> "$LOG" 2>&1
}
log "exp 1: first $SEGMENT steps"
begun=$SECONDS
train --config "$CONFIG" --precision bf16-mixed --steps "$SEGMENT" --overwrite
status=$?
took=$((SECONDS - begun))
log "exp 1: $SEGMENT steps took $took s (exit $status)"
curves=${CURVES:-60}           # seconds kept for the KNN curves and copying
if [ $status = 0 ] && [ "$took" -gt 0 ]; then
    more=$(( ( $(left) - curves ) * SEGMENT / took / 100 * 100 ))  # whole hundreds
    if [ $more -gt 0 ]; then
        target=$((SEGMENT + more)); [ $target -gt 16000 ] && target=16000
        log "exp 1: extending to $target steps"
        train --resume --steps "$target"
        log "exp 1: extension exit $?"
    fi
fi

log "KNN match between the members"
timeout $(( $(left) > 30 ? $(left) - 10 : 20 )) $PY experiments/wikitext/member_curves.py "$RUN" \
    --out "$OUT" --device "$DEVICE" --max-steps 9 >> "$LOG" 2>&1
log "curves exit $?"
cp "$RUN/metrics.jsonl" "$RUN/report.md" "$OUT/" 2>/dev/null
cp "$RUN/figures/training.png" "$OUT/" 2>/dev/null
log "done"
