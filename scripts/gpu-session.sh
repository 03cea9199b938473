#!/usr/bin/env bash
# One call on a remote GPU machine with no network (the dev team's device runs): install carried
# wheels, build in place, then run the requested stages, writing logs under $OUT (or ./gpu-out).
#   scripts/gpu-session.sh test            GPU suite (JUnit + log)
#   scripts/gpu-session.sh bench           quick benchmarks of every family + launch overhead
#                                          + host cost per op call (spio bench overhead)
#   scripts/gpu-session.sh e2e             timm training steps with/without spio, and the
#                                          per-layer profile (needs timm, in the device image)
#   scripts/gpu-session.sh tune MINUTES    collect samples for every family, train, eval
#                                          (MINUTES per family: 6 families, plus compiles)
#   scripts/gpu-session.sh tune-conv MINUTES   after a conv kernel change: collect the three conv
#                                          families afresh (MINUTES each, active sampling), sweep
#                                          the RegNet layers (the yardstick), score the shipped
#                                          models on it and the shipping recipe leave-one-layer-out
#   scripts/gpu-session.sh sweep           every conv2d_gw8 fprop/dgrad config at the 3x3 and 7x7 points
#   scripts/gpu-session.sh select-rules    re-time the picks of selection rules (the twenty-sixth
#                                          session's comparison): the layernorm families' at small
#                                          M (<= 4096 rows) as selected, at the layer, at 1024 /
#                                          16384 / 2**17 rows and at M's bucket; conv fprop/dgrad's
#                                          at N 128-256 ranked at 1 and 8 images (the config of a
#                                          first call, once shared) and as selected; wgrad's at N
#                                          >= 128 at 64 images and at the bucket capped at 256 and
#                                          1024 (benchmarks/plan_select_rule.py; needs the xgboost
#                                          wheel in .whl)
#   scripts/gpu-session.sh multi           on a 2-GPU machine: the two-GPU tests (DDP, FSDP2, one
#                                          disk cache, two threads) and DDP scaling (needs timm)
#   scripts/gpu-session.sh hopper          the Hopper blocks and kernel: TMA, wgmma and mbarrier
#                                          tests, the sm_90a matmul test, and its benchmark
#                                          against cuBLAS and the mma.sync kernel (quick)
# Stages combine: scripts/gpu-session.sh test bench
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 SPIO_CACHE_DIR="${SPIO_CACHE_DIR:-/tmp/spio-cache}" SPIO_PROGRESS=0
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q -e . --no-build-isolation --no-deps >"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
while [ $# -gt 0 ]; do
  case "$1" in
    test)
      # The timing test alone first (no -n: one process): other processes' kernels on the same
      # GPU hide host gaps (it skips under xdist and says so).
      python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_timing.py 2>&1 \
          | tee "$OUT/test-timing.log" | tail -15
      python3 -m pytest -q -m "gpu and not slow" -n 4 -p no:cacheprovider --timeout 600 \
          --ignore tests/gpu/test_timing.py --junitxml="$OUT/junit.xml" tests \
          ${SPIO_PYTEST_ARGS:-} 2>&1 | tee "$OUT/test.log" | tail -60
      ;;
    multi)
      # NVLink multicast off: it can take the machine's GPUs out of service for others.
      export NCCL_NVLS_ENABLE=0
      python3 -m pytest -q -p no:cacheprovider --timeout 900 --junitxml="$OUT/junit-multi.xml" \
          tests/gpu/test_distributed.py tests/gpu/test_launch.py \
          tests/gpu/functional/test_call_path.py 2>&1 | tee "$OUT/test-multi.log" | tail -30
      python3 benchmarks/bench_ddp.py --csv "$OUT/ddp.csv" 2>&1 | tee "$OUT/ddp.log"
      ;;
    hopper)
      python3 -m pytest -q -p no:cacheprovider --timeout 600 tests/gpu/test_tma.py \
          tests/gpu/test_wgmma.py tests/gpu/test_mbarrier.py \
          tests/gpu/kernels/test_matmul_sm90.py 2>&1 | tee "$OUT/test-hopper.log" | tail -30
      python3 benchmarks/bench_matmul_sm90.py --quick --csv "$OUT/matmul-sm90.csv" 2>&1 \
          | tee "$OUT/matmul-sm90.log"
      # The op at decode shapes, plain vs split-K, PDL on/off: host and as-called time per call.
      python3 benchmarks/matmul_split_ab.py 2>&1 | tee "$OUT/matmul-split-ab.log"
      ;;
    tune-conv)
      shift; minutes="$1"
      for k in conv2d_gw8_fprop conv2d_gw8_dgrad conv2d_gw8_wgrad; do
        python3 -m spio.cli.main tune collect --kernel "$k" --minutes "$minutes" --seed 10 \
            --max-configs 48 --active --out "$OUT/$k.jsonl" 2>&1 | tail -3
      done
      python3 benchmarks/sweep_conv2d_gw8.py --csv "$OUT/yardstick.csv" --points \
          "24,112,3,256,2;56,56,3,256,2;152,28,3,256,2;368,14,3,256,2;48,112,3,128,2;104,56,3,128,2;208,28,3,128,2;440,14,3,128,2;152,14,3,256;368,7,3,256;104,28,3,128;440,7,3,128" \
          > "$OUT/yardstick.log" 2>&1
      # The shipped models on the sweep (stale after a kernel change), then the recipe that
      # ships, scored honestly: fresh + shipped datasets + the other layers' sweep rows (--loo).
      python3 benchmarks/yardstick_conv2d_gw8.py --csv "$OUT/yardstick.csv" 2>&1 | grep layers
      data=()
      for k in conv2d_gw8_fprop conv2d_gw8_dgrad conv2d_gw8_wgrad; do
        data+=(--data "$OUT/$k.jsonl" --data "benchmarks/data/tune/$k.jsonl.gz")
      done
      python3 benchmarks/yardstick_conv2d_gw8.py --csv "$OUT/yardstick.csv" --loo "${data[@]}" \
          2>&1 | grep layers
      # To ship (on the host): append $OUT/<family>.jsonl (gzipped: `spio.tune.dataset.append` or `gzip -c >>`) and the sweep's rows
      # (yardstick_conv2d_gw8.py --csv $OUT/yardstick.csv --export DIR) to
      # benchmarks/data/tune/<family>.jsonl.gz, `spio tune train --kernel <family> --data
      # benchmarks/data/tune/<family>.jsonl.gz --ship`, and keep the CSV in benchmarks/data/yardstick.
      ;;
    select-rules)
      plans=()
      for k in layernorm_2d_fwd layernorm_2d_bwd; do
        python3 benchmarks/plan_select_rule.py --kernel "$k" --max-size 4096 --at 1024 \
            --at 16384 --at 131072 --shapes 40 --out "$OUT/$k" | tail -5
        plans+=("$OUT/$k"_*.json)
      done
      for k in conv2d_gw8_fprop conv2d_gw8_dgrad; do
        python3 benchmarks/plan_select_rule.py --kernel "$k" --min-size 128 --max-size 256 \
            --at 1 --at 8 --shapes 30 --out "$OUT/$k" | tail -4
        plans+=("$OUT/$k"_*.json)
      done
      python3 benchmarks/plan_select_rule.py --kernel conv2d_gw8_wgrad --min-size 128 \
          --max-size 1024 --at 64 --bucket 256 --bucket 1024 --shapes 40 \
          --out "$OUT/conv2d_gw8_wgrad" | tail -5
      plans+=("$OUT/conv2d_gw8_wgrad"_*.json)
      python3 benchmarks/retime_heldout.py merge "${plans[@]}" --out "$OUT/select-rules.json"
      python3 benchmarks/retime_heldout.py time "$OUT/select-rules.json" \
          --csv "$OUT/select-rules.csv" --rounds 7 | tail -2
      for plan in "${plans[@]}"; do
        echo "== $plan"
        python3 benchmarks/retime_heldout.py score "$plan" "$OUT/select-rules.csv" | sed -n 2,4p
      done
      ;;
    sweep)
      python3 benchmarks/sweep_conv2d_gw8.py --kernel fprop,dgrad --csv "$OUT/sweep.csv" 2>&1 \
          | tee "$OUT/sweep.log"
      ;;
    bench)
      python3 benchmarks/launch_overhead.py 2>&1 | tee "$OUT/launch.log"
      for f in conv2d-gw8 layernorm2d matmul; do
        SPIO_ASSERT_NO_COMPILE=0 python3 -m spio.cli.main bench --quick "$f" 2>&1 | tee "$OUT/bench-$f.log"
      done
      python3 -m spio.cli.main bench overhead --csv "$OUT/overhead.csv" 2>&1 | tee "$OUT/overhead.log"
      ;;
    e2e)
      python3 -m spio.cli.main bench e2e --csv "$OUT/e2e.csv" 2>&1 | tee "$OUT/e2e.log"
      python3 -m spio.cli.main bench e2e --layers --csv "$OUT/layers.csv" 2>&1 | tee "$OUT/layers.log"
      ;;
    tune)
      shift; minutes="$1"
      python3 -m spio.cli.main tune collect --kernel all --minutes "$minutes" 2>&1 | tail -20
      python3 -m spio.cli.main tune eval --kernel all 2>&1 | tee "$OUT/tune-eval.log"
      python3 -m spio.cli.main tune train --kernel all --out "$OUT/models" 2>&1 | tail -20
      cp "$SPIO_CACHE_DIR"/tune/*.jsonl "$OUT/" 2>/dev/null
      ;;
    *) echo "unknown stage $1"; exit 2 ;;
  esac
  shift
done
