#!/usr/bin/env bash
# Start (EXECUTE=1) or print the inference server command. Runs inside the engine image.
# Same rules as `imagekit serve-command` (imagekit/launch/command.py); a test compares the two.
#
#   ENGINE=sglang|vllm            engine (default sglang)
#   MODEL_PATH=/models/model      model directory inside the container
#   TP=8                          tensor parallel size
#   MAX_CONTEXT=32768             context length (sglang --context-length, vllm --max-model-len)
#   MAX_REQUESTS=8                concurrent requests (sglang --max-running-requests, vllm --max-num-seqs)
#   DISABLE_PIECEWISE_CUDA_GRAPH=1  default on: append the prefill switch, PREFILL_SWITCH
#   PREFILL_SWITCH=(engine's)     its spelling for THIS image's engine, as its own parser chose
#                                 it (the serve_args probe; cluster accept passes it); unset:
#                                 sglang --cuda-graph-backend-prefill=disabled (0.5.23; older
#                                 also took --disable-piecewise-cuda-graph), vllm full CUDA
#                                 graphs for decode only
#   HOST=0.0.0.0 PORT=(30000 sglang / 8000 vllm) SERVED_MODEL_NAME=(none)
#   EXECUTE=1                     exec the server; otherwise print the command and exit 0
# Extra arguments are appended to the engine command as they are.
set -euo pipefail
ENGINE=${ENGINE:-sglang}
MODEL_PATH=${MODEL_PATH:-/models/model}
TP=${TP:-8}
MAX_CONTEXT=${MAX_CONTEXT:-32768}
MAX_REQUESTS=${MAX_REQUESTS:-8}
DISABLE_PIECEWISE_CUDA_GRAPH=${DISABLE_PIECEWISE_CUDA_GRAPH:-1}
HOST=${HOST:-0.0.0.0}
SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-}
PREFILL_SWITCH=${PREFILL_SWITCH:-}
EXECUTE=${EXECUTE:-0}

die() { echo "launch.sh: error: $*" >&2; exit 2; }
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"; }
posint TP "$TP"; posint MAX_CONTEXT "$MAX_CONTEXT"; posint MAX_REQUESTS "$MAX_REQUESTS"
[[ $MODEL_PATH == /* ]] || die "MODEL_PATH must be an absolute path, got '$MODEL_PATH'"
case "$DISABLE_PIECEWISE_CUDA_GRAPH" in 0|1) ;; *) die "DISABLE_PIECEWISE_CUDA_GRAPH must be 0 or 1";; esac
[[ -z $PREFILL_SWITCH || $PREFILL_SWITCH =~ ^--[^[:space:]]{1,300}$ ]] || die "PREFILL_SWITCH must be one --argument, got '$PREFILL_SWITCH'"
case "$ENGINE" in
  sglang)
    PORT=${PORT:-30000}
    cmd=(python3 -m sglang.launch_server --model-path "$MODEL_PATH" --tp-size "$TP"
         --context-length "$MAX_CONTEXT" --max-running-requests "$MAX_REQUESTS"
         --host "$HOST" --port "$PORT")
    [ -n "$SERVED_MODEL_NAME" ] && cmd+=(--served-model-name "$SERVED_MODEL_NAME")
    switch=--cuda-graph-backend-prefill=disabled
    ;;
  vllm)
    PORT=${PORT:-8000}
    cmd=(vllm serve "$MODEL_PATH" --tensor-parallel-size "$TP"
         --max-model-len "$MAX_CONTEXT" --max-num-seqs "$MAX_REQUESTS"
         --host "$HOST" --port "$PORT")
    [ -n "$SERVED_MODEL_NAME" ] && cmd+=(--served-model-name "$SERVED_MODEL_NAME")
    switch='--compilation-config={"cudagraph_mode":"FULL_DECODE_ONLY"}'
    ;;
  *) die "ENGINE must be sglang or vllm, got '$ENGINE'";;
esac
posint PORT "$PORT"
[ "$DISABLE_PIECEWISE_CUDA_GRAPH" = 1 ] && cmd+=("${PREFILL_SWITCH:-$switch}")
cmd+=("$@")
if [ "$EXECUTE" = 1 ]; then
  echo "launch.sh: exec ${cmd[*]}" >&2
  exec "${cmd[@]}"
fi
printf '%q ' "${cmd[@]}" | sed 's/ $//'; echo
