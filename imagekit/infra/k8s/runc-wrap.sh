#!/bin/sh
# runc wrapper: this VM lacks CAP_SYS_RESOURCE, so the negative oom_score_adj the kubelet asks for
# (e.g. -998 for the pause sandbox) fails with EACCES; clamp negative values to 0, then exec runc.
prev=""
for a in "$@"; do
  [ "$prev" = "--bundle" ] && sed -i -E 's/"oomScoreAdj": ?-[0-9]+/"oomScoreAdj":0/' "$a/config.json"
  prev=$a
done
exec runc "$@"
