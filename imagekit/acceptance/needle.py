"""A deterministic ~31K-token document with one acceptance key, look-alike distractors, and a
recorded insertion position (record, section 10).

Same seed, same document, byte for byte: a retest with another prompt wrapper keeps the key,
the distractors and the insertion position, so the wrapper is the only change.

Token counting is approximate (no tokenizer can be downloaded here): every CJK character and
every digit counts one token (many tokenizers split digits one by one) and every other run of four
characters counts one (`approx_tokens`); erring high keeps a "31K" document inside a 32K window.
Real tokenizers differ by tens of percent on mixed text; the server's `usage.prompt_tokens` is
recorded next to the estimate so the true size of each request is in the evidence.
"""

from __future__ import annotations

import math
import random
import re

from pydantic import BaseModel, ConfigDict

KEY_LABEL = "验收密钥:"
NOT_FOUND = "NOT_FOUND"

ORIGINAL_TEMPLATE = (
    "Read the following document and find the acceptance key it records. Reply with the key "
    "only. If the document records no acceptance key, reply {not_found}.\n\n{document}")
EXPLICIT_TEMPLATE = (
    "<document>\n{document}\n</document>\n\n"
    "请提取 <document> 中“{key_label}”之后的完整文本，只输出该值，不要输出其他内容。"
    "如果 <document> 中没有“{key_label}”，只输出 {not_found}。")
#: the record's two wrappers (section 10); a cases file carries its own (imagekit.acceptance.cases)
WRAPPERS = {"original": ORIGINAL_TEMPLATE, "explicit": EXPLICIT_TEMPLATE}

_CITIES = ["上海", "北京", "深圳", "成都", "武汉", "杭州", "西安", "南京", "天津", "重庆"]
_GOODS = ["螺栓", "轴承", "电缆", "显示屏", "服务器", "散热片", "电源模块", "网卡", "硬盘", "机柜"]
_PEOPLE = ["王磊", "李娜", "张伟", "刘洋", "陈静", "杨帆", "赵敏", "黄涛", "周婷", "吴昊"]
_NOTES = ["外包装完好", "已抽检合格", "待复核数量", "随货附发票", "已入库上架", "需冷链保存",
          "供应商补发", "批次号清晰", "已完成登记", "按计划交付"]
_DISTRACTOR_LABELS = ["预发环境密钥:", "验收密钥草稿（已作废，请勿使用）", "测试密钥:"]
_EN_CITIES = ["Boston", "Denver", "Austin", "Seattle", "Chicago", "Portland", "Atlanta", "Dallas"]
_EN_GOODS = ["bolts", "bearings", "cables", "screens", "servers", "heat sinks", "power units",
             "network cards", "disks", "racks"]
_EN_PEOPLE = ["Alice", "Bruno", "Chen", "Dana", "Emil", "Farah", "Greta", "Hugo"]
_EN_NOTES = ["packaging intact", "sample checked", "count to be reviewed", "invoice enclosed",
             "shelved", "keep cold", "resent by supplier", "batch label clear"]
_EN_DISTRACTOR_LABELS = ["Staging key:", "Draft acceptance key (void, do not use):", "Test key:"]
#: per filler: the key line's label and the distractors' labels
FILLERS = {"zh-records": (KEY_LABEL, _DISTRACTOR_LABELS),
           "en-records": ("Acceptance key:", _EN_DISTRACTOR_LABELS)}
_DISTRACTOR_AT = (0.25, 0.65, 0.8)
_ONES = re.compile(r"[0-9\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def approx_tokens(text: str) -> int:
    """CJK characters and digits count one each, other characters one per four (rounded up)."""
    ones = len(_ONES.findall(text))
    return ones + math.ceil((len(text) - ones) / 4)


class Distractor(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    value: str
    paragraph: int


class NeedleDocument(BaseModel):
    """The document and everything needed to judge an answer about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    position: float
    key: str | None
    key_label: str = KEY_LABEL
    not_found: str = NOT_FOUND
    insertion_paragraph: int | None
    distractors: list[Distractor]
    paragraphs: int
    approx_tokens: int
    text: str

    @property
    def has_key(self) -> bool:
        return self.key is not None

    def facts(self) -> dict:
        """Everything but the text (which the request body already carries)."""
        return self.model_dump(exclude={"text"})

    def prompt(self, wrapper: str) -> str:
        """The document inside a wrapper: a name of the record's (`WRAPPERS`) or a template
        with {document}, {not_found} and {key_label}."""
        template = WRAPPERS.get(wrapper, wrapper)
        return template.format(document=self.text, not_found=self.not_found,
                               key_label=self.key_label)

    def judge(self, answer: str) -> tuple[bool, str]:
        """Correct when the key (or NOT_FOUND for the control) is given and no distractor."""
        used = [d.value for d in self.distractors if d.value in answer]
        if used:
            return False, f"answered a distractor value {used[0]}"
        if self.key is None:
            found = self.not_found in answer
            return found, "" if found else f"control not {self.not_found}"
        if self.key in answer:
            return True, ""
        return False, self.not_found if self.not_found in answer else "key missing from answer"


def _key(rng: random.Random) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    return "MK3-" + "-".join("".join(rng.choice(alphabet) for _ in range(4)) for _ in range(3))


def _paragraph(rng: random.Random, n: int) -> str:
    return (f"第{n:04d}条记录：{rng.choice(_CITIES)}仓库于2024年{rng.randint(1, 12)}月"
            f"{rng.randint(1, 28)}日收到{rng.choice(_GOODS)}{rng.randint(10, 999)}件，批次号"
            f" B{rng.randint(100000, 999999)}，经办人{rng.choice(_PEOPLE)}，"
            f"备注：{rng.choice(_NOTES)}。")


def _en_paragraph(rng: random.Random, n: int) -> str:
    return (f"Record {n:04d}: the {rng.choice(_EN_CITIES)} warehouse received "
            f"{rng.randint(10, 999)} {rng.choice(_EN_GOODS)} on 2024-{rng.randint(1, 12):02d}-"
            f"{rng.randint(1, 28):02d}, batch B{rng.randint(100000, 999999)}, handled by "
            f"{rng.choice(_EN_PEOPLE)}; note: {rng.choice(_EN_NOTES)}.")


def make_document(seed: int, position: float, *, target_tokens: int = 31_000,
                  with_key: bool = True, filler: str = "zh-records", distractors: bool = True,
                  not_found: str = NOT_FOUND) -> NeedleDocument:
    """Paragraphs of plausible warehouse records until `target_tokens` (approximate); the key
    line goes in at `position` (0..1 of the paragraphs), distractors at fixed fractions; the
    recorded indices are line numbers of the final text."""
    if not 0.0 <= position <= 1.0:
        raise ValueError(f"position must be within 0..1, not {position}")
    key_label, labels = FILLERS[filler]
    paragraph = _paragraph if filler == "zh-records" else _en_paragraph
    rng = random.Random(seed)
    key = _key(rng)
    distractor_values = [_key(rng) for _ in labels]
    paragraphs: list[str] = []
    ones = other = 0
    budget = target_tokens - 30 * (len(labels) + 1)
    while ones + math.ceil(other / 4) < budget:
        text = paragraph(rng, len(paragraphs) + 1) + "\n"
        paragraphs.append(text[:-1])
        n = len(_ONES.findall(text))
        ones, other = ones + n, other + len(text) - n
    inserts: list[tuple[int, str, str]] = [
        (round(at * len(paragraphs)), label, value)
        for label, value, at in zip(labels, distractor_values, _DISTRACTOR_AT, strict=True)
    ] if distractors else []
    if with_key:
        inserts.append((round(position * len(paragraphs)), key_label, key))
    placed = []
    insertion = None
    # ascending, so each final line index is its slot plus the lines inserted before it
    for shift, (index, label, value) in enumerate(sorted(inserts, key=lambda x: x[0])):
        line_index = index + shift
        paragraphs.insert(line_index, f"{label} {value}")
        if label == key_label:
            insertion = line_index
        else:
            placed.append(Distractor(label=label, value=value, paragraph=line_index))
    text = "\n".join(paragraphs)
    return NeedleDocument(seed=seed, position=position, key=key if with_key else None,
                          key_label=key_label, not_found=not_found,
                          insertion_paragraph=insertion, distractors=placed,
                          paragraphs=len(paragraphs), approx_tokens=approx_tokens(text),
                          text=text)
