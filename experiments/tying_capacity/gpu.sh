#!/usr/bin/env bash
# The rest of the capacity grid on one GPU in one call (README.md, "On a GPU"): the cells below,
# in this order, each trained by converge.py (the criterion and the 6,000-step cosine of the
# convergence-driven rerun; CONVERGE_ARGS="--lr 3e-3 --lr-min 3e-4 --mean-of 5": the second
# protocol's), WORKERS cells at a time on the one device. No cell starts after BUDGET seconds
# and each is killed at LIMIT seconds; a killed cell keeps its last segment's checkpoint and
# continues from it in a later call (a K = 64 cell takes about 10 minutes of a shared H100,
# README.md). Then analyse.py reads the stopped cells and what comes back is put in OUT:
# gpu.log, timings.tsv, results-gpu.md/.csv, the two figures and runs-gpu.tar.gz (every run's
# config, metrics, segment timings and snapshots, and its newest checkpoint: a killed cell resumes
# from it, a stopped one is read from it; no data: converge.py and analyse.py make it again).
#
#   bash experiments/tying_capacity/gpu.sh                     # on the device machine
#   DEVICE=cpu TINY=1 bash experiments/tying_capacity/gpu.sh   # the script's check: 3 cells
#   tar -xzf OUT/runs-gpu.tar.gz -C runs                       # here, before the next call
#                                                              # (which carries runs/tying-capacity-gpu)
#
# Environment: DEVICE (cuda), WORKERS (8), BUDGET (420), LIMIT (540), FIRST and LAST (1-based
# range of the plan; all), SEEDS (10), CONVERGE_ARGS (none), GRID (runs/tying-capacity-gpu),
# OUT (where the results go; GRID-out), PYTHON (python3), TINY=1 (K 4, d 2, 2 seeds, 40
# steps: checks the script, not the claim).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE=${DEVICE:-cuda} WORKERS=${WORKERS:-8} BUDGET=${BUDGET:-420} LIMIT=${LIMIT:-540}
GRID=${GRID:-runs/tying-capacity-gpu} PYTHON=${PYTHON:-python3}
OUT=${OUT:-$GRID-out}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} MPLBACKEND=Agg PYTHONUNBUFFERED=1
mkdir -p "$GRID" "$OUT"
OUT=$(cd "$OUT" && pwd)

plan() {  # language:K:d:decay:bias, in priority order
  if [[ ${TINY:-} == 1 ]]; then
    printf '%s\n' control-clm:4:2:0.1:no cnd-clm:4:2:0.1:no sem-mlm:4:2:0.1:no
    return
  fi
  local kinds="control-clm cnd-clm ratio-clm sem-clm" kind d decay
  for d in 4 8 16; do for kind in $kinds; do echo "$kind:64:$d:0.1:no"; done; done
  echo cnd-clm:16:8:0.1:no; echo sem-clm:16:8:0.1:no  # K 16, d 16 ran on the CPU (README)
  for d in 4 8 16; do for kind in $kinds; do echo "$kind:64:$d:0.1:yes"; done; done
  for decay in 0 0.3; do for d in 4 8; do for kind in $kinds; do
    echo "$kind:16:$d:$decay:no"; done; done; done
  for k in 16 64; do for d in 4 8 16; do for kind in control-mlm sem-mlm; do
    echo "$kind:$k:$d:0.1:no"; done; done; done
}

SIZE_ARGS="--seeds ${SEEDS:-10} ${CONVERGE_ARGS:-}"
[[ ${TINY:-} == 1 ]] && SIZE_ARGS="--seeds 2 --segment 20 --min-steps 20 --cap 40 --every 10 \
${CONVERGE_ARGS:-}"
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

rm -f experiments/tying_capacity/results-gpu.md experiments/tying_capacity/results-gpu.csv
"$PYTHON" experiments/tying_capacity/analyse.py "$GRID" --name gpu 2>&1 | tee -a "$OUT/gpu.log" \
  || echo "analysis failed" | tee -a "$OUT/gpu.log"
cp experiments/tying_capacity/results-gpu.md experiments/tying_capacity/results-gpu.csv \
   experiments/tying_capacity/figures/price-gpu.png \
   experiments/tying_capacity/figures/share-gpu.png "$OUT/" 2>/dev/null || true
cd "$(dirname "$GRID")"
grid=$(basename "$GRID")
{ find "$grid" \( -name data -o -name figures -o -name checkpoints \) -prune \
    -o -type f ! -name '*.html' ! -name .lock -print
  for cell in "$grid"/*/; do
    for run in "$cell"tied "$cell"untied; do
      { find "$run/checkpoints" -name 'step_*.pt' 2>/dev/null || true; } | sort | tail -n 1
    done
  done; } > "$OUT/runs-gpu.files"
tar -czf "$OUT/runs-gpu.tar.gz" -T "$OUT/runs-gpu.files" && rm "$OUT/runs-gpu.files"
