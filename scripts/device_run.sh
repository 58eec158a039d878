#!/usr/bin/env bash
# One call on a GPU machine: build, then the named steps; full logs under $OUT,
# a short summary printed last.
#
#   scripts/device_run.sh tests sanitize "bench --dtypes float64 --widths 1-64"
#
# Steps: tests [ARGS] (pytest -m gpu; repeatable; TEST_PROCESSES=N: in N processes at once,
# each a --shard of ARGS' tests, which may name a --shard of their own), suite (the whole
# pytest suite on the GPU), sanitize (compute-sanitizer on a kernel sample), probe (scripts/probe_bandwidth.py:
# the DRAM bandwidth of streaming access patterns, timed per launch), clocks SHAPES
# (scripts/clocks_under_load.py: SM clock and power while each shape runs for seconds), bench ARGS (repeatable),
# compare ARGS (repeatable; scripts/compare_configs.py), tune ARGS, profile SHAPES,
# profile_model SHAPES and profile_xla SHAPES (Nsight Compute, with the pipes' utilization and the
# instruction mix; scripts/profile_kernels.py), durations
# SHAPES (each of our kernels' time on the GPU alone, by Nsight Compute), jit_timing
# SHAPES (scripts/jit_timing.py: the bench's timing against plain jitted calls), gram_timing
# SHAPES (scripts/gram_timing.py: Gram matrices against two operands), batched
# SHAPES [--k K] [--batch B] (scripts/batched_timing.py: atb and ab under vmap), fresh ARGS
# (issue 4's check as its reader makes it: `pip install .`, a wheel built in a build directory
# of its own, then the bench ARGS run outside the tree with an empty kernel cache; the
# editable install is put back after).
# A JAX_TSMM_CACHE_DIR set by the caller is kept: a carried kernel cache, e.g. from
# `python -m jax_tsmm.tune --compile-only` here (docs/performance.md, Method); a carried
# .tsmm_cache.tar.xz (such a cache packed by xz, about a tenth of its size) is unpacked into it.
# DEADLINE=S, the call's time limit in seconds: every step ends DEADLINE_MARGIN seconds
# before it (rc=124 in the summary; by SIGINT, on which pytest still reports the failures
# so far and writes its JUnit report: a call's 2 failures went unexplained, 2026-12-01),
# a tune step at TUNE_SECONDS if that comes first
# (S1,S2,...: the first tune step's, the second's, the last for the rest), so that the
# logs and the database are copied out; steps that would start later are skipped.
# Without it, a call cut off by the device's limit returns no logs and no database
# (twenty-ninth round; fifty-seventh: a tests step ran 10 minutes).
# REQUIRE_GPU=NAME ends the call before the build unless the GPU's name contains NAME:
# a call for an H200 may be served by an H100, where a `tune --device-db` would write
# the H100's own file instead (thirty-seventh round).
set -uo pipefail
OUT=${OUT:-/tmp/jax_tsmm_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
export JAX_TSMM_CACHE_DIR=${JAX_TSMM_CACHE_DIR:-/tmp/jax_tsmm_cache}
summary="$OUT/summary.txt"
: > "$summary"

DEADLINE_MARGIN=20  # the archive and the copy out
seconds_left() { echo $(( ${DEADLINE:-1000000} - DEADLINE_MARGIN - SECONDS )); }

step() {  # step NAME COMMAND...: run with a log, record status and seconds; cut off at DEADLINE
  local name=$1; shift
  local start=$SECONDS
  local cap=()
  [ -n "${DEADLINE:-}" ] && cap=(timeout -s INT -k 5 "$(seconds_left)")
  "${cap[@]}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc, $((SECONDS - start)) s" >> "$summary"
  return $rc
}

run_bench() {  # run_bench NAME ARGS...: the bench, one JSON, Markdown and PNG, and its table in the summary
  # (of the rows it timed where the call's limit cut it off), both from the working directory
  local name=$1; shift
  step "$name" python3 -m jax_tsmm.bench "$@" --json "$OUT/$name.json" --plot "$OUT/$name.png"
  [ -f "$OUT/$name.json" ] && python3 -m jax_tsmm.bench --summary "$OUT/$name.json" >> "$summary"
}

failed_tests() {  # failed_tests LOG: pytest's lines naming its failed tests (at most 10), for the summary
  grep -E '^(FAILED|ERROR) ' "$1" | head -10 | cut -c1-200
}

test_processes() {  # test_processes NAME ARGS...: pytest's --shard i/N of them in N=TEST_PROCESSES processes at once,
  # one log and one JUnit report each: the tests spend most of their time on the CPU (drawing operands, numpy's
  # reference, compiling), where one process took 2.7 s a test of the machine's 16 cores (2026-12-01). JAX does not
  # preallocate and each process grows as its tests need, to 0.75 of the GPU: test_64_bit_indexing holds
  # over 10 GB at once (its 9.1 GB operand, float64 slices of it), near a fixed eighth of an H200's memory
  # (at 0.9 / 8 it failed, unexplained, 2026-12-01); the others a few GB.
  local name=$1; shift
  local start=$SECONDS n=$TEST_PROCESSES rc=0 pids=() i
  for i in $(seq 1 "$n"); do
    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.75 \
      timeout -s INT -k 5 "$(seconds_left)" python3 -m pytest -m gpu -q --maxfail=25 -p no:cacheprovider \
      --junitxml="$OUT/$name.$i.xml" "$@" --shard "$i/$n" > "$OUT/$name.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}"; local code=$?; [ $code -ne 0 ] && rc=$code
    local log="$OUT/$name.$((i + 1)).log" counts
    counts=$(grep -Eo '[0-9]+ (passed|failed|skipped|errors?)' "$log" | paste -sd, -)
    [ -z "$counts" ] && counts="cut off after $(grep -E '^[.FEsx]+( +\[ *[0-9]+%\])?$' "$log" | tr -cd '.FEsx' | wc -c) tests"
    echo "$name $((i + 1))/$n: $counts" >> "$summary"
    failed_tests "$log" >> "$summary"
  done
  cat "$OUT/$name".*.log > "$OUT/$name.log"
  echo "$name: rc=$rc, $((SECONDS - start)) s, $n processes" >> "$summary"
  return $rc
}

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
if [[ -n ${REQUIRE_GPU:-} && $gpu_name != *"$REQUIRE_GPU"* ]]; then
  echo "REQUIRE_GPU=$REQUIRE_GPU: this GPU is $gpu_name; nothing run"; exit 3
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader >> "$summary"
[ -f .tsmm_cache.tar.xz ] && mkdir -p "$JAX_TSMM_CACHE_DIR" && step unpack tar xJf .tsmm_cache.tar.xz -C "$JAX_TSMM_CACHE_DIR"
step build python3 -m pip install --no-build-isolation --no-deps -v -e . || { tail -40 "$OUT/build.log"; cat "$summary"; exit 1; }
benches=0 tunes=0 compares=0 test_steps=0
for item in "$@"; do  # a step's ARGS may quote: "tune --only-stale 'NVIDIA H200'"
  read -r name args <<< "$item"
  if [ "$(seconds_left)" -le 0 ]; then echo "$name: skipped, DEADLINE" >> "$summary"; continue; fi
  args=${args//'$OUT'/$OUT}  # a step may name $OUT unexpanded (quoted on the way here)
  case $name in
    tests)  # tests, tests2, ...: "tests tests/test_gpu.py -k 'tensor_core or update'"
      test_steps=$((test_steps + 1)); [ $test_steps -gt 1 ] && name=tests$test_steps
      if [ "${TEST_PROCESSES:-1}" -gt 1 ]; then eval "test_processes $name $args"
      else eval "step $name python3 -m pytest -m gpu -q --maxfail=25 -p no:cacheprovider --junitxml=$OUT/$name.xml $args"
        failed_tests "$OUT/$name.log" >> "$summary"; fi ;;
    suite) step suite python3 -m pytest -q -p no:cacheprovider ;;
    sanitize) step sanitize scripts/sanitize.sh ;;
    probe) step probe python3 scripts/probe_bandwidth.py --json "$OUT/probe.json" ;;
    clocks) eval "step clocks python3 scripts/clocks_under_load.py $args --json $OUT/clocks.json" ;;
    bench)  # bench, bench2, ...: one JSON, Markdown and PNG each
      benches=$((benches + 1)); [ $benches -gt 1 ] && name=bench$benches
      eval "run_bench $name $args" ;;
    fresh)  # outside the tree: there the source tree's jax_tsmm (no codegen, no extension) would shadow the wheel
      fresh=$(mktemp -d)
      step fresh_install python3 -m pip install --no-build-isolation --no-deps -v -C build-dir="$fresh/build" . &&
        (cd "$fresh" && eval "JAX_TSMM_CACHE_DIR=$fresh/cache run_bench fresh $args")
      step reinstall python3 -m pip install --no-build-isolation --no-deps -e . ;;
    jit_timing) eval "step jit_timing python3 scripts/jit_timing.py $args --json $OUT/jit_timing.json" ;;
    gram_timing) eval "step gram_timing python3 scripts/gram_timing.py $args --json $OUT/gram_timing.json" ;;
    batched) eval "step batched python3 scripts/batched_timing.py $args --json $OUT/batched.json" ;;
    compare)  # compare, compare2, ...: one JSON each
      compares=$((compares + 1)); [ $compares -gt 1 ] && name=compare$compares
      eval "step $name python3 scripts/compare_configs.py $args --json $OUT/$name.json" ;;
    durations)  # SHAPES as op:dtype:M:N:K; our kernels only (XLA's autotuner would run under ncu too)
      step durations bash -c "for s in $args; do
        echo \"== \$s\"; XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --clock-control none --kernel-name regex:tsmm_ --metrics gpu__time_duration.sum \
          python3 scripts/profile_kernels.py --repeat 3 \$s 2>&1 | grep -E 'tsmm_|duration'
      done" ;;
    profile|profile_model|profile_xla)  # Nsight Compute, one process per op:dtype:M:N (dispatch's kernels, the model's, or XLA's dot);
      # JAX does not preallocate there: ncu's replay saves and restores the device memory a kernel writes
      filter=regex:tsmm_; flags=""
      [ $name = profile_xla ] && { filter="regex:gemm|gemv|dot|cutlass|xmma"; flags=--xla; }
      [ $name = profile_model ] && flags=--model
      for shape in $args; do
        step "${name}_${shape//[:@=,]/_}" env XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 ncu --clock-control none --kernel-name "$filter" \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
          --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
          --section InstructionStats --print-details all \
          python3 scripts/profile_kernels.py $flags $shape
      done
      name=${name}_${shape//[:@=,]/_} ;;
    tune)  # tune, tune2, ...: the databases after the latest are copied out (8 files come back at most)
      tunes=$((tunes + 1)); [ $tunes -gt 1 ] && name=tune$tunes
      # TUNE_SECONDS (and DEADLINE) bound each tune (it saves after every problem), so later steps still run.
      IFS=, read -ra tune_limits <<< "${TUNE_SECONDS:-540}"
      limit=${tune_limits[tunes - 1]:-${tune_limits[-1]}}; [ "$(seconds_left)" -lt "$limit" ] && limit=$(seconds_left)
      eval "step $name timeout $limit python3 -m jax_tsmm.tune $args"
      for db in jax_tsmm/tuning/sm_90*.json; do cp "$db" "$OUT/tuned-$(basename "$db")"; done ;;
    *) echo "unknown step $name" >> "$summary"; continue ;;
  esac
  tail -25 "$OUT/$name.log"
done
# The device tool returns at most 8 files: logs, tables and plots travel in one archive.
(cd "$OUT" && tar czf logs.tgz --remove-files $(ls | grep -v -e '\.json$' -e '^summary.txt$'))
echo "=== summary"
cat "$summary"
