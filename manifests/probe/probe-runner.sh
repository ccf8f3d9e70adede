#!/bin/sh
# Runs every probe mounted beside this script (/imagekit/*.py, from a ConfigMap) with the image's
# own python3, framing each one's output so imagekit can split the Pod log per probe:
#   ==> imagekit-probe NAME
#   ...output...
#   <== imagekit-probe NAME rc=N
# A missing python3 is reported per probe as rc=127, never hidden.
here=$(dirname "$0")
echo "imagekit-probe-runner start $(uname -m)"
for f in "$here"/*.py; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .py)
  echo "==> imagekit-probe $name"
  if command -v python3 >/dev/null 2>&1; then
    python3 "$f" 2>&1
    rc=$?
  else
    echo "python3 not found in the image"
    rc=127
  fi
  echo "<== imagekit-probe $name rc=$rc"
done
echo "imagekit-probe-runner done"
exit 0
