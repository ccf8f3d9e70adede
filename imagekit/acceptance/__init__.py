"""Model acceptance against any OpenAI-compatible server: functional suite, corrupted media,
needle retest, and a load client.

Imports aiohttp, pydantic and Pillow only; no engine (vLLM, SGLang), torch or GPU code, so a
CPU-only client box never trips over GPU detection (record, section 4). PyAV is imported only
when a video is made.
"""

from imagekit.acceptance.client import ChatClient, ServerUnreachable, normalise_base_url
from imagekit.acceptance.engines import EngineConfig, load_engine_config
from imagekit.acceptance.matrix import Matrix, load_matrix
from imagekit.acceptance.models import Exchange, LatencyStats, RoundResult, RoundSpec
from imagekit.acceptance.needle import NeedleDocument, approx_tokens, make_document
from imagekit.acceptance.suite import SuiteOptions

__all__ = ["ChatClient", "EngineConfig", "Exchange", "LatencyStats", "Matrix", "NeedleDocument",
           "RoundResult", "RoundSpec", "ServerUnreachable", "SuiteOptions", "approx_tokens",
           "load_engine_config", "load_matrix", "make_document", "normalise_base_url"]
