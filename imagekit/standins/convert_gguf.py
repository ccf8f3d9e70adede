"""De-quantizes a GGUF chat model into a bf16 safetensors folder with its tokenizer and chat
template. Run as a SCRIPT with an engine venv's python (torch, transformers and accelerate live
there; `gguf` comes on PYTHONPATH), never imported by imagekit:

    <venv>/bin/python convert_gguf.py --gguf FILE --out DIR

transformers refuses to save a model it loaded from GGUF ("not serializable"): the loaded
model still carries the GGUF quantizer. Dropping the quantizer and its config entry leaves an
ordinary bf16 model, which any engine serves. One thread, so the same GGUF gives the same
tensors byte for byte.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    # transformers reads the GGUF from a folder; a link keeps the 98 MB file in one place
    with tempfile.TemporaryDirectory(prefix="gguf-") as tmp:
        link = Path(tmp) / gguf.name
        link.symlink_to(gguf.resolve())
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf.name,
                                                     dtype=torch.bfloat16)
    # the GGUF names <|im_start|> as EOS; the model ends its turns with <|im_end|>
    if "<|im_end|>" in tokenizer.get_vocab():
        tokenizer.eos_token = tokenizer.pad_token = "<|im_end|>"
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    if not (out / "chat_template.jinja").is_file() and not tokenizer.chat_template:
        raise SystemExit("the GGUF carries no chat template")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        convert(args.gguf, args.out)
    except BaseException:
        shutil.rmtree(args.out, ignore_errors=True)
        raise


if __name__ == "__main__":
    main()
