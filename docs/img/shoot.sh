#!/bin/sh
# Regenerate docs/img/report-*.png: the rehearsal's reports in headless Debian chromium at
# 1280 px, networking off. Usage: IMAGEKIT_EVIDENCE_DIR=…/.evidence docs/img/shoot.sh
set -eu
out=$(mktemp -d)
python=${PYTHON:-.venv/bin/python}
$python -m imagekit report --all-images --format all --out "$out/r" >/dev/null
for page in "$out"/r/*.html; do
  image=$(basename "$page" | sed 's/-[0-9a-f]\{12\}\.html$//')
  for mode in glance:1280,1400 full:1280,4800; do
    suffix=$([ "${mode%%:*}" = full ] && echo -full || true)
    rm -rf "$out/profile"
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
      --disable-component-update --disable-sync --no-first-run --disable-dev-shm-usage \
      --hide-scrollbars --host-resolver-rules='MAP * ~NOTFOUND' \
      --user-data-dir="$out/profile" --window-size="${mode#*:}" \
      --screenshot="docs/img/report-$image$suffix.png" "file://$page" >/dev/null 2>&1
  done
done
# crop the blank bottom, 128-colour palette: small files in git
$python - <<'PY'
import glob
from PIL import Image
for f in glob.glob("docs/img/report-*.png"):
    im = Image.open(f).convert("RGB")
    box = Image.eval(im, lambda v: 255 - v).getbbox()
    im = im.crop((0, 0, im.width, min(im.height, box[3] + 24)))
    im.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(f, optimize=True)
PY
rm -rf "$out"
