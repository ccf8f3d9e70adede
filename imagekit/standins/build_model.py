"""Builds one stand-in model into a directory. Run as a SCRIPT with an engine venv's python
(it needs torch, tokenizers and transformers, which imagekit itself never imports):

    <venv>/bin/python build_model.py --kind text|llava --out DIR --corpus FILE [--corpus FILE]

Deterministic: one thread, fixed seeds, the corpus files sorted, so the same inputs give the same
weights and tokenizer byte for byte. Imports nothing from imagekit (it runs in another venv).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("RAYON_RS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|user|>", "<|assistant|>",
            "<|system|>", "<|tool|>"]
IMAGE_TOKEN = "<image>"
BOS, EOS, PAD = SPECIALS[0], SPECIALS[1], SPECIALS[2]

#: A plain chat template: role tags, text parts, `<image>` for each image part, tools listed as
#: JSON after the system turn (so a tools request renders; tool calls are not parsed here).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|system|>tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>' }}"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for p in m['content'] %}"
    "{% if p['type'] == 'text' %}{{ p['text'] }}"
    "{% elif p['type'] in ('image', 'image_url') %}" + IMAGE_TOKEN +
    "{% endif %}{% endfor %}{% endif %}"
    "{% if m.get('tool_calls') %}{{ m['tool_calls'] | tojson }}{% endif %}"
    "\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def train_tokenizer(corpus: list[Path], vocab: int, extra: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS + extra,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    texts = [p.read_text(errors="replace") for p in sorted(corpus)]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def fast_tokenizer(tok, max_len: int, extra: list[str]):
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, model_max_length=max_len,
                                   additional_special_tokens=SPECIALS[3:] + extra)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def text_config(vocab: int, max_len: int, fast):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256,
                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                       head_dim=64, max_position_embeddings=max_len, tie_word_embeddings=False,
                       bos_token_id=fast.convert_tokens_to_ids(BOS),
                       eos_token_id=fast.convert_tokens_to_ids(EOS),
                       pad_token_id=fast.convert_tokens_to_ids(PAD), torch_dtype="float32")


def generation_config(fast, max_len: int):
    from transformers import GenerationConfig

    eos = fast.convert_tokens_to_ids(EOS)
    # every special but EOS suppressed, or a random model emits only specials (content "")
    suppress = sorted({fast.convert_tokens_to_ids(t) for t in fast.all_special_tokens} - {eos})
    return GenerationConfig(bos_token_id=fast.convert_tokens_to_ids(BOS), eos_token_id=eos,
                            pad_token_id=fast.convert_tokens_to_ids(PAD),
                            suppress_tokens=suppress, do_sample=False, max_length=max_len)


def build(kind: str, out: Path, corpus: list[Path], vocab: int, max_len: int) -> None:
    import torch

    torch.manual_seed(20261201)
    torch.set_num_threads(1)
    extra = [IMAGE_TOKEN] if kind == "llava" else []
    tok = train_tokenizer(corpus, vocab, extra)
    fast = fast_tokenizer(tok, max_len, extra)
    text = text_config(vocab, max_len, fast)
    out.mkdir(parents=True, exist_ok=True)
    if kind == "text":
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(text)
        fast.save_pretrained(out)
    else:
        from transformers import (
            CLIPImageProcessor,
            CLIPVisionConfig,
            LlavaConfig,
            LlavaForConditionalGeneration,
            LlavaProcessor,
        )

        vision = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=2, image_size=32, patch_size=8,
                                  projection_dim=64)
        config = LlavaConfig(vision_config=vision, text_config=text,
                             image_token_index=fast.convert_tokens_to_ids(IMAGE_TOKEN),
                             vision_feature_select_strategy="default",
                             vision_feature_layer=-2, projector_hidden_act="gelu")
        model = LlavaForConditionalGeneration(config)
        images = CLIPImageProcessor(size={"shortest_edge": 32},
                                    crop_size={"height": 32, "width": 32})
        processor = LlavaProcessor(image_processor=images, tokenizer=fast, patch_size=8,
                                   vision_feature_select_strategy="default",
                                   num_additional_image_tokens=1, image_token=IMAGE_TOKEN,
                                   chat_template=CHAT_TEMPLATE)
        processor.save_pretrained(out)
        fast.save_pretrained(out)
    model.generation_config = generation_config(fast, max_len)
    model.save_pretrained(out, safe_serialization=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("text", "llava"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, action="append", required=True)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--max-len", type=int, default=32768)
    args = parser.parse_args()
    build(args.kind, args.out, args.corpus, args.vocab, args.max_len)
    print(json.dumps({"built": str(args.out)}))


if __name__ == "__main__":
    main()
