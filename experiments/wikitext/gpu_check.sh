#!/usr/bin/env bash
# One device call on a lent GPU (an H100/H200; at most 9 minutes): the GPU tests, the throughput
# benchmark at the blog's shape (dhwt vs HF GPT-2, fp32 and bf16-mixed), then, in what is left of
# BUDGET, the blog's two experiments (blog_run.py: exp 1, exp 2, their KNN curves on the GPU and
# the figure; it refuses before training what the time left cannot hold). Results in $OUT.
#
#   OUT=DIR DHWT_DATA=../shared/data bash experiments/wikitext/gpu_check.sh
#
# Knobs: BUDGET (seconds for the whole script), TESTS=0, BENCH=0, BLOG=0, BLOG_ARGS (more
# arguments of blog_run.py, e.g. "--steps 4000"). The experiments alone, the whole budget theirs:
# `python experiments/wikitext/blog_run.py --out DIR` (experiments/wikitext/README.md, Run).
set -u
OUT=${OUT:-gpu-check}
BUDGET=${BUDGET:-500}          # seconds for the whole script
DEVICE=${DEVICE:-cuda}
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
        tests/training/test_precision.py tests/config/test_device.py \
        tests/analysis/knn/test_gram.py > "$OUT/tests.txt" 2>&1
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

if [ "${BLOG:-1}" = 1 ]; then
    log "the blog's experiments, $(left) s left"
    $PY experiments/wikitext/blog_run.py --out "$OUT" --budget $(( $(left) - 20 )) --device "$DEVICE" \
        --data "$DATA" ${BLOG_ARGS:-} 2>> "$LOG"
    log "blog_run exit $?"
fi
log "done"
