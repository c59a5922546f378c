#!/usr/bin/env bash
# word_gpu.toml in one device call on a lent GPU (LOG.md, section 7): the study's
# groups (three learning rates) as parallel jobs (`dhwt study --jobs 3`; one process if that
# fails) on the one GPU, cut at BUDGET seconds if not done (a cut run keeps its metrics to its
# last evaluation; the constant lr makes a cut run the same as a shorter one). What comes back
# in OUT: word_gpu.log, the GPU's utilisation every 5 s (smi.csv) and word-gpu.tar.gz (every
# run's config, metrics and report, the jobs' logs; no checkpoints or snapshots).
#
#   OUT=DIR DHWT_DATA=../shared/data bash experiments/tying_wikitext/word_gpu.sh
#
# Environment: BUDGET (420 s for the whole script), STUDY_FILE (word_gpu.toml; or
# word_gpu_conventions.toml with JOBS=4), JOBS (3: one per group), STUDY (runs/word-gpu),
# PYTHON (python3), WHEELS (a folder of wheels to install first, e.g. submitit where the
# machine lacks it).
set -u
OUT=${OUT:-word-gpu-out} BUDGET=${BUDGET:-420} STUDY=${STUDY:-runs/word-gpu} PY=${PYTHON:-python3}
STUDY_FILE=${STUDY_FILE:-experiments/tying_wikitext/word_gpu.toml} JOBS=${JOBS:-3}
export DHWT_DATA=${DHWT_DATA:-../shared/data} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p "$OUT"
log() { echo "[$SECONDS s] $*" | tee -a "$OUT/word_gpu.log"; }
log "start; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
if [ -n "${WHEELS:-}" ]; then
    $PY -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl >> "$OUT/word_gpu.log" 2>&1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >> "$OUT/word_gpu.log" 2>&1
log "installed: $($PY -c 'import dhwt, submitit, torch; print(torch.__version__)' 2>&1)"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > "$OUT/smi.csv" 2>/dev/null &
study() { timeout $(( BUDGET - SECONDS - 30 )) $PY -m dhwt study "$STUDY_FILE" --out "$STUDY" \
    "$@" >> "$OUT/word_gpu.log" 2>&1; }
study --jobs "$JOBS"
status=$?
log "study exit $status (124: cut at the budget)"
if [ $status != 0 ] && [ $status != 124 ] && [ $(( BUDGET - SECONDS )) -gt 120 ]; then
    log "continuing in one process"  # the same study resumes what the jobs left
    study
    log "study exit $?"
fi
tar -czf "$OUT/word-gpu.tar.gz" --exclude=checkpoints --exclude=embeddings --exclude='*.npy' \
    -C "$(dirname "$STUDY")" "$(basename "$STUDY")"
log "done"
