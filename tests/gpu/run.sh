#!/usr/bin/env bash
# `make test-gpu`: bload's CUDA paths in one run, on a machine with a CUDA build of torch, CMake
# and a C++ compiler (nvcc's headers or the nvidia wheels' for the NCCL trainer) and no Rust.
# Steps, each timed, then a report:
#   configure, build
#             libbload.so and the C++ DDP trainer from a carried Rust prebuilt (BLOAD_RUST_PREBUILT)
#   planner   the planner's Python tests against that library (the prebuilt's Rust side)
#   ops       the device-parametrized operator tests on the device: opcheck, pack against its
#             reference, every mask, pack_backward (tests/python, `-k DEVICE`)
#   loader    DataLoader(pin_memory=True) of bload's batches, .to(DEVICE, non_blocking=True),
#             checked against the same batches packed on the CPU (tests/gpu/loader_check.py)
#   attention the attention model's packed outputs and gradients equal each piece run alone
#             (flex_attention's gradients: on cuda only), then a transformer epoch of the
#             Python trainer (flex_attention with the BlockMask on cuda, SDPA on cpu)
#   trainer   a one-rank epoch of the C++ trainer (NCCL on cuda, gloo on cpu)
#   bench     pack beside torch.cat on the device (benches/pack_device.py; BENCHMARKS.md)
# Then the report's benchmarks (BENCHMARKS.md, "On a GPU"; on --cpu each on a tiny case, once):
#   epoch     the paper's claim: one-rank epochs of the C++ trainer, pad_to_max against best_fit,
#             the C++ module and the TorchScript one (benches/ddp_epoch.py)
#   feed-gru, feed-transformer
#             the share of each step the loop waits for its batch, the Python trainer with 2
#             workers, pinned memory and non_blocking copies
#   llm       a small causal transformer's real tokens/s: bload with flex_attention, SDPA and
#             varlen_attn against a padded loader (benches/llm_tokens.py)
#   mask      block_mask() against create_block_mask, eager and compiled (benches/block_mask.py)
#
#   tests/gpu/run.sh                 # on cuda; exits 1 where torch sees no GPU
#   tests/gpu/run.sh --cpu           # every step on the CPU (`make test` runs this: the script
#                                    # cannot rot where no GPU is)
#   options: --build-dir DIR (default build/gpu)
#   environment: PYTHON (default .venv/bin/python, else python3), BLOAD_RUST_PREBUILT (default
#   build/rust: lib/libbload_cxx.a, include/, bin/bload), BLOAD_GLOO_INCLUDE_DIR (gloo's headers
#   for the trainer: /usr/include or build/gloo/usr/include where they are), CMAKE (default cmake),
#   BENCHES (the benchmark steps to run, default "epoch feed llm mask"; "" for the tests alone),
#   BLOAD_CMAKE_ARGS (more arguments for CMake's configure, split at spaces:
#   BLOAD_CMAKE_ARGS=-DBLOAD_TORCH_FROM_PYTHON=ON takes torch's paths from Python, not from
#   find_package(Torch))
# The whole run is bounded: each step has a time limit (STEP_TIMEOUT seconds, default 240; the
# build BUILD_TIMEOUT, default 1800, for a first build on a small machine; the benchmarks
# BENCH_TIMEOUT, default 300).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

DEVICE=cuda
BUILD_DIR=build/gpu
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) DEVICE=cpu ;;
    --build-dir) BUILD_DIR=${2:?--build-dir needs a directory}; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "tests/gpu/run.sh: unknown option '$1': expected --cpu, --build-dir DIR or --help" >&2; exit 2 ;;
  esac
  shift
done

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=$(command -v python3); fi
fi
PREBUILT=$(realpath -m "${BLOAD_RUST_PREBUILT:-build/rust}")
CMAKE=${CMAKE:-cmake}
if ! command -v "$CMAKE" > /dev/null && [[ -x "$(dirname "$PYTHON")/cmake" ]]; then CMAKE=$(dirname "$PYTHON")/cmake; fi
if [[ -z "${BLOAD_GLOO_INCLUDE_DIR:-}" ]]; then
  for dir in /usr/include "$ROOT/build/gloo/usr/include"; do
    [[ -f "$dir/gloo/context.h" ]] && BLOAD_GLOO_INCLUDE_DIR=$dir && break
  done
fi
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-1800}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(realpath "$BUILD_DIR")
LOGS=$BUILD_DIR/test-gpu-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
export BLOAD_LIBRARY=$BUILD_DIR/libbload.so PYTHONPATH=$ROOT/python:$ROOT/tests/support OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

declare -a REPORT=()
FAILED=0
# step NAME COMMAND...: runs it with a time limit (LIMIT, else STEP_TIMEOUT), its output in
# $LOGS/NAME.log; a failure is reported with the log's tail and the later steps still run (bar
# those that need the build).
step() {
  local name=$1; shift
  local start=$SECONDS
  echo "== $name: $*"
  if timeout "${LIMIT:-$STEP_TIMEOUT}" "$@" > "$LOGS/$name.log" 2>&1; then
    REPORT+=("$(printf '%-8s ok     %4ds' "$name" $((SECONDS - start)))")
  else
    local code=$?
    FAILED=1
    REPORT+=("$(printf '%-8s FAILED %4ds (exit %d; %s)' "$name" $((SECONDS - start)) "$code" "$LOGS/$name.log")")
    tail -n 40 "$LOGS/$name.log"
    return 1
  fi
}

echo "tests/gpu/run.sh on $DEVICE: torch from $PYTHON, Rust prebuilt $PREBUILT, build in $BUILD_DIR"
if ! "$PYTHON" - "$DEVICE" > "$LOGS/device.txt" 2>&1 <<'EOF'
import sys, torch
device = sys.argv[1]
if device == "cuda" and not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA device (torch.version.cuda = {torch.version.cuda}): "
             "run on a GPU machine with a CUDA build of torch, or pass --cpu")
name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
print(f"device {name}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"NCCL {'.'.join(map(str, torch.cuda.nccl.version())) if device == 'cuda' else '-'}")
EOF
then
  cat "$LOGS/device.txt" >&2
  exit 1
fi
cat "$LOGS/device.txt"

# The library, and the DDP trainer of tests/harness where gloo's headers are found: not the C++
# tests (no GoogleTest needed), nor examples/cpp's short trainer, which no step runs. A unity
# build (sources compiled eight to a translation unit on a small machine): this directory is
# built once, not edited, and torch's headers, most of each source's compile time, are then read
# a few times rather than once a source (about 40% less compile time; BENCHMARKS.md, "Where
# `make test`'s time goes"). With 8 cores or more, two to a unit: the units then keep every core
# busy.
# (nproc counts OMP_NUM_THREADS, set above for the tests: not for the build.)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
unity_batch=8; [[ $cores -ge 8 ]] && unity_batch=2
configure=("$CMAKE" -S . -B "$BUILD_DIR" -DBLOAD_BUILD_TESTS=OFF -DBLOAD_BUILD_EXAMPLES=OFF
           -DBLOAD_BUILD_HARNESS=ON -DBLOAD_RUST_PREBUILT="$PREBUILT" -DPython3_EXECUTABLE="$PYTHON"
           -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=$unity_batch)
ninja=$(command -v ninja || true)
[[ -z "$ninja" && -x "$(dirname "$PYTHON")/ninja" ]] && ninja=$(dirname "$PYTHON")/ninja
# Ninja where there is one (a directory configured with make keeps make).
[[ -n "$ninja" && ! -f "$BUILD_DIR/Makefile" ]] && configure+=(-G Ninja -DCMAKE_MAKE_PROGRAM="$ninja")
[[ -n "${BLOAD_GLOO_INCLUDE_DIR:-}" ]] && configure+=(-DBLOAD_GLOO_INCLUDE_DIR="$BLOAD_GLOO_INCLUDE_DIR")
# On cuda the trainer must have NCCL: a trainer that fell back to gloo would check nothing.
[[ $DEVICE == cuda ]] && configure+=(-DBLOAD_REQUIRE_NCCL=ON)
read -r -a more_args <<< "${BLOAD_CMAKE_ARGS:-}"
configure+=("${more_args[@]}")
if step configure "${configure[@]}" &&
   LIMIT=$BUILD_TIMEOUT step build "$CMAKE" --build "$BUILD_DIR" --parallel "$cores"; then
  step planner "$PYTHON" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/python/test_planner.py
  step ops "$PYTHON" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning -k "$DEVICE" \
    tests/python/test_ops.py tests/python/test_pack_paths.py
  step loader "$PYTHON" tests/gpu/loader_check.py --device "$DEVICE"
  # The attention model's packed outputs and gradients against each piece alone: on cuda this is
  # where flex_attention's gradients are checked (it has no CPU backward in eager mode).
  step attention "$PYTHON" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
    tests/python/test_attention_model.py
  # The transformer trained by the Python trainer: flex_attention and the BlockMask on cuda.
  attention=(flex); [[ $DEVICE == cpu ]] && attention=(sdpa)
  step transformer "$PYTHON" tests/harness/ddp_trainer.py --world-size 1 --device "$DEVICE" \
    --model transformer --attention "${attention[0]}" --epochs 1 --sequences 300 --timeout 120
  trainer=("$BUILD_DIR/tests/harness/cpp/ddp_trainer" --world-size 1 --device "$DEVICE" --epochs 1 --timeout 120)
  [[ $DEVICE == cpu ]] && trainer+=(--sequences 300)
  step trainer "${trainer[@]}"
  bench=("$PYTHON" benches/pack_device.py --device "$DEVICE")
  [[ $DEVICE == cpu ]] && bench+=(--quick)
  step bench "${bench[@]}"

  # The report's benchmarks: on --cpu each on a tiny case, once, so that they cannot rot.
  export LIMIT=$BENCH_TIMEOUT
  quick=(); [[ $DEVICE == cpu ]] && quick=(--sequences 300)
  benches=" ${BENCHES-epoch feed llm mask} "
  if [[ $benches == *" epoch "* ]] && step model "$PYTHON" examples/packed_gru.py "$BUILD_DIR/packed_gru.pt"; then
    # One round: two took 196 s of the first GPU run's 555 (the run must fit in 10 minutes).
    step epoch "$PYTHON" benches/ddp_epoch.py --trainer "$BUILD_DIR/tests/harness/cpp/ddp_trainer" \
      --model "$BUILD_DIR/packed_gru.pt" --world-size 1 --device "$DEVICE" --no-lanes \
      --policies pad_to_max,best_fit --repeats 1 "${quick[@]}"
  fi
  if [[ $benches == *" feed "* ]]; then
    for model in gru transformer; do
      step "feed-$model" "$PYTHON" tests/harness/ddp_trainer.py --world-size 1 --device "$DEVICE" \
        --workers 2 --model $model --attention "${attention[0]}" --epochs 1 "${quick[@]}"
    done
  fi
  llm=("$PYTHON" benches/llm_tokens.py --device "$DEVICE")
  [[ $DEVICE == cpu ]] && llm+=(--quick --ways sdpa,sdpa-loop,padded)
  [[ $benches == *" llm "* ]] && step llm "${llm[@]}"
  mask=("$PYTHON" benches/block_mask.py --device "$DEVICE" --t-max 4096 8192 --compiled)
  [[ $DEVICE == cpu ]] && mask=("$PYTHON" benches/block_mask.py --device cpu --t-max 256)
  [[ $benches == *" mask "* ]] && step mask "${mask[@]}"
  unset LIMIT
fi

echo
echo "== report (tests/gpu/run.sh on $DEVICE)"
cat "$LOGS/device.txt"
printf '%s\n' "${REPORT[@]}"
for name in ops loader attention transformer trainer bench epoch feed-gru feed-transformer llm mask; do
  [[ -f "$LOGS/$name.log" ]] || continue
  echo "-- $name"
  case $name in
    ops|attention) tail -n 1 "$LOGS/$name.log" ;;
    transformer) tail -n 2 "$LOGS/$name.log" ;;
    trainer) grep -v $'\r' "$LOGS/$name.log" | tail -n 4 ;;
    feed-*) grep '^epoch' "$LOGS/$name.log" ;;  # the trainer's line: its loader wait
    *) cat "$LOGS/$name.log" ;;
  esac
done
exit $FAILED
