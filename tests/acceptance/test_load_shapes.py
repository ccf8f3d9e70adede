"""The load matrix's workload shapes, seen from both ends: gamma burstiness measured on the
actual send times, datasets replayed in file order, a trace replayed on time, multi-turn
conversations carrying the server's own answers, warm-up kept out of the figures, saturation
marked (and not marked), chosen percentiles, per-request ITL, and each bad input refused in
one line.

Against tests/acceptance/loadserver.py, which remembers what it was sent and when."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from imagekit.acceptance import load_matrix
from imagekit.acceptance.load import arrivals, percentiles, saturation
from imagekit.acceptance.models import RequestRecord, RoundSpec, Saturation
from imagekit.cli import app

from .conftest import running_server

LOADSERVER = Path(__file__).with_name("loadserver.py")


class Server:
    def __init__(self, url: str) -> None:
        self.url = url

    def set(self, **behaviour: object) -> None:
        httpx.post(f"{self.url}/_load/behaviour", json=behaviour).raise_for_status()

    def seen(self) -> list[dict]:
        return httpx.get(f"{self.url}/_load/seen").json()

    def streamed(self) -> list[dict]:
        """The round's requests (calibration asks without max_tokens > 1 and no stream)."""
        return [s for s in self.seen() if s["max_tokens"] != 1]


@pytest.fixture(scope="module")
def _load_server() -> Iterator[str]:
    with running_server(script=LOADSERVER) as url:
        yield url


@pytest.fixture
def server(_load_server: str) -> Server:
    httpx.post(f"{_load_server}/_load/reset").raise_for_status()
    return Server(_load_server)


def bench(tmp_path: Path, url: str, matrix: str, *extra: str) -> tuple[int, dict, str]:
    path = tmp_path / "matrix.toml"
    path.write_text(matrix)
    result = CliRunner().invoke(app, ["bench", "--base-url", url, "--matrix", str(path),
                                      "--json", "--evidence-dir", str(tmp_path / "ev"), *extra])
    out = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, out, result.stderr


def rounds(out: dict) -> list[dict]:
    folder = Path(out["evidence"]["bench"]) / "rounds"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*-result.json"))]


def checks(out: dict) -> dict[str, dict]:
    return {c["name"]: c for c in out["checks"]}


def fitted_shape(times: list[float]) -> float:
    """Gamma shape by the method of moments: mean² / variance of the gaps (1 / CV²)."""
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return statistics.fmean(gaps) ** 2 / statistics.pvariance(gaps)


TOP = 'name = "shapes"\nsemantic_warmup = false\n'
HEAD = TOP + '[expect]\ninput_tolerance = 0.5\n'


# --- burstiness ---------------------------------------------------------------------------

def test_gamma_schedule_has_the_asked_shape_and_rate() -> None:
    def spec(burstiness: float, seed: int = 0) -> RoundSpec:
        return RoundSpec(index=1, concurrency=1, input_tokens=8, output_tokens=2,
                         requests=4000, rate=10.0, burstiness=burstiness, seed=seed)

    bursty, even = arrivals(spec(0.25)), arrivals(spec(4.0))
    assert bursty == arrivals(spec(0.25)) and bursty != arrivals(spec(0.25, seed=1))
    for times, shape in ((bursty, 0.25), (even, 4.0)):
        assert 9.5 < (len(times) - 1) / times[-1] < 10.5                 # the asked mean rate
        assert shape * 0.85 < fitted_shape(times) < shape * 1.15
    # the case that must not pass: Poisson arrivals fit shape 1, far from either
    poisson = fitted_shape(arrivals(spec(1.0)))
    assert 0.85 < poisson < 1.15 and not 0.25 * 0.85 < poisson < 0.25 * 1.15


@pytest.mark.serial  # measures send times
def test_burstiness_shows_in_the_actual_send_times(server: Server, tmp_path: Path) -> None:
    matrix = HEAD + "".join(
        f"[[matrix]]\nconcurrency = [64]\nrate = [20]\nburstiness = {b}\ninput_tokens = [8]\n"
        f"output_tokens = [2]\nrequests = 120\n" for b in (0.25, 4))
    code, out, err = bench(tmp_path, server.url, matrix, "--no-calibrate")
    assert code == 0, (out, err)
    assert list(checks(out))[:2] == ["round-01-text-r20b0.25-in8-out2",
                                     "round-02-text-r20b4-in8-out2"]
    bursty, even = rounds(out)
    assert bursty["arrival"] == even["arrival"] == "gamma"
    shapes = []
    for result in (bursty, even):
        sent = [r["sent_at_s"] for r in result["records"]]
        assert sent == sorted(sent)
        scheduled = arrivals(RoundSpec.model_validate(result["spec"]))
        shapes.append((fitted_shape(sent), fitted_shape(scheduled)))
    (bursty_sent, bursty_plan), (even_sent, even_plan) = shapes
    # 0.25 and 4 told apart, and both from Poisson (1): a coefficient of variation of the
    # gaps near 2 and near 0.5. The plan fits 0.275 and 3.26 for these two rounds; a stalled
    # client (a busy machine) sends in clumps, which only makes bursty traffic burstier, so
    # the plan is the bound for the even round alone.
    assert 0.06 < bursty_sent < 0.5 and bursty_plan < 0.5, shapes
    assert 2.0 < even_sent < 6 and 0.6 < even_sent / even_plan < 1.67, shapes


# --- datasets -----------------------------------------------------------------------------

def test_jsonl_dataset_is_replayed_in_file_order(server: Server, tmp_path: Path) -> None:
    questions = [f"question number {k} about {w}" for k, w in
                 enumerate(["rivers", "stars", "bread", "trains", "owls"])]
    (tmp_path / "prompts.jsonl").write_text("".join(
        json.dumps({"id": k, "question": q}) + "\n" for k, q in enumerate(questions)))
    code, out, err = bench(tmp_path, server.url, HEAD + (
        '[[matrix]]\nconcurrency = [1]\noutput_tokens = [3]\nrequests = 7\n'
        '[matrix.dataset]\npath = "prompts.jsonl"\ncolumn = "question"\n'))
    assert code == 0, (out, err)
    name = "round-01-text-c1-jsonl.prompts-out3"
    assert list(checks(out)) == [name, "matrix-totals"]
    sent = [s["messages"][-1]["content"] for s in server.streamed()]
    assert sent == questions + questions[:2]            # in order, again from the start
    (result,) = rounds(out)
    assert result["spec"]["dataset"]["sha256"] and result["spec"]["requests"] == 7
    assert Path(result["spec"]["dataset"]["path"]).is_absolute()
    assert all(r["max_tokens"] == 3 and r["completion_tokens"] == 3 for r in result["records"])


def test_sharegpt_sends_the_first_human_turn_sized_by_the_reply(server: Server,
                                                                tmp_path: Path) -> None:
    data = [{"conversations": [{"from": "human", "value": "Name three rivers."},
                               {"from": "gpt", "value": "Nile Amazon Yangtze are three."},
                               {"from": "human", "value": "And lakes?"}]},
            {"messages": [{"role": "system", "content": "be brief"},
                          {"role": "user", "content": "Say hello twice."},
                          {"role": "assistant", "content": "hello hello"}]}]
    (tmp_path / "chats.json").write_text(json.dumps(data))
    code, out, err = bench(tmp_path, server.url, HEAD + (
        '[[matrix]]\nconcurrency = [2]\n[matrix.dataset]\npath = "chats.json"\n'
        'format = "sharegpt"\n'))
    assert code == 0, (out, err)
    seen = sorted(server.streamed(), key=lambda s: s["messages"][-1]["content"])
    assert [(s["messages"], s["max_tokens"]) for s in seen] == [
        ([{"role": "user", "content": "Name three rivers."}], 5),   # 5 reply words, 1 tok/word
        ([{"role": "user", "content": "Say hello twice."}], 2)]
    assert "round-01-text-c2-sharegpt.chats" in checks(out)


@pytest.mark.serial  # measures send times
def test_trace_is_replayed_on_time(server: Server, tmp_path: Path) -> None:
    stamps = [5000, 5000, 5120, 5400, 5410, 5800, 6100, 6105, 6500, 6950, 7000]
    (tmp_path / "trace.jsonl").write_text("".join(
        json.dumps({"timestamp": t, "input_length": 40 + 10 * k, "output_length": 2 + k % 3,
                    "hash_ids": [k]}) + "\n" for k, t in enumerate(stamps)))
    code, out, err = bench(tmp_path, server.url, HEAD + (
        '[[matrix]]\nconcurrency = [16]\n[matrix.dataset]\npath = "trace.jsonl"\n'
        'format = "trace"\n'))
    assert code == 0, (out, err)
    (result,) = rounds(out)
    assert result["arrival"] == "trace" and "round-01-text-trace-trace.trace" in checks(out)
    span = (stamps[-1] - stamps[0]) / 1000
    due = [(t - stamps[0]) / 1000 for t in stamps]
    sent = [r["sent_at_s"] for r in result["records"]]
    assert max(abs(s - d) for s, d in zip(sent, due, strict=True)) <= 0.02 * span
    # the server's side adds connection set-up and its own scheduling on a busy machine:
    # the same schedule, looser
    arrived = [s["at"] for s in server.streamed()]
    assert max(abs((a - arrived[0]) - d) for a, d in zip(arrived, due, strict=True)) \
        <= 0.1 * span
    assert [r["max_tokens"] for r in result["records"]] == [2 + k % 3 for k in range(11)]
    assert [r["input_target"] for r in result["records"]] == [40 + 10 * k for k in range(11)]
    assert all(r["completion_tokens"] == r["max_tokens"] for r in result["records"])


@pytest.mark.parametrize("load", ["concurrency = [2]", "concurrency = [4]\nrate = [20]"])
def test_multi_turn_carries_the_servers_answers_in_order(server: Server, tmp_path: Path,
                                                         load: str) -> None:
    chats = [{"conversations": [x for t in range(3) for x in (
        {"from": "human", "value": f"conversation {c} turn {t}"},
        {"from": "gpt", "value": "recorded answer that is never sent"})]} for c in range(3)]
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(c) + "\n" for c in chats))
    server.set(chunk_delay_s=0.01)
    code, out, err = bench(tmp_path, server.url, HEAD + (
        f'[[matrix]]\n{load}\noutput_tokens = [2]\n[matrix.dataset]\n'
        'path = "chats.jsonl"\nformat = "sharegpt"\nmulti_turn = true\n'), "--no-calibrate")
    assert code == 0, (out, err)
    seen = server.streamed()
    answer = {s["n"]: f"answer-{s['n']} tok" for s in seen}
    order = []
    for s in seen:
        conv, turn = map(int, s["messages"][-1]["content"].split()[1::2])
        order.append((conv, turn))
        assert len(s["messages"]) == 2 * turn + 1                    # the history grows
        earlier = [x for x in seen if x["messages"][-1]["content"].startswith(
            f"conversation {conv} ") and x["n"] < s["n"]]
        assert [x["messages"][-1]["content"] for x in earlier] == \
            [f"conversation {conv} turn {t}" for t in range(turn)]   # turns in order
        # each earlier turn's assistant message is what the server actually answered
        assert [m["content"] for m in s["messages"] if m["role"] == "assistant"] == \
            [answer[x["n"]] for x in earlier]
    assert sorted(order) == [(c, t) for c in range(3) for t in range(3)]
    if "rate" not in load:  # two conversations in flight: their turns interleave
        assert order.index((1, 0)) < order.index((0, 2))
    (result,) = rounds(out)
    assert result["spec"]["requests"] == 9 and result["completed"] == 9
    assert {(r["conversation"], r["turn"]) for r in result["records"]} == set(order)


# --- warm-up, percentiles, ITL ------------------------------------------------------------

def test_warmup_requests_are_sent_first_and_never_counted(server: Server,
                                                          tmp_path: Path) -> None:
    block = ('[[matrix]]\nconcurrency = [2]\ninput_tokens = [8]\noutput_tokens = [2]\n'
             'requests = 4\n')
    server.set(fail_first=2)
    code, out, err = bench(tmp_path, server.url, HEAD + block + "warmup_requests = 2\n",
                           "--no-calibrate")
    assert code == 0, (out, err)
    (result,) = rounds(out)
    assert [r["status_code"] for r in result["warmup"]] == [500, 500]
    assert result["completed"] == 4 and result["errors"] == 0 and len(result["records"]) == 4
    assert result["ttft"]["count"] == 4
    assert "2 warm-up requests not counted (2 failed)" in out["checks"][0]["detail"]
    assert "4 requests, 4 completed, 0 errors" in out["checks"][-1]["detail"]
    # the same server without warm-up: those two failures are the round's, and it fails
    server.set(fail_first=len(server.seen()) + 2)
    code, out, _ = bench(tmp_path, server.url, HEAD + block, "--no-calibrate")
    assert code == 1 and "2 errors (max 0)" in out["checks"][0]["detail"]


def test_chosen_percentiles_and_per_request_itl(server: Server, tmp_path: Path) -> None:
    server.set(chunk_delay_s=0.02)
    code, out, err = bench(tmp_path, server.url, 'percentiles = [99.9, 50, 75]\n' + HEAD + (
        '[[matrix]]\nconcurrency = [2]\ninput_tokens = [8]\noutput_tokens = [4]\n'
        'requests = 4\n'), "--no-calibrate")
    assert code == 0, (out, err)
    (result,) = rounds(out)
    assert result["spec"]["percentiles"] == [50, 75, 99.9]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        assert list(result[metric]["percentiles"]) == ["p50", "p75", "p99.9"]
        assert result[metric]["percentiles"]["p50"] == result[metric]["p50"]
    assert "p99.9" in out["checks"][0]["detail"]
    for record in result["records"]:
        assert len(record["itl_ms"]) == 3                   # 4 content chunks, 3 gaps
        assert all(15 <= gap <= 500 for gap in record["itl_ms"])


def test_percentile_keys() -> None:
    stats = percentiles([float(i) for i in range(1, 101)], [99.9, 25])
    assert stats.percentiles == {"p99.9": 99.901, "p25": 25.75} and stats.p50 == 50.5
    assert percentiles([1.0]).percentiles == {}


# --- saturation ---------------------------------------------------------------------------

SATURATION = HEAD + ('[slo]\ne2e_ms = 600\ngoodput_floor = 0.9\n'
                     '[[matrix]]\nconcurrency = [64]\nrate = [{rate}]\ninput_tokens = [8]\n'
                     'output_tokens = [2]\nrequests = {requests}\n')


@pytest.mark.serial  # judges rates and queueing
def test_a_round_past_saturation_is_marked_not_failed(server: Server, tmp_path: Path) -> None:
    server.set(capacity=1, service_s=0.05)        # serves 20 requests/s at most
    code, out, err = bench(tmp_path, server.url, SATURATION.format(rate=60, requests=36),
                           "--no-calibrate")
    check = out["checks"][0]
    assert code == 0 and check["status"] == "PASS", (out, err)
    (result,) = rounds(out)
    assert result["saturated"] is True and result["goodput"] < 0.9
    assert result["completed_requests_per_s"] < 0.9 * result["offered_requests_per_s"]
    assert check["detail"].startswith("saturated: completed ")
    assert "req/s sent (below 90%)" in result["saturation_reason"]
    assert "goodput not judged past saturation" in check["detail"]
    assert out["checks"][-1]["detail"].endswith("; past saturation: round-01-text-r60-in8-out2")


@pytest.mark.serial  # judges rates and queueing
def test_the_sweep_stops_past_saturation(server: Server, tmp_path: Path) -> None:
    """Rates 60, 80 and 5 req/s on a server of 20/s: 60 saturates, so 80 is not run; 5 is
    below it and runs. With stop_sweep = false all three run (the case that must differ)."""
    server.set(capacity=1, service_s=0.05)
    matrix = SATURATION.format(rate="60, 80, 5", requests=36)
    (tmp_path / "stops").mkdir()
    (tmp_path / "all").mkdir()
    code, out, err = bench(tmp_path / "stops", server.url, matrix, "--no-calibrate")
    assert code == 0, (out, err)
    ran = [r["spec"]["rate"] for r in rounds(out)]
    assert ran == [60, 5], ran
    totals = out["checks"][-1]
    folder = Path(out["evidence"]["bench"]) / "rounds"
    assert json.loads((folder / "02-not-run.json").read_text())["past_saturation"] == \
        "round-01-text-r60-in8-out2"
    assert totals["detail"].endswith("; past saturation: round-01-text-r60-in8-out2; not run "
                                     "past saturation: round-02-text-r80-in8-out2")
    code, out, err = bench(tmp_path / "all", server.url,
                           matrix.replace("[slo]", "[saturation]\nstop_sweep = false\n[slo]"),
                           "--no-calibrate")
    assert code == 0, (out, err)
    assert [r["spec"]["rate"] for r in rounds(out)] == [60, 80, 5]
    assert "not run" not in out["checks"][-1]["detail"]


@pytest.mark.serial  # judges rates and queueing
def test_a_round_below_saturation_is_not_marked_and_its_slo_still_judged(
        server: Server, tmp_path: Path) -> None:
    server.set(capacity=1, service_s=0.05)
    code, out, err = bench(tmp_path, server.url, SATURATION.format(rate=4, requests=10),
                           "--no-calibrate")
    assert code == 0, out["checks"][0]["detail"] if out else err
    (result,) = rounds(out)
    assert result["saturated"] is False and result["saturation_reason"] is None
    assert 0.9 * result["offered_requests_per_s"] <= result["completed_requests_per_s"]
    # below saturation a missed SLO is a FAIL, as always
    code, out, _ = bench(tmp_path, server.url,
                         SATURATION.format(rate=4, requests=10).replace("e2e_ms = 600",
                                                                        "e2e_ms = 10"),
                         "--no-calibrate")
    assert code == 1 and "below the floor 90%" in out["checks"][0]["detail"]
    assert rounds(out)[0]["saturated"] is False


def _records(ttft_ms: list[float], gap_s: float = 0.1, e2e_extra_s: float = 0.01
             ) -> list[RequestRecord]:
    return [RequestRecord(i=k, status_code=200, ttft_s=t / 1000, e2e_s=t / 1000 + e2e_extra_s,
                          sent_at_s=k * gap_s) for k, t in enumerate(ttft_ms)]


def test_saturation_rule_on_known_rounds() -> None:
    rule = Saturation()
    # a queue that keeps growing: TTFT rises third by third, completions keep pace
    offered, done, why = saturation(_records([50 + 10 * k for k in range(12)]), rule)
    assert why is not None and "TTFT grew across the round" in why and "req/s" not in why
    # steady service: nothing
    assert saturation(_records([50.0] * 12), rule)[2] is None
    # one clump of bursty arrivals inside the round raises one third only: no saturation
    clump = [60.0, 90, 70, 60, 300, 400, 500, 300, 60, 50, 70, 60]
    assert saturation(_records(clump), rule)[2] is None
    # … even where the last third ends slower than the first: the queue must grow throughout
    drained = [50.0, 50, 50, 50, 400, 500, 400, 300, 120, 110, 130, 120]
    assert saturation(_records(drained), rule)[2] is None
    # growth too small to be a queue (under ttft_growth_min_ms) is noise
    assert saturation(_records([1 + 0.5 * k for k in range(12)]), rule)[2] is None
    # the server finishing at a third of the send rate
    slow = [RequestRecord(i=k, status_code=200, ttft_s=0.05, e2e_s=0.06 + 0.2 * k,
                          sent_at_s=0.1 * k) for k in range(12)]
    offered, done, why = saturation(slow, rule)
    assert offered == 10.0 and done is not None and done < 4
    assert why is not None and why.startswith(f"completed {done:.2f} req/s of the 10.00")
    # lost requests do not count as completed
    assert saturation(_records([50.0] * 2) + [RequestRecord(i=9, status_code=None, error="x",
                                                           sent_at_s=5.0)], rule)[1] == 10.0


def test_closed_loop_rounds_are_never_judged_for_saturation(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(SATURATION.format(rate=4, requests=4) + (
        '[[matrix]]\nconcurrency = [2]\ninput_tokens = [8]\noutput_tokens = [2]\n'))
    opened, closed = load_matrix(path).rounds()
    assert opened.saturation is not None and closed.saturation is None


# --- bad input ----------------------------------------------------------------------------

BLOCK = '[[matrix]]\nconcurrency = [1]\ninput_tokens = [8]\noutput_tokens = [2]\n'
DATA = '[[matrix]]\nconcurrency = [1]\noutput_tokens = [2]\n[matrix.dataset]\n'


@pytest.mark.parametrize("matrix, files, words", [
    (BLOCK.replace("[1]\n", "[1]\nrate = [2]\nburstiness = 0\n", 1), {},
     "Input should be greater than 0 at matrix.0.burstiness"),
    (BLOCK.replace("[1]\n", "[1]\nrate = [2]\nburstiness = -1\n", 1), {},
     "greater than 0 at matrix.0.burstiness"),
    (BLOCK + "burstiness = 2\n", {}, "burstiness shapes the arrivals at a rate: give rate too"),
    ("percentiles = [50, 0]\n" + BLOCK, {}, "percentiles must be in (0, 100], got 0"),
    ("percentiles = [101]\n" + BLOCK, {}, "percentiles must be in (0, 100], got 101"),
    (BLOCK + "warmup_requests = -1\n", {}, "at matrix.0.warmup_requests"),
    (DATA + 'path = "nope.jsonl"\n', {}, "dataset file does not exist"),
    (DATA + 'path = "d.jsonl"\ncolumn = "text"\n', {"d.jsonl": '{"prompt": "hi"}\n'},
     "dataset row 1 has no column 'text' (columns: prompt)"),
    (DATA + 'path = "d.jsonl"\n', {"d.jsonl": '{"prompt": "hi"}\nnot json\n'},
     "dataset line 2 is not JSON"),
    (DATA + 'path = "d.jsonl"\n', {"d.jsonl": ""}, "dataset has no rows"),
    (DATA.replace("output_tokens = [2]\n", "") + 'path = "d.jsonl"\n',
     {"d.jsonl": '{"prompt": "hi"}\n'}, "the dataset gives no output length"),
    (DATA.replace("[1]\n", "[1]\ninput_tokens = [8]\n", 1) + 'path = "d.jsonl"\n',
     {"d.jsonl": '{"prompt": "hi"}\n'}, "input_tokens has no meaning with a dataset"),
    (DATA + 'path = "d.jsonl"\nmulti_turn = true\n', {"d.jsonl": '{"prompt": "hi"}\n'},
     "multi_turn needs a sharegpt dataset"),
    (DATA + 'path = "d.jsonl"\nsha256 = "' + "0" * 64 + '"\n',
     {"d.jsonl": '{"prompt": "hi"}\n'}, "the matrix pins 000"),
    (DATA + 'path = "d.jsonl"\nformat = "csv"\n', {}, "at matrix.0.dataset.format"),
    (DATA.replace("[1]\n", "[1]\nrate = [3]\n", 1) + 'path = "t.jsonl"\nformat = "trace"\n',
     {"t.jsonl": '{"timestamp": 0, "input_length": 4, "output_length": 2}\n'},
     "a trace sets its own send times"),
    (DATA.replace("[1]\n", "[1]\nrequests = 2\n", 1) + 'path = "t.jsonl"\nformat = "trace"\n',
     {"t.jsonl": '{"timestamp": 0, "input_length": 4, "output_length": 2}\n'},
     "a trace is replayed once, on its own times: requests may be at most its 1 rows"),
    (DATA + 'path = "t.jsonl"\nformat = "trace"\n',
     {"t.jsonl": '{"timestamp": 9, "input_length": 4, "output_length": 2}\n'
                 '{"timestamp": 3, "input_length": 4, "output_length": 2}\n'},
     "dataset row 2: timestamp 3 is before the previous row's 9.0"),
    (DATA + 'path = "t.jsonl"\nformat = "trace"\n',
     {"t.jsonl": '{"timestamp": 0, "input_length": 0, "output_length": 2}\n'},
     "'input_length' must be an integer >= 1"),
    (DATA + 'path = "s.json"\nformat = "sharegpt"\n',
     {"s.json": '[{"conversations": [{"from": "gpt", "value": "hi"}]}]'},
     "dataset row 1 has no human turn"),
])
def test_bad_shapes_are_one_line_exit_2(tmp_path: Path, matrix: str, files: dict[str, str],
                                        words: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # the matrix is refused before any request: the server is never reached
    code, _, err = bench(tmp_path, "http://127.0.0.1:9", TOP + matrix)
    assert code == 2 and err.startswith("imagekit: error: ") and err.count("\n") == 1, err
    assert words in err, err
    assert "matrix.toml" in err or str(tmp_path) in err


def test_every_matrix_field_is_documented() -> None:
    from imagekit.acceptance.matrix import Expectations, Matrix, MatrixBlock
    from imagekit.acceptance.models import Dataset, Saturation, Slo

    doc = (Path(__file__).parents[2] / "docs/reference/acceptance-matrix.md").read_text()
    missing = [f"{model.__name__}.{field}" for model in (Matrix, MatrixBlock, Expectations, Slo,
                                                        Dataset, Saturation)
               for field in model.model_fields if f"| `{field}` |" not in doc]
    assert not missing, missing
