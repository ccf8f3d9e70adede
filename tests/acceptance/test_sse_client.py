"""The chat client's event-stream parsing (httpx-sse) and its timing: TTFT is the time to the
first data event WITH content (not the role-only first event), ITL the gaps between content
events. The real engines' streams are covered by test_real_engines.py; here, what a real
engine cannot be made to send on demand: events split across network reads, comments,
multi-line data, a stream without [DONE], an answer that is not an event stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx

from imagekit.acceptance.client import ChatClient, StreamOutcome


def _event(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]}).encode() + b"\n\n"


def _run(pieces: list[tuple[float, bytes]], content_type: str = "text/event-stream"
         ) -> StreamOutcome:
    async def body() -> AsyncIterator[bytes]:
        for delay, piece in pieces:
            if delay:
                await asyncio.sleep(delay)
            yield piece

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=body())

    async def go() -> StreamOutcome:
        async with ChatClient("http://127.0.0.1:9") as client:
            await client._http.aclose()
            client._http = httpx.AsyncClient(base_url=client.base_url,
                                             transport=httpx.MockTransport(handler))
            return await client.stream({"stream": True}, keep_text=True)

    return asyncio.run(go())


def test_ttft_is_the_first_event_with_content_and_gaps_follow() -> None:
    role = _event({"role": "assistant", "content": ""})
    hello = _event({"content": "hel"})
    out = _run([(0, role), (0.3, hello[:9]), (0.1, hello[9:]),           # split mid-event
                (0.2, b": keep-alive comment\n\n" + _event({"content": "lo"})),
                (0, _event({}, "stop")), (0, b"data: [DONE]\n\n")])
    assert out.error is None and out.done_marker and out.finish_reason == "stop"
    assert "".join(out.content) == "hello" and out.chunks == 4
    # the first content event was complete only after its second half (0.3 + 0.1 s)
    assert out.ttft_s is not None and 0.38 <= out.ttft_s < 0.5 + 0.4
    assert len(out.gaps) == 1 and 0.18 <= out.gaps[0] < 0.6
    assert out.e2e_s >= out.ttft_s + out.gaps[0]


def test_multi_line_data_is_one_event() -> None:
    out = _run([(0, b'data: {"choices": [{"delta":\ndata: {"content": "x"}}]}\n\n'),
                (0, b"data: [DONE]\n\n")])
    assert out.error is None and out.content == ["x"] and out.chunks == 1


def test_a_stream_without_done_is_an_error() -> None:
    out = _run([(0, _event({"content": "x"}))])
    assert out.error == "stream ended without data: [DONE]" and out.content == ["x"]


def test_undecodable_data_and_error_events_are_recorded() -> None:
    out = _run([(0, b"data: {not json\n\n"), (0, b'data: {"error": "boom"}\n\n'),
                (0, b"data: [DONE]\n\n")])
    assert out.error == "error event: boom"
    out = _run([(0, b"data: {not json\n\n"), (0, b"data: [DONE]\n\n")])
    assert out.error == "undecodable SSE data: '{not json'"


def test_an_answer_that_is_no_event_stream_is_an_error() -> None:
    out = _run([(0, b'{"choices": []}')], content_type="application/json")
    assert out.status_code == 200 and out.error is not None
    assert "text/event-stream" in out.error and out.ttft_s is None
