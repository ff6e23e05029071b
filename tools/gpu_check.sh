#!/usr/bin/env bash
# The GPU checks in one go, on a machine with a CUDA GPU and advcli's dependencies with the `gpu` extra (triton;
# docs/performance.md, "On a GPU"): the CUDA and fused-kernel tests, GPU = CPU on the cross-check cases / the
# sample data / every estimator, compute-only throughput of GRPO and GAE + k3 at 4M-token chunks against the
# measured bandwidth (fused kernels, then the torch path with ADVCLI_KERNELS=off), whole runs cuda vs cpu against
# the I/O floor (steady state: 4x dump minus 1x dump), what --device auto picks, the pipelining gain (CPU and
# GPU), a profile, then the whole test suite with the GPU as the default device. Logs go to OUTDIR.
#
#   bash tools/gpu_check.sh [--dry-run] [--quick] [CASES_DIR] [OUTDIR] [SUITE_SECONDS]
#
# --dry-run: the same steps, small, on the CPU (the kernels through Triton's interpreter, no card, no CUDA
# run): checks the script and prints the CPU's side of every figure on a machine without a GPU.
# --quick: what fits one call of a 15-minute device lease (about 8 minutes): the CUDA tests, GPU = CPU, compute
# only (kernels and torch path), the whole runs with one round, --device auto; no pipelining, no suite.
set -u
cd "$(dirname "$0")/.."
DRY=0
QUICK=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
CASES=${1:-}
OUTDIR=${2:-gpu_out}
SUITE=${3:-200}
mkdir -p "$OUTDIR"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ADVCLI_SERVER=off
PY=${PYTHON:-python3}
step() { echo; echo "== $1 ($(date +%T))"; }
if [ "$DRY" = 1 ]; then
  ROWS=128; CHUNK=262144; ROUNDS=1; DEV=cpu
else
  ROWS=16384; CHUNK=4194304; ROUNDS=3; DEV=cuda
fi
[ "$QUICK" = 1 ] && ROUNDS=1
step "card and versions"
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
$PY -m pip list 2>/dev/null | grep -iE "^(typer|click|rich|pytest|hypothesis|triton) "
$PY -c "import torch, pyarrow, pandas, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'pyarrow', pyarrow.__version__, 'pandas', pandas.__version__, 'numpy', numpy.__version__)"
$PY -c "from advcli.ops.fused import triton_available; print('fused kernels (triton):', triton_available())"
step "fused kernels (Triton's interpreter) and CUDA tests"
TESTS="tests/unit/test_fused.py tests/cli/test_device_auto.py tests/cli/test_pipelined.py tests/cli/test_write_thread.py"
[ "$DRY" = 1 ] || TESTS="tests/project/test_cuda.py tests/unit/test_scans.py $TESTS"
# the quick run: the device's own tests only (test_fused.py forces Triton's interpreter, which the card's
# triton 3.6 with numpy 2.5 cannot run: loop bounds loaded from memory; CI runs it)
[ "$QUICK" = 1 ] && TESTS="tests/project/test_cuda.py"
timeout 300 $PY -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tee "$OUTDIR/tests.log" | tail -15
if [ "$DRY" = 0 ]; then
  step "GPU = CPU"
  timeout 240 $PY tools/device_parity.py $CASES --sample sample_data/rollouts.parquet --json "$OUTDIR/parity.json" \
    > "$OUTDIR/parity.log" 2>&1; grep -v "^ok " "$OUTDIR/parity.log" | tail -30
fi
step "compute only, GRPO and GAE + k3, chunks of $CHUNK tokens on $DEV (share of the bandwidth bound on a GPU)"
timeout 240 $PY benchmarks/compute.py --device $DEV --rows $ROWS --chunk-tokens $CHUNK --estimators grpo gae+k3 \
  --scans 2>&1 | tee "$OUTDIR/compute.log"
if [ "$DRY" = 0 ]; then
  step "compute only, the torch path on the GPU (ADVCLI_KERNELS=off), for comparison"
  ADVCLI_KERNELS=off timeout 200 $PY benchmarks/compute.py --device cuda --rows $ROWS --chunk-tokens $CHUNK \
    --estimators grpo gae+k3 --scans 2>&1 | tee "$OUTDIR/compute_torch.log"
fi
step "whole runs (cuda vs cpu vs the I/O floor, steady state 4x - 1x) and profile"
if [ "$DRY" = 1 ]; then
  timeout 900 $PY benchmarks/gpu.py --dry-run --rows $ROWS --rounds $ROUNDS --data "$OUTDIR/data" 2>&1 \
    | tee "$OUTDIR/gpu.log"
else
  # making the 4x dump alone takes about 2.5 minutes there
  timeout $([ "$QUICK" = 1 ] && echo 330 || echo 420) $PY benchmarks/gpu.py --rows $ROWS --rounds $ROUNDS --data "$OUTDIR/data" \
    --trace "$OUTDIR/trace.json.gz" 2>&1 | tee "$OUTDIR/gpu.log"
fi
step "what --device auto picks, and why"
for est in gae grpo; do
  $PY -m advcli run "$OUTDIR/data/gpu_$ROWS.parquet" -o "$OUTDIR/data/auto.parquet" --force --json \
    --flavor verl --set algorithm.adv_estimator=$est 2>/dev/null \
    | $PY -c "import json, sys; print('$est:', json.load(sys.stdin).get('device'))"
done
if [ "$QUICK" = 1 ]; then step done; exit 0; fi
step "host work pipelined (token columns decoded ahead, the output encoded on its own thread), on the CPU"
timeout 200 $PY benchmarks/pipelining.py --rows $((ROWS * 4)) 2>&1 | tee "$OUTDIR/pipelining.log"
if [ "$DRY" = 0 ]; then
  step "the same with the math on the GPU"
  timeout 120 $PY benchmarks/pipelining.py --rows $((ROWS * 4)) --device cuda --rounds 2 2>&1 | tee "$OUTDIR/pipelining_cuda.log"
fi
if [ "$DRY" = 0 ]; then
  step "the whole suite, GPU by default"
  timeout "$SUITE" $PY -m pytest -q -p no:cacheprovider -n 16 --timeout 120 -o addopts="" 2>&1 \
    | tee "$OUTDIR/suite.log" | grep -E "^(FAILED|ERROR)|passed|failed" | tail -40
fi
step done
