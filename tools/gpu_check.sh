#!/usr/bin/env bash
# The GPU checks in one go, on a machine with a CUDA GPU and advcli's dependencies (docs/performance.md,
# "On a GPU"): the CUDA tests, GPU = CPU on the cross-check cases / the sample data / every estimator,
# compute-only throughput against the measured bandwidth, whole runs against the CPU and the I/O floor,
# a profile, then the whole test suite with the GPU as the default device. Logs go to OUTDIR.
#
#   bash tools/gpu_check.sh [CASES_DIR] [OUTDIR] [SUITE_SECONDS]
set -u
cd "$(dirname "$0")/.."
CASES=${1:-}
OUTDIR=${2:-gpu_out}
SUITE=${3:-200}
mkdir -p "$OUTDIR"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ADVCLI_SERVER=off
PY=${PYTHON:-python3}
step() { echo; echo "== $1 ($(date +%T))"; }
step card
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
$PY -m pip list 2>/dev/null | grep -iE "^(typer|click|rich|pytest|hypothesis) "
$PY -c "import torch, pyarrow, pandas, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'pyarrow', pyarrow.__version__, 'pandas', pandas.__version__, 'numpy', numpy.__version__)"
step "CUDA tests"
timeout 180 $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_scans.py 2>&1 | tee "$OUTDIR/test_cuda.log" | tail -15
step "GPU = CPU"
timeout 240 $PY tools/device_parity.py $CASES --sample sample_data/rollouts.parquet --json "$OUTDIR/parity.json" \
  > "$OUTDIR/parity.log" 2>&1; grep -v "^ok " "$OUTDIR/parity.log" | tail -30
step "compute only"
timeout 200 $PY benchmarks/compute.py --device cuda --rows 16384 --chunk-tokens 524288 4194304 16777216 --scans \
  2>&1 | tee "$OUTDIR/compute.log"
step "whole runs and profile"
timeout 300 $PY benchmarks/gpu.py --rounds 3 --trace "$OUTDIR/trace.json.gz" 2>&1 | tee "$OUTDIR/gpu.log"
step "the whole suite, GPU by default"
timeout "$SUITE" $PY -m pytest -q -p no:cacheprovider -n 16 --timeout 120 -o addopts="" 2>&1 \
  | tee "$OUTDIR/suite.log" | grep -E "^(FAILED|ERROR)|passed|failed" | tail -40
step done
