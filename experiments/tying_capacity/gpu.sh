#!/usr/bin/env bash
# The rest of the capacity grid on one GPU in one call (README.md, "On a GPU"): the cells below,
# in this order, each trained by converge.py (the criterion and the 6,000-step cosine of the
# convergence-driven rerun), WORKERS cells at a time on the one device. No cell starts after
# BUDGET seconds and each is killed at LIMIT seconds (a killed cell is dropped: it has no
# stopped.json and is not read); then analyse.py reads the stopped cells and what comes back is
# put in OUT: gpu.log, timings.tsv, results-gpu.md/.csv, the two figures and runs-gpu.tar.gz
# (every run's config, metrics and segment timings; no checkpoints, no data).
#
#   bash experiments/tying_capacity/gpu.sh                     # on the device machine
#   DEVICE=cpu TINY=1 bash experiments/tying_capacity/gpu.sh   # the script's check: 3 cells
#
# Environment: DEVICE (cuda), WORKERS (8), BUDGET (360), LIMIT (480), FIRST and LAST (1-based
# range of the plan; all), GRID (runs/tying-capacity-gpu), OUT (where the results go; GRID-out),
# PYTHON (python3), TINY=1 (K 4, d 2, 2 seeds, 40 steps: checks the script, not the claim).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-cuda} WORKERS=${WORKERS:-8} BUDGET=${BUDGET:-360} LIMIT=${LIMIT:-480}
GRID=${GRID:-runs/tying-capacity-gpu} PYTHON=${PYTHON:-python3}
OUT=${OUT:-$GRID-out}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} MPLBACKEND=Agg PYTHONUNBUFFERED=1
mkdir -p "$GRID" "$OUT"

plan() {  # language:K:d:decay:bias, in priority order
  if [[ ${TINY:-} == 1 ]]; then
    printf '%s\n' control-clm:4:2:0.1:no cnd-clm:4:2:0.1:no sem-mlm:4:2:0.1:no
    return
  fi
  local kinds="control-clm cnd-clm ratio-clm sem-clm" kind d decay
  for d in 4 8 16; do for kind in $kinds; do echo "$kind:64:$d:0.1:no"; done; done
  for kind in $kinds; do echo "$kind:16:16:0.1:no"; done
  echo cnd-clm:16:8:0.1:no; echo sem-clm:16:8:0.1:no
  for d in 4 8 16; do for kind in $kinds; do echo "$kind:64:$d:0.1:yes"; done; done
  for decay in 0 0.3; do for d in 4 8; do for kind in $kinds; do
    echo "$kind:16:$d:$decay:no"; done; done; done
  for k in 16 64; do for d in 4 8 16; do for kind in control-mlm sem-mlm; do
    echo "$kind:$k:$d:0.1:no"; done; done; done
}

SIZE_ARGS=""
[[ ${TINY:-} == 1 ]] && SIZE_ARGS="--seeds 2 --segment 20 --min-steps 20 --cap 40 --every 10"
START=$(date +%s)
cell() {  # one cell, unless the budget is spent; its wall time into timings.tsv
  local now; now=$(date +%s)
  if (( now - START >= BUDGET )); then echo "not started (budget): $1"; return 0; fi
  local began=$now
  # shellcheck disable=SC2086  # SIZE_ARGS: several options
  if timeout $(( LIMIT - (now - START) )) "$PYTHON" experiments/tying_capacity/converge.py \
       --out "$GRID" --device "$DEVICE" --cell "$1" $SIZE_ARGS; then
    printf '%s\t%s\n' "$1" "$(( $(date +%s) - began ))" >> "$OUT/timings.tsv"
  else
    echo "killed or failed after $(( $(date +%s) - began )) s: $1"
  fi
}
export -f cell
export START BUDGET LIMIT GRID DEVICE PYTHON OUT SIZE_ARGS
plan | sed -n "${FIRST:-1},${LAST:-\$}p" | xargs -P "$WORKERS" -I{} bash -c 'cell "$1"' _ {} \
  2>&1 | tee -a "$OUT/gpu.log"

"$PYTHON" experiments/tying_capacity/analyse.py "$GRID" --name gpu 2>&1 | tee -a "$OUT/gpu.log" \
  || echo "analysis failed" | tee -a "$OUT/gpu.log"
cp experiments/tying_capacity/results-gpu.md experiments/tying_capacity/results-gpu.csv \
   experiments/tying_capacity/figures/price-gpu.png \
   experiments/tying_capacity/figures/share-gpu.png "$OUT/" 2>/dev/null || true
tar -czf "$OUT/runs-gpu.tar.gz" --exclude=checkpoints --exclude=data --exclude=embeddings \
  --exclude=figures --exclude='*.html' -C "$(dirname "$GRID")" "$(basename "$GRID")"
