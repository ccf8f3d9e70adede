#!/bin/bash
# One run on a GPU machine: the GPU preflight package, laid out as the Pod's
# ConfigMap mount is (DIR/mount/preflight/<module>.py, written by gpu_checks/lay_out_mount.py),
# run with `python3 -m preflight` (under torch.distributed.run, as the Pod runs it, and plainly),
# beside the single file it was split from (DIR/single/preflight.py: gpu_checks/preflight.py of
# 1dfbbd8), healthy and with both fault hooks; compare_verdicts.py prints the verdicts side by
# side (in -env.txt). Writes 8 files under $OUT. Usage: bash device_package.sh DIR (holding mount/, single/
# and compare_verdicts.py).
set -u
D=$(cd "${1:-.}" && pwd)
TAG=${TAG:-h200x1-package}
T0=$(date +%s.%N)
ARGS=(--expect-model H200 --expect-gpus 1 --min-memory-gib 135)
TR=(python3 -m torch.distributed.run --standalone --nproc-per-node 1)
env_txt=$OUT/$TAG-env.txt
{ date -u; uname -r; nvidia-smi; python3 --version
  python3 -m pip show torch nvidia-ml-py 2>/dev/null | grep -E '^(Name|Version)'
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|CUDA_VISIBLE)' | sort
  (cd "$D" && find mount single -type f | sort && sha256sum single/preflight.py mount/preflight/*.py)
} > "$env_txt" 2>&1
step() {  # label, folder, then the command; its rc and seconds go to env.txt
  local label=$1 dir=$2; shift 2
  local s; s=$(date +%s.%N)
  (cd "$D/$dir" && "$@"); local rc=$?
  echo "$label: rc=$rc in $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$env_txt"
}
step "single healthy" single "${TR[@]}" preflight.py --json "$OUT/$TAG-single.json" "${ARGS[@]}" \
  > "$OUT/$TAG-single.log" 2>&1
step "package healthy" mount "${TR[@]}" -m preflight --json "$OUT/$TAG.json" "${ARGS[@]}" \
  > "$OUT/$TAG.log" 2>&1
step "package plain" mount python3 -m preflight --json /tmp/plain.json "${ARGS[@]}" \
  > /tmp/plain.log 2>&1
export PREFLIGHT_TEST_NAN=0 PREFLIGHT_TEST_WRONG_RANK=0
step "package faults" mount "${TR[@]}" -m preflight --json "$OUT/$TAG-faults.json" --sizes 1K,64M \
  > "$OUT/$TAG-faults.log" 2>&1
step "single faults" single "${TR[@]}" preflight.py --json /tmp/single-faults.json --sizes 1K,64M \
  > /tmp/single-faults.log 2>&1
unset PREFLIGHT_TEST_NAN PREFLIGHT_TEST_WRONG_RANK
{ echo "### single faults (the old file, same hooks), log"; cat /tmp/single-faults.log; } \
  >> "$OUT/$TAG-single.log"
{ echo "### package plain (no launcher), log"; cat /tmp/plain.log; } >> "$OUT/$TAG.log"
python3 "$D/compare_verdicts.py" single="$OUT/$TAG-single.json" package="$OUT/$TAG.json" \
  package-plain=/tmp/plain.json -- single-faults=/tmp/single-faults.json \
  package-faults="$OUT/$TAG-faults.json" > /tmp/compare.txt 2>&1
echo "compare rc=$?" >> /tmp/compare.txt
{ echo "### compare_verdicts.py"; cat /tmp/compare.txt; } >> "$env_txt"
(cd /tmp && tar czf "$OUT/$TAG-extra.tar.gz" plain.json single-faults.json)
echo "whole script $(python3 -c "print(round($(date +%s.%N)-$T0,1))") s" | tee -a "$env_txt"
cat /tmp/compare.txt; head -60 "$OUT/$TAG.log"
