"""The HTML page is self-contained and its plots render in a real browser (Debian chromium,
headless): the DOM after layout carries the SVG plots with a non-empty bounding box."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from imagekit.report import build_report, render
from tests.report.conftest import write_rehearsal

_CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                   "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _browser(chromium: str, tmp_path: Path, page: Path, *extra: str) -> str:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    done = subprocess.run([chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra,
                           f"file://{page}"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_html_is_self_contained(rehearsal) -> None:
    page = render(build_report(rehearsal.store, rehearsal.digest), "html")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page
    assert page.count('class="point"') == 6          # one per all-reduce message size
    assert page.count('class="bar"') == 18           # 3 metrics x 2 rounds x 3 percentiles


def test_html_plots_render_in_headless_chromium(rehearsal, chromium, tmp_path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(build_report(rehearsal.store, rehearsal.digest), "html"))
    dom = _browser(chromium, tmp_path, page, "--dump-dom")
    plots = re.search(r'<body[^>]* data-plots="([^"]*)"', dom).group(1).split(",")
    assert sorted(plots) == ["plot-allreduce-busbw:yes", "plot-latency-e2e-s:yes",
                             "plot-latency-itl-s:yes", "plot-latency-ttft-s:yes"]
    busbw = re.search(r'<svg id="plot-allreduce-busbw".*?</svg>', dom, re.S).group(0)
    assert len(re.findall(r'<circle class="point"', busbw)) == 6
    assert "busbw (GB/s)" in busbw and 'data-rendered="yes"' in busbw
    latency = re.search(r'<svg id="plot-latency-ttft-s".*?</svg>', dom, re.S).group(0)
    assert len(re.findall(r'<rect class="bar"', latency)) == 6
    assert "p99" in latency
    shot = tmp_path / "report.png"
    _browser(chromium, tmp_path, page, f"--screenshot={shot}", "--window-size=1200,2400")
    assert shot.stat().st_size > 10_000


def test_html_without_measurements_has_no_plots(store, chromium, tmp_path) -> None:
    r = write_rehearsal(store, "vllm", preflight=False)
    report = build_report(store, r.digest)
    report = report.model_copy(update={"latency": []})
    page = tmp_path / "bare.html"
    page.write_text(render(report, "html"))
    dom = _browser(chromium, tmp_path, page, "--dump-dom")
    assert 'data-plots=""' in dom and 'class="plot"' not in dom
    assert "No evidence" not in dom and "GPU preflight" not in dom


def test_real_gpu_preflight_records_plot(store, chromium, tmp_path) -> None:
    """The GPU helper's committed H200 sample records, recorded through its own code, plot."""
    from imagekit.gpu.evidence import record_preflight
    from imagekit.oci import Digest

    repo = Path(__file__).resolve().parents[2]
    samples = sorted((repo / "gpu_checks" / "samples").glob("*h200x2.json"))
    assert samples, "gpu_checks/samples/*h200x2.json is the real two-GPU record"
    r = write_rehearsal(store, preflight=False)
    record_preflight(samples[-1], store, digest=Digest.parse(r.digest))
    report = build_report(store, r.digest)
    [preflight] = report.preflight
    assert preflight.world_size == 2 and preflight.backend == "nccl"
    assert any(p.busbw_GBps for p in preflight.sizes)
    page = tmp_path / "h200.html"
    page.write_text(render(report, "html"))
    dom = _browser(chromium, tmp_path, page, "--dump-dom")
    assert "plot-allreduce-busbw:yes" in dom
    busbw = re.search(r'<svg id="plot-allreduce-busbw".*?</svg>', dom, re.S).group(0)
    assert len(re.findall(r'<circle class="point"', busbw)) == len(preflight.sizes)


def test_single_gpu_preflight_plots_algbw_not_zero_busbw(store) -> None:
    from imagekit.gpu.evidence import record_preflight
    from imagekit.oci import Digest

    repo = Path(__file__).resolve().parents[2]
    samples = sorted((repo / "gpu_checks" / "samples").glob("*h200x1.json"))
    assert samples, "gpu_checks/samples/*h200x1.json is the real one-GPU record"
    sample = samples[-1]
    r = write_rehearsal(store, preflight=False)
    record_preflight(sample, store, digest=Digest.parse(r.digest))
    report = build_report(store, r.digest)
    assert all(p.busbw_GBps == 0 for p in report.preflight[0].sizes)    # n=1 drives no link
    page = render(report, "html")
    assert 'id="plot-allreduce-algbw"' in page and 'id="plot-allreduce-busbw"' not in page
    assert "busbw is 0 at world size 1" in page
