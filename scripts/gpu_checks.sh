#!/usr/bin/env bash
# Runs dtrain's GPU checks on a GPU machine from what scripts/pack_for_gpu.sh packed, each
# step's log under LOG_DIR:
#
#   bash scripts/gpu_checks.sh PACK.tar.gz LOG_DIR STEP...
#
# Steps: doctor (dtrain doctor, nvidia-smi), tests (every test that needs a GPU: ctest, in
# parallel), bench (bench/step_vs_pytorch_gpu.sh; BENCH_FLAGS passes it flags), profile (one timed
# step of gpt2-124m and llama3.2-1b under ncu: the largest kernel shares), comm (dtrain bench comm
# --device cuda: NCCL at one rank, MPI's staged CUDA buffers at two up to 64 MiB, and NCCL's
# refusal of two ranks on one GPU where there is one), ep (dtrain bench ep --device cuda: two
# ranks' experts on one GPU, the all-to-all bytes checked), fp8 (dtrain bench step --fp8: each FP8
# recipe against bf16 on gpt2-774m and llama3.2-1b; BENCH_FLAGS as for bench), busy (a llama3.2-1b step benchmark with the
# GPU's SM clock, power and utilization sampled every 100 ms: whether the time a step spends
# beyond its kernels' sum is idle or slower clocks), ckpt (bench/checkpoint_stall.sh on the GPU:
# the stall per save, synchronous against asynchronous with pinned staging, on gpt2-124m; needs
# runs/kjv, which the run's carry must bring). The machine needs the NVIDIA driver, CUDA's
# libraries (the CUDA toolkit's, or those PyTorch's wheels carry) and, for bench, PyTorch.
set -uo pipefail
cd "$(dirname "$0")/.."
pack=$(realpath "$1") logs=$(realpath -m "$2")
shift 2
mkdir -p "$logs" build-gpu build
tar xzf "$pack" -C build-gpu && tar xf build-gpu/tests.tar -C build-gpu
# ctest's files name the directory the build was made in: make that path lead here.
built=$(sed -n 's/^# Build directory: //p' build-gpu/CTestTestfile.cmake)
[ "$(realpath -m "$built")" = "$PWD/build-gpu" ] || { mkdir -p "$(dirname "$(dirname "$built")")"; ln -sfn "$PWD" "$(dirname "$built")"; }
# OpenMPI where the machine has none (its files at their Debian paths; nothing existing replaced).
if ! command -v mpiexec >/dev/null; then
  tar xf build-gpu/mpi.tar -C / --skip-old-files && ldconfig
  ln -sf orterun /usr/bin/mpiexec && ln -sf orterun /usr/bin/mpirun
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
cuda_libs=$(ls -d /usr/local/cuda/lib64 "$site"/nvidia/*/lib 2>/dev/null | paste -sd:)
dtrain_env=(env "LD_LIBRARY_PATH=$PWD/build-gpu/lib:$cuda_libs")
printf '#!/bin/sh\nexec %s %q "$@"\n' "$(printf '%q ' "${dtrain_env[@]}")" "$PWD/build-gpu/dtrain" > build/dtrain
chmod +x build/dtrain
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)

profile() {  # name dtrain-bench-step-flags...
  local name=$1
  shift
  "${dtrain_env[@]}" "$ncu" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
    --print-units base build-gpu/dtrain bench step --device cuda "$@" --steps 1 --warmup 2 > "$logs/ncu-$name.csv"
  python3 - "$logs/ncu-$name.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(line for line in open(sys.argv[1]) if line.startswith('"'))]
head, rows = rows[0], rows[1:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, by = 0.0, collections.Counter()
for r in rows:
    ns = float(r[value].replace(",", ""))
    total += ns
    by[r[name][:90]] += ns
print(f"{sys.argv[1]}: {len(rows)} kernels, {total / 1e6:.2f} ms of kernel time in the step")
for k, ns in by.most_common(12):
    print(f"  {100 * ns / total:5.1f}%  {ns / 1e6:8.3f} ms  {k}")
PY
}

for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    doctor)
      { nvidia-smi; build/dtrain doctor; } 2>&1 | tee "$logs/doctor.log" ;;
    tests)
      "${dtrain_env[@]}" ctest --test-dir build-gpu -R 'Cuda|Cudnn|OnTheGpu|Gpu|Nccl|^Device|StreamEvent|Doctor|BenchComm|Allocator' \
        --parallel 8 --timeout 300 --output-on-failure > "$logs/tests.log" 2>&1
      tail -25 "$logs/tests.log" ;;
    bench)
      bash bench/step_vs_pytorch_gpu.sh ${BENCH_FLAGS:-} > "$logs/bench.log" 2>&1
      grep -E '^result|Error|error' "$logs/bench.log" ;;
    profile)
      profile gpt2-124m --model gpt2-124m --seq 1024 --batch 32 --precision bf16 2>&1 | tee "$logs/profile.log"
      profile llama3.2-1b --model llama3.2-1b --seq 2048 --batch 8 --precision bf16 2>&1 | tee -a "$logs/profile.log" ;;
    comm)
      gpus=$(nvidia-smi -L | wc -l)
      { mpiexec --allow-run-as-root -n 1 build/dtrain bench comm --device cuda --backend nccl
        mpiexec --allow-run-as-root -n 2 build/dtrain bench comm --device cuda --max-bytes 64M --seconds 0.05
        if [ "$gpus" -lt 2 ]; then
          mpiexec --allow-run-as-root -n 2 build/dtrain bench comm --device cuda --backend nccl --max-bytes 1K
        fi; } > "$logs/comm.log" 2>&1
      tail -30 "$logs/comm.log" ;;
    ep)
      # Expert parallelism on the GPU: two ranks sharing it, the rows through the MPI backend; the
      # bench fails on any byte the routing does not imply.
      mpiexec --allow-run-as-root -n 2 build/dtrain bench ep --device cuda --model moe-tiny --max-seq-len 1024 \
        --seq 1024 --batch 4 --steps 3 > "$logs/ep.log" 2>&1
      tail -8 "$logs/ep.log" ;;
    fp8)
      # FP8 against bf16 on the issue's two shapes, each recipe, in one run: the step's median and
      # its ratio to bf16's (the goal is 1.2x).
      for shape in "--model gpt2-774m --seq 1024 --batch 16" "--model llama3.2-1b --seq 2048 --batch 8"; do
        for fp8 in none tensorwise delayed blockwise; do
          build/dtrain bench step --device cuda $shape --precision bf16 --fp8 $fp8 ${BENCH_FLAGS:-} 2>&1 |
            grep -E '^# (batch|median)|^result|rror'
        done
      done | tee "$logs/fp8.log" ;;
    busy)
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 100 > "$logs/busy.csv" &
      sampler=$!
      build/dtrain bench step --device cuda --model llama3.2-1b --seq 2048 --batch 8 --precision bf16 --steps 10 \
        --warmup 3 2>&1 | tee "$logs/busy.log"
      kill $sampler
      python3 - "$logs/busy.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1]))][1:]
busy = [r for r in rows if len(r) == 4 and float(r[3].split()[0]) > 50]
for name, i in (("SM clock MHz", 1), ("power W", 2), ("utilization %", 3)):
    v = [float(r[i].split()[0]) for r in busy]
    print(f"{name}: median {statistics.median(v):.0f}, min {min(v):.0f}, max {max(v):.0f} over {len(v)} busy samples")
PY
      ;;
    ckpt)
      DEVICE=cuda PRECISION=bf16 bash bench/checkpoint_stall.sh > "$logs/ckpt.log" 2>&1
      tail -8 "$logs/ckpt.log" ;;
    *) echo "gpu_checks.sh: unknown step $step (steps: doctor tests bench profile comm ep fp8 busy ckpt)" >&2; exit 2 ;;
  esac
done
echo "=== done $(date +%T)"
