"""Reports of every image of the images spec at once (its latest build each), for a rehearsal's
or a release's artefacts directory."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput, NotFound
from imagekit.evidence import EvidenceStore
from imagekit.report.collect import build_report
from imagekit.report.decision import derive
from imagekit.report.markdown import checks_line
from imagekit.report.render import FORMATS, SUFFIXES, render, write_all
from imagekit.report.resolve import resolve_name
from imagekit.results import Status


class SpecReport(BaseModel):
    """One image of the spec: its report's verdict and files, or why there is none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    digest: str | None = None
    status: Status | None = None
    #: the decision's sentence, read first (decision.derive); `status` is the raw worst
    #: status, kept for machines (a profile's acceptance does not change it)
    decision: str | None = None
    #: the evaluated checks the decision counts ("12 PASS, 1 FAIL (accepted)")
    checks: str = ""
    files: list[str] = []
    missing: str | None = None


def reports_for_spec(store: EvidenceStore, out: Path | str, *, fmt: str = "all",
                     profile: str | None = None, required: Iterable[str] | None = None,
                     spec_path: Path | None = None, state_dir: Path | None = None
                     ) -> list[SpecReport]:
    """Write `fmt` (or all formats) for the latest build of each spec image into `out`. An image
    without a build, or whose build has no evidence, is listed with why (`missing`).
    `spec_path`: the images spec (the CLI's `--spec`/$IMAGEKIT_IMAGES_SPEC, else the default
    one); `state_dir`: infra's state (build_report)."""
    if fmt not in (*FORMATS, "all"):
        raise InvalidInput(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)}, all)")
    from imagekit.spec import load_spec

    spec = load_spec(spec_path)
    profile_name, _ = spec.profile(profile)
    out = Path(out)
    results = []
    for name in spec.images:
        try:
            digest = resolve_name(name, store, profile=profile_name)
        except NotFound as exc:
            results.append(SpecReport(image=name, missing=exc.one_line()))
            continue
        try:
            report = build_report(store, digest, required=required, requested=name, name=name,
                                  profile=profile_name, spec_path=spec_path,
                                  state_dir=state_dir)
        except NotFound as exc:
            results.append(SpecReport(image=name, digest=str(digest), missing=exc.one_line()))
            continue
        if fmt == "all":
            paths = list(write_all(report, out).values())
        else:
            out.mkdir(parents=True, exist_ok=True)
            hex_part = report.subject.partition(":")[2][:12]
            path = out / f"{name}-{hex_part}{SUFFIXES[fmt]}"
            path.write_text(render(report, fmt))
            paths = [path]
        decision = derive(report)
        results.append(SpecReport(image=name, digest=report.subject, status=report.status,
                                  decision=decision.summary,
                                  checks=checks_line(report, decision),
                                  files=[str(p) for p in paths]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.md").write_text(index_markdown(results, profile_name, out))
    return results


def index_markdown(results: list[SpecReport], profile: str, out: Path) -> str:
    """One table over the spec's images: the first line and each row lead with the decision,
    the evaluated checks beside it (not a raw worst status), digest and report files."""
    first = "; ".join(f"{item.image}: " + (item.decision or "no report") if not item.missing
                      else f"{item.image}: no report ({item.missing})" for item in results)
    lines = [f"**{first or 'no image in the spec'}**", "",
             f"# Image reports (profile {profile})", "",
             "| image | decision | checks | digest | reports |", "|---|---|---|---|---|"]
    for item in results:
        if item.missing:
            lines.append(f"| {item.image} | **missing** | | | {item.missing} |")
            continue
        links = ", ".join(f"[{_format_of(f)}]({Path(f).relative_to(out)})"
                          if Path(f).is_relative_to(out) else f for f in item.files)
        decision = (item.decision or "").replace("|", "\\|")
        lines.append(f"| {item.image} | **{decision}** | "
                     f"{item.checks} | `{item.digest}` | {links} |")
    return "\n".join(lines) + "\n"


def _format_of(path: str) -> str:
    for fmt, suffix in sorted(SUFFIXES.items(), key=lambda kv: -len(kv[1])):
        if path.endswith(suffix):
            return fmt
    return Path(path).suffix.lstrip(".")
