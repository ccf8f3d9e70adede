"""What every suite gets: the client, the model, the engine profile, and a recorder that keeps
every exchange (failed ones too) for the evidence store."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from imagekit.acceptance.capabilities import Capabilities, Requirements
from imagekit.acceptance.cases import Cases
from imagekit.acceptance.cases import default as default_cases
from imagekit.acceptance.client import ChatClient
from imagekit.acceptance.engines import EngineConfig, EngineProfile
from imagekit.acceptance.models import Exchange
from imagekit.acceptance.protocol import STANDIN_REASON, Verdict, deferred


@dataclass
class SuiteOptions:
    """Knobs a run may change. The semantic cases come from a cases file (the record's by
    default); a knob left None takes the cases file's value."""

    max_tokens: int = 2048
    reproductions: int | None = None
    #: the needle document's size in tokens; None: the cases' share of the served context
    needle_tokens: int | None = None
    needle_samples: int | None = None
    needle_positions: tuple[float, ...] | None = None
    needle_wrappers: tuple[str, ...] | None = None
    needle_seed: int | None = None
    temperature: float = 0.0
    #: sampling seed sent with every request: at temperature 0 vLLM and `transformers serve`
    #: decode greedily, and the seed pins whatever sampling an engine still does
    seed: int | None = 0
    cases: Cases = field(default_factory=default_cases)

    @property
    def repeats(self) -> int:
        return self.reproductions or self.cases.arithmetic.reproductions

    @property
    def samples(self) -> int:
        return self.needle_samples or self.cases.needle.samples

    @property
    def positions(self) -> tuple[float, ...]:
        return self.needle_positions or tuple(self.cases.needle.positions)

    @property
    def wrappers(self) -> dict[str, str]:
        """Wrapper name -> template, the names asked for in the cases file's order."""
        chosen = self.needle_wrappers or tuple(self.cases.needle.wrappers)
        return {name: self.cases.needle.wrappers[name] for name in chosen}

    @property
    def seed_base(self) -> int:
        return self.needle_seed if self.needle_seed is not None else self.cases.needle.seed


@dataclass
class SuiteContext:
    client: ChatClient
    model: str
    engine: str
    engine_version: str | None
    config: EngineConfig
    options: SuiteOptions = field(default_factory=SuiteOptions)
    exchanges: list[Exchange] = field(default_factory=list)
    models: list[dict] = field(default_factory=list)
    #: random-weight stand-in model: protocol judged, every semantic verdict DEFERRED
    standin: bool = False
    capabilities: Capabilities | None = None
    required: Requirements = field(default_factory=Requirements)

    def semantic(self, judge: Callable[[], Verdict]) -> Verdict:
        """The semantic verdict, or DEFERRED on a stand-in model (never PASS, never FAIL)."""
        return deferred(STANDIN_REASON) if self.standin else judge()

    def observed(self, check: str) -> str:
        """What the engine profile lists as observed for `check` (explains, never judges)."""
        notes = self.config.observed_for(self.engine, self.engine_version, check)
        return "; ".join(f"profile {n.engine} {'/'.join(n.versions)}: {n.behaviour}"
                         for n in notes)

    @property
    def profile(self) -> EngineProfile:
        return self.config.profile(self.engine)

    def body(self, messages: list[dict], **fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "max_tokens": self.options.max_tokens,
                                "temperature": self.options.temperature}
        if self.options.seed is not None:
            body["seed"] = self.options.seed
        body.update(copy.deepcopy(fields))
        return body

    async def send(self, label: str, body: dict[str, Any]) -> Exchange:
        exchange = await self.client.chat(label, body)
        self.exchanges.append(exchange)
        return exchange

    async def ask(self, label: str, messages: list[dict], **fields: Any) -> Exchange:
        return await self.send(label, self.body(messages, **fields))


def user(*parts: str | dict) -> dict:
    """A user message; plain text stays a string, mixed media becomes content parts."""
    if len(parts) == 1 and isinstance(parts[0], str):
        return {"role": "user", "content": parts[0]}
    content = [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]
    return {"role": "user", "content": content}
