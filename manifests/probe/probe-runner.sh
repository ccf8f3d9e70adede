#!/bin/sh
# Runs the probes mounted beside this script (/imagekit/*.py, from a ConfigMap) with the image's
# own python3, framing each one's output so imagekit can split the Pod log per probe:
#   ==> imagekit-probe NAME
#   ...output (a probe's last line may be a JSON verdict {"status": ...})...
#   <== imagekit-probe NAME rc=N
# probe-plan.txt, when present, says which probes run and with which arguments, one per line:
#   NAME [ARG ...]        (arguments without spaces)
# otherwise every *.py not starting with '_' runs without arguments ('_*.py' are helpers).
# A missing python3 is reported per probe as rc=127, never hidden.
here=$(dirname "$0")
echo "imagekit-probe-runner start $(uname -m)"
run_one() {
  name=$1; shift
  echo "==> imagekit-probe $name"
  if [ ! -f "$here/$name.py" ]; then
    echo "probe $name.py is not mounted"
    rc=126
  elif command -v python3 >/dev/null 2>&1; then
    python3 "$here/$name.py" "$@" 2>&1
    rc=$?
  else
    echo "python3 not found in the image"
    rc=127
  fi
  echo "<== imagekit-probe $name rc=$rc"
}
if [ -f "$here/probe-plan.txt" ]; then
  while read -r line; do
    [ -n "$line" ] || continue
    # shellcheck disable=SC2086 # word splitting of the plan's arguments is intended
    run_one $line
  done < "$here/probe-plan.txt"
else
  for f in "$here"/*.py; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .py)
    case "$name" in _*) continue;; esac
    run_one "$name"
  done
fi
echo "imagekit-probe-runner done"
exit 0
