"""`imagekit standins build --layers N`: the padding is generic (tiny COPY layers on top of the
stand-in as built), off by default, and never replaces the default tags."""

from __future__ import annotations

import subprocess
import sys

from imagekit.oci import ImageReference
from imagekit.standins.build import _layers_tag, pad_dockerfile


def test_pads_to_the_layer_count_asked_for():
    text = pad_dockerfile("imagekit-standins/sglang-base:abc", have=9, want=63)
    lines = text.splitlines()
    assert lines[0] == "FROM imagekit-standins/sglang-base:abc"
    assert len(lines) == 1 + 54 and all(line.startswith("COPY layers/") for line in lines[1:])
    assert len(set(lines[1:])) == 54  # each a layer of its own


def test_enough_layers_already_is_no_build():
    assert pad_dockerfile("x:y", have=63, want=63) is None
    assert pad_dockerfile("x:y", have=70, want=63) is None


def test_padded_images_get_their_own_tag_and_the_default_is_untouched():
    ref = ImageReference.parse("127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin")
    assert str(_layers_tag(ref, 63)) == \
        "127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin-layers63"
    assert _layers_tag(ref, None) is ref


def test_layers_out_of_range_is_one_line_before_anything():
    done = subprocess.run([sys.executable, "-m", "imagekit", "standins", "build", "--layers",
                           "500"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("imagekit: error: --layers 500: give 1-120"), \
        done.stderr
