"""`images verify --rebuild`: does this commit build the digest that was verified?

The image is built twice from the same inputs (the lock's base digest, the checkout's build
context, the build args, SOURCE_DATE_EPOCH): on the build engine's main instance (its own cache)
and on a fresh instance with an empty data root (nothing shared but the registry the base is
pulled from). Both go to OCI layouts; their linux/amd64 manifest digests are compared with each
other and with the expected digest (the one `images verify` just pushed, or an auditor's
`--expect-digest`).

- PASS: both builders gave the expected digest (or each other's, when none is expected).
- FAIL: they differ (the first differing layer and its differing files are named, the full
  listing kept in evidence), or both agree on another digest than the one expected.
- DEFERRED: a fresh builder could not run here (not root, no disk, the engine would not
  start); never a PASS.
"""

from __future__ import annotations

from pathlib import Path

from imagekit.build.builder import build_on, layout_folder
from imagekit.build.epoch import source_date_epoch
from imagekit.build.layout import platform_image
from imagekit.build.reproduce import compare_layouts
from imagekit.engine import Engine, find_docker_binary
from imagekit.errors import InfraError
from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.kinds import RebuildResult
from imagekit.infra import build_engine
from imagekit.infra.state import StatePaths
from imagekit.oci.digest import Digest
from imagekit.results import CheckResult, Status
from imagekit.spec import ImagesSpec, resolve_image

KIND = "rebuild"
CHECK = "reproducible"


def rebuild_image(spec: ImagesSpec, name: str, store: EvidenceStore, *,
                  profile: str | None = None, expect: Digest | None = None,
                  pip_cert: Path | None = None, docker: str | None = None,
                  config_dir: Path | None = None) -> CheckResult:
    """Build `name` on two builder instances and judge (module docstring); recorded as a
    `rebuild` attempt (the builds' logs, both digests, the difference)."""
    image = resolve_image(spec, name, profile)
    epoch = source_date_epoch(image.context, image.base_resolved)
    paths = StatePaths()
    client = Engine(binary=find_docker_binary(docker), config_dir=config_dir)
    subjects = [Subject.of(image.base_digest, Role.BASE, str(image.base_pinned))]
    if expect is not None:
        subjects.insert(0, Subject.of(expect, Role.SUBJECT))
    with store.attempt(f"rebuild-{name}", KIND, subjects=subjects, profile=image.profile,
                       expected=str(expect) if expect else None,
                       source_date_epoch=epoch.value) as attempt:

        def record(verdict: Status, detail: str, builder: str = "", first: Digest | None = None,
                   second: Digest | None = None, diff: dict | None = None) -> CheckResult:
            attempt.write_result(RebuildResult(
                name=name, profile=image.profile, base=str(image.base_pinned),
                source_date_epoch=epoch.value, epoch_origin=epoch.origin, builder=builder,
                expected=str(expect) if expect else None,
                first=str(first) if first else None, second=str(second) if second else None,
                verdict=verdict, detail=detail, diff=diff))
            check = CheckResult(name=CHECK, status=verdict, detail=detail,
                                data={"evidence": str(attempt.path),
                                      "first": str(first) if first else None,
                                      "second": str(second) if second else None})
            attempt.add_check(check)
            return check

        def build(instance: build_engine.BuildEngineInstance, layout: Path, label: str
                  ) -> bool:
            outcome = build_on(instance, client, image, image.context, epoch, layout,
                               pip_cert=pip_cert, label=f"rebuild {name} ({label})")
            attempt.write_text(f"build-{label}.log", outcome.log)
            return outcome.ok

        try:
            main = build_engine.start(paths)
            builder = main.describe()
            with layout_folder(paths) as first_layout, layout_folder(paths) as second_layout:
                if not build(main, first_layout, "main"):
                    return record(Status.FAIL, f"the build of {name} failed on the main "
                                  "builder (see build-main.log)", builder)
                with build_engine.fresh_instance(paths) as fresh:
                    if not build(fresh, second_layout, "fresh"):
                        return record(Status.FAIL, f"the build of {name} failed on the fresh "
                                      "builder (see build-fresh.log)", builder)
                diff = compare_layouts(first_layout, second_layout)
                first = platform_image(first_layout).digest
                second = platform_image(second_layout).digest
        except InfraError as exc:
            return record(Status.DEFERRED, f"a second builder could not run here: "
                          f"{exc.one_line()}")
        data = diff.model_dump(mode="json")
        attempt.write_json("difference.json", data)
        if not diff.equal:
            return record(Status.FAIL, f"two builds of {name} differ: {diff.summary()}",
                          builder, first, second, data)
        if expect is not None and first != expect:
            return record(Status.FAIL, f"this checkout builds {first} on two builders, not "
                          f"the expected {expect} (epoch {epoch.value} from {epoch.origin})",
                          builder, first, second, data)
        said = "the expected digest" if expect is not None else "the same digest"
        return record(Status.PASS, f"two builders (main and fresh) gave {said} {first}",
                      builder, first, second, data)
