#!/bin/bash
# One run on one H200: the stability proof of the timed checks. Builds nccl-tests from
# source against torch's NCCL, times its all_reduce_perf once (the small-message reference, -N 5),
# then runs the preflight RUNS (20) times back to back, healthy, and RUNS times with the injected
# slowdown (PREFLIGHT_TEST_DELAY_US = 2 x bound x nccl-tests' 1 KiB out-of-place eager time, so
# the delay alone puts the ratio at twice the bound). Every record is kept (two tar.gz files) and
# summary.txt lists each run's verdicts and statistics. At most 8 files under $OUT (the output
# folder). Run from a folder holding preflight.py and nccl-tests/.
# preflight.py: the single file these samples were made with (git show
# 1dfbbd8:gpu_checks/preflight.py); the package runs as -m preflight (device_package.sh).
# GPU settings are never changed; NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
RUNS=${RUNS:-20}
REPEATS=${REPEATS:-5}
T0=$(date +%s.%N)
env_txt=$OUT/env.txt
{ date -u; uname -r; nvidia-smi; which nvcc && nvcc --version | tail -2
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
export LD_LIBRARY_PATH=$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}
nt=$OUT/nccl-tests.txt
: > "$nt"
for g in 0 1; do
  echo "### all_reduce_perf -b 1K -e 1M -f 2 -g 1 -w 5 -n 20 -G $g -N 5" >> "$nt"
  /tmp/nt/all_reduce_perf -b 1K -e 1M -f 2 -g 1 -w 5 -n 20 -G $g -N 5 >> "$nt" 2>&1
done
DELAY=$(python3 - "$nt" <<'PY'
import sys, importlib.util
spec = importlib.util.spec_from_file_location("pf", "preflight.py"); pf = importlib.util.module_from_spec(spec)
log = sys.argv[1]; sys.argv = ["pf"]; spec.loader.exec_module(pf)
ref = pf.parse_nccl_tests(open(log).read())["eager"][1024]["out_of_place_us"]
print(round(2 * 1.5 * ref, 2))
PY
)
echo "injected delay per call: ${DELAY} us (2 x bound 1.5 x nccl-tests 1 KiB out-of-place eager)" | tee -a "$env_txt"
mkdir -p /tmp/healthy /tmp/slowed
for set in ${ORDER:-healthy slowed}; do
  delay=""; [ "$set" = slowed ] && delay=$DELAY
  for i in $(seq -w 1 "$RUNS"); do
    if [ "$(python3 -c "print(int($(date +%s.%N)-$T0))")" -gt "${BUDGET_S:-530}" ]; then
      echo "SKIPPED the rest of $set: past ${BUDGET_S:-530} s" >> "$env_txt"; break; fi
    S=$(date +%s.%N)
    env ${delay:+PREFLIGHT_TEST_DELAY_US=$delay} python3 preflight.py --json /tmp/$set/run$i.json \
      --expect-model H200 --expect-gpus 1 --min-memory-gib 135 --repeats "$REPEATS" \
      --nccl-tests-log "$nt" > /tmp/$set/run$i.log 2>&1
    echo "$set run$i delay=${delay}us rc=$? $(python3 -c "print(round($(date +%s.%N)-$S,1))") s" >> "$env_txt"
  done
done
tar -C /tmp -czf "$OUT/healthy.tar.gz" healthy
tar -C /tmp -czf "$OUT/slowed.tar.gz" slowed
python3 - /tmp/healthy /tmp/slowed > "$OUT/summary.txt" <<'PY'
import json, sys, glob, os
def f3(x, d=3):
    return "-" if x is None else f"{x:.{d}f}"
for folder in sys.argv[1:]:
    print(f"## {os.path.basename(folder)}")
    for f in sorted(glob.glob(folder + "/run*.json")):
        r = json.load(open(f))
        if r.get("status") == "ERROR" and not r.get("checks"):
            print(os.path.basename(f), "ERROR", r.get("error")); continue
        c = {x["name"]: x for x in r["checks"]}
        sm = c.get("small-message-time", {}); d = sm.get("data", {})
        worst = max(d.get("per_ratio", []), key=lambda p: p.get("statistic") or 0, default={})
        mr = c.get("matmul-rate", {}).get("data", {}).get("per_rank", [{}])[0]
        ck = c.get("nvml-clock-events", {})
        print(f"{os.path.basename(f)} record={r['status']} small-message-time={sm.get('status')}"
              f"/{d.get('band')} worst={worst.get('ratio')} median={f3(worst.get('statistic'))} "
              f"interval=[{f3(worst.get('low'))}, {f3(worst.get('high'))}] cycles="
              + ",".join(f"{x:.2f}" for x in worst.get("samples", []))
              + f" matmul-rate={c.get('matmul-rate', {}).get('status')}/{mr.get('band')} "
              f"median={f3(mr.get('statistic'), 1)} [{f3(mr.get('low'), 1)}, {f3(mr.get('high'), 1)}]"
              f" clock={ck.get('status')} wall={r.get('wall_s')}")
PY
echo "whole script $(python3 -c "print(round($(date +%s.%N)-$T0,1))") s" | tee -a "$env_txt"
cat "$OUT/summary.txt"; tail -3 /tmp/healthy/run01.log; grep -A12 "^timed checks" /tmp/slowed/run01.log | cut -c1-300
