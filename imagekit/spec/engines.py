"""What each engine's image must import, when nobody listed it (`probe REF --engine E`).

SGLang's list carries the record's section 2 lesson: `nixl` is not a removable metapackage —
it holds Python entry points (`nixl/__init__.py`, `nixl/_api.py`), so uninstalling it passes
`pip check` and must fail here. The submodule is looked up too: a wrong fix that leaves an
empty `nixl` directory behind (a namespace package) would still satisfy `find_spec('nixl')`.
"""

from __future__ import annotations

#: engine -> modules `find_spec` must resolve inside the image (in this order)
ENGINE_FIND_SPEC: dict[str, tuple[str, ...]] = {
    "sglang": ("sglang", "sglang.launch_server", "nixl", "nixl._api"),
    "vllm": ("vllm", "vllm.entrypoints.cli.main", "vllm.entrypoints.openai.api_server"),
}


def engine_find_spec(engine: str) -> list[str]:
    """The built-in find_spec list of `engine` (just the engine's package when unknown)."""
    return list(ENGINE_FIND_SPEC.get(engine, (engine,)))
