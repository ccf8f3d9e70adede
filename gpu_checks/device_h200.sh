#!/bin/bash
# One run on a GPU machine: build nccl-tests from source against the NCCL that
# torch uses, time its all_reduce_perf (eager and CUDA graph), then run the preflight beside it
# (healthy, then with both fault hooks). Writes at most 8 files under $OUT (the output folder).
# Run from a folder holding preflight.py, samples/ and nccl-tests/.
# preflight.py: the single file these samples were made with (git show
# 1dfbbd8:gpu_checks/preflight.py); the package runs as -m preflight (device_package.sh).
set -u
NPROC=${NPROC:-1}
TAG=${TAG:-h200x1}
CYCLES=${CYCLES:-3}  # nccl-tests -N: small sizes run 3 times, the lowest kept (as --small-repeats)
T0=$(date +%s.%N)
env_txt=$OUT/$TAG-env.txt
{ date -u; uname -r; nvidia-smi; nvidia-smi topo -m; which nvcc && nvcc --version | tail -2
  python3 -m pip show torch nvidia-ml-py nvidia-nccl-cu13 2>/dev/null | grep -E '^(Name|Version)'
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|CUDA_VISIBLE)' | sort; } > "$env_txt" 2>&1
NCCL_DIR=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])")
mkdir -p /tmp/ncclhome/lib
ln -sfn "$NCCL_DIR/include" /tmp/ncclhome/include
ln -sf "$NCCL_DIR/lib/libnccl.so.2" /tmp/ncclhome/lib/libnccl.so
CUDA_HOME=$(dirname "$(dirname "$(which nvcc)")")
B0=$(date +%s)
( cd nccl-tests && make -j16 MPI=0 NCCL_HOME=/tmp/ncclhome CUDA_HOME="$CUDA_HOME" \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nt src.build ) \
    > /tmp/build.log 2>&1
echo "nccl-tests build: rc=$? in $(( $(date +%s) - B0 )) s" | tee -a "$env_txt"
tail -5 /tmp/build.log >> "$env_txt"
export LD_LIBRARY_PATH=$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}
nt=$OUT/$TAG-nccl-tests.txt
: > "$nt"
if [ -x /tmp/nt/all_reduce_perf ]; then
  for g in 0 1; do
    echo "### all_reduce_perf -b 1K -e 1M -f 2 -g $NPROC -w 5 -n 20 -G $g -N $CYCLES" >> "$nt"
    /tmp/nt/all_reduce_perf -b 1K -e 1M -f 2 -g "$NPROC" -w 5 -n 20 -G $g -N "$CYCLES" \
      > /tmp/nt-G$g.txt 2>&1
    cat /tmp/nt-G$g.txt >> "$nt"
  done
  echo "### all_reduce_perf -b 64M -e 1G -f 2 -g $NPROC -w 5 -n 20" >> "$nt"
  /tmp/nt/all_reduce_perf -b 64M -e 1G -f 2 -g "$NPROC" -w 5 -n 20 >> "$nt" 2>&1
fi
P0=$(date +%s.%N)
python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" preflight.py \
  --json "$OUT/$TAG.json" --expect-model H200 --expect-gpus "$NPROC" --min-memory-gib 135 \
  --nccl-tests-log "$nt" > "$OUT/$TAG.log" 2>&1
echo "preflight rc=$? command $(python3 -c "print(round($(date +%s.%N)-$P0,1))") s" | tee -a "$OUT/$TAG.log"
python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" preflight.py \
  --json "$OUT/$TAG-run2.json" --expect-model H200 --expect-gpus "$NPROC" --min-memory-gib 135 \
  --nccl-tests-log "$nt" > /tmp/run2.log 2>&1
echo "run2 rc=$?" | tee -a "$env_txt"
if [ -d probes ]; then
  for args in "" "sm_90 sm_100 driver=13.0" "sm_80" "sm_90 driver=12.4"; do
    echo "### probes/torch_arch.py $args" >> "$env_txt"
    (cd probes && python3 torch_arch.py $args) >> "$env_txt" 2>&1
  done
fi
F=$((NPROC-1))
PREFLIGHT_TEST_NAN=0 PREFLIGHT_TEST_WRONG_RANK=$F python3 -m torch.distributed.run --standalone \
  --nproc-per-node "$NPROC" preflight.py --json "$OUT/$TAG-faults.json" --sizes 1K,64M \
  > "$OUT/$TAG-faults.log" 2>&1
echo "faults rc=$? (expect 1)" | tee -a "$OUT/$TAG-faults.log"
echo "whole script $(python3 -c "print(round($(date +%s.%N)-$T0,1))") s" | tee -a "$env_txt"
tail -45 "$OUT/$TAG.log"; grep -A3 "^### probes" "$env_txt" | cut -c1-400; grep -E "^ +(1024|2048|4096|1048576) " "$nt" | head; grep -E "FAIL|PASS" "$OUT/$TAG-faults.log" | head
