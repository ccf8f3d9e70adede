"""The chat client's event-stream parsing and its timing: TTFT is the time to the first data
event WITH content (not the role-only first event), ITL the gaps between content events. The
real engines' streams are covered by test_real_engines.py; here, what a real engine cannot be
made to send on demand: events split across network reads, comments, multi-line data, CRLF
line ends, a stream without [DONE], an answer that is not an event stream. The answers come
from a raw HTTP/1.1 server on a loopback port, piece by piece (one chunked-encoding chunk per
piece), so the client meets them through its real transport."""

from __future__ import annotations

import asyncio
import json
import time

from imagekit.acceptance.client import ChatClient, EventStreamReader, StreamOutcome


def _event(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]}).encode() + b"\n\n"


def _run(pieces: list[tuple[float, bytes]], content_type: str = "text/event-stream",
         written: list[float] | None = None) -> StreamOutcome:
    """The client's outcome; `written` gets, per piece, the perf_counter time just before the
    server wrote it (one event loop runs both, so a read comes after its write and before the
    next write that a timer started)."""
    written = [] if written is None else written

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type.encode() +
                     b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        for delay, piece in pieces:
            if delay:
                await asyncio.sleep(delay)
            written.append(time.perf_counter())
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def go() -> StreamOutcome:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, ChatClient(f"http://127.0.0.1:{port}") as client:
            return await client.stream({"stream": True}, keep_text=True)

    return asyncio.run(go())


def test_ttft_is_the_first_event_with_content_and_gaps_follow() -> None:
    role = _event({"role": "assistant", "content": ""})
    hello = _event({"content": "hel"})
    written: list[float] = []
    out = _run([(0, role), (0.3, hello[:9]), (0.1, hello[9:]),           # split mid-event
                (0.2, b": keep-alive comment\n\n" + _event({"content": "lo"})),
                (0, _event({}, "stop")), (0, b"data: [DONE]\n\n")], written=written)
    assert out.error is None and out.done_marker and out.finish_reason == "stop"
    assert "".join(out.content) == "hello" and out.chunks == 4
    assert out.sent_at is not None and out.ttft_s is not None and len(out.gaps) == 1
    # the first content event was complete only with its second half (piece 2): read after
    # that write, before the next event's (piece 3); the gap ends at piece 3's read. Held to
    # the server's own writes, so a machine that slows the loop moves both alike.
    first_content = out.sent_at + out.ttft_s
    assert written[2] <= first_content < written[3], (written, first_content)
    assert written[3] <= first_content + out.gaps[0] <= out.sent_at + out.e2e_s
    assert written[2] - written[1] >= 0.1 and written[3] - written[2] >= 0.2
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


def test_crlf_line_ends_split_across_reads_are_one_event() -> None:
    reader = EventStreamReader()
    assert reader.feed(b"data: a\r") == []
    assert reader.feed(b"\n\r") == [b"a"]               # CR+LF, then CR+LF: one event, no more
    assert reader.feed(b"\n: comment\r\nid: 7\r\ndata: b\r\ndata:c\r\n\r\n") == [b"b\nc"]
    assert reader.feed(b"data: incomplete") == []


def test_an_event_split_mid_line_is_stamped_when_its_last_byte_arrives() -> None:
    hello = _event({"content": "hi"})
    out = _run([(0, hello[:5]), (0.25, hello[5:]), (0, b"data: [DONE]\n\n")])
    assert out.ttft_s is not None and 0.23 <= out.ttft_s < 0.6 and out.content == ["hi"]
