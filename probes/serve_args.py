"""The engine's own parser judges the exact serve command imagekit will launch (no GPU).

argv: ENGINE JSON, JSON = {"prefill_candidates": [...], "commands": [{"label", "head", "switch",
"tail", "expect": {...}}]} (built by `imagekit.launch.command.serve_probe_input`). A command is
`head + [prefill switch] + tail`: the switch (what DISABLE_PIECEWISE_CUDA_GRAPH=1 appends) is
chosen HERE, from the parse: the first candidate spelling the engine accepts without a
deprecation warning and that really disables the prefill CUDA graph; else one it accepts with a
warning (kept). The chosen spelling is recorded (`prefill_switch`) and used by every launch.

- SGLang: `sglang.srt.server_args.prepare_server_args(argv)`, effective ServerArgs;
- vLLM: `make_arg_parser(FlexibleArgumentParser())` with the CPU platform selected (the record's
  section 4: the GPU-less node infers no device), the parsed namespace.

Checked against each command's profile: tensor-parallel size, context length, max requests, and
the prefill CUDA graph disabled when asked. An unknown or removed flag: FAIL naming the flag and
the engine version. A deprecated flag that still maps: PASS, the engine's warning kept. A parser
that cannot be imported: DEFERRED with why.
"""

import importlib.metadata as md
import json
import os
import re
import sys
import tempfile
import warnings

from _common import emit

ANSI = re.compile(r"\x1b\[[0-9;]*m")
UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)$", re.M)
#: a deprecation warning line (not the usage text, which lists flags like --allow-deprecated-…)
DEPRECATED = re.compile(r"is deprecated|deprecated and|will be removed|deprecation", re.I)
LAUNCHERS = {"sglang": ["python3", "-m", "sglang.launch_server"], "vllm": ["vllm", "serve"]}


class Captured:
    """Everything the parser writes (fd 1 and 2, logging, warnings) while it runs."""

    def __enter__(self):
        import logging

        sys.stdout.flush()
        sys.stderr.flush()
        # closed in __exit__ (the capture spans the parser's whole run)
        self.files = [tempfile.TemporaryFile(mode="w+b") for _ in (1, 2)]  # noqa: SIM115
        self.saved = [os.dup(1), os.dup(2)]
        for fd, target in zip((1, 2), self.files):
            os.dup2(target.fileno(), fd)
        self.records = []
        outer = self

        class Keep(logging.Handler):
            def emit(self, record):
                outer.records.append(record)

        self.handler = Keep(level=logging.WARNING)
        logging.getLogger().addHandler(self.handler)
        self.warn = warnings.catch_warnings(record=True)
        self.warned = self.warn.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        import logging

        self.warn.__exit__(None, None, None)
        logging.getLogger().removeHandler(self.handler)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        self.out, self.err = (self._read(f) for f in self.files)
        return False

    @staticmethod
    def _read(handle):
        handle.seek(0)
        text = handle.read().decode(errors="replace")
        handle.close()
        return ANSI.sub("", text)

    def warnings_said(self):
        said = []
        for record in self.records:
            try:
                said.append(ANSI.sub("", record.getMessage()))
            except Exception:  # a record whose message cannot be rendered
                said.append(ANSI.sub("", str(record.msg)))
        said += [str(w.message) for w in self.warned]
        for line in (self.err + "\n" + self.out).splitlines():
            line = line.strip()
            if line.startswith(("[", "usage:")) or line.startswith("--"):
                continue
            if DEPRECATED.search(line) and not any(s in line for s in said):
                said.append(line)
        return [s for s in dict.fromkeys(said) if s.strip()]


def version_of(engine):
    for name in (engine, f"{engine}-cpu"):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def sglang_parser():
    from sglang.srt.server_args import prepare_server_args

    def parse(args):
        return prepare_server_args(list(args))

    def effective(server_args):
        prefill = getattr(server_args, "cuda_graph_backend_prefill", None)
        if prefill is None and hasattr(server_args, "disable_piecewise_cuda_graph"):
            prefill = "disabled" if server_args.disable_piecewise_cuda_graph else "enabled"
        return {"tp": server_args.tp_size, "context_length": server_args.context_length,
                "max_requests": server_args.max_running_requests,
                "prefill_graph": None if prefill is None else str(prefill),
                "prefill_graph_disabled": None if prefill is None else str(prefill) == "disabled",
                "model": server_args.model_path}

    return "sglang.srt.server_args.prepare_server_args", parse, effective


def vllm_parser():
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()   # the record's section 4 (pinned internal)
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        where = "vllm.entrypoints.launchers.cli_args.make_arg_parser"
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        where = "vllm.entrypoints.openai.cli_args.make_arg_parser"

    def parse(args):
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        return parser.parse_args(list(args))

    def effective(ns):
        mode = None
        config = getattr(ns, "compilation_config", None)
        if isinstance(config, dict):
            mode = config.get("cudagraph_mode")
        elif config is not None:
            mode = getattr(config, "cudagraph_mode", None)
        mode = None if mode is None else str(getattr(mode, "name", mode))
        return {"tp": ns.tensor_parallel_size, "context_length": ns.max_model_len,
                "max_requests": ns.max_num_seqs, "prefill_graph": mode,
                "prefill_graph_disabled": None if mode is None else
                mode.upper().endswith("DECODE_ONLY") or mode.upper() == "NONE",
                "model": getattr(ns, "model_tag", None) or getattr(ns, "model", None)}

    return f"{where} (FlexibleArgumentParser, CPU platform)", parse, effective


def attempt(parse, effective, args):
    """(effective config or None, error text or None, warnings, unknown flags)."""
    with Captured() as cap:
        try:
            result, error = effective(parse(args)), None
        except SystemExit as exc:
            result, error = None, f"exit {exc.code}"
        except Exception as exc:  # the engine rejected the values: its own message
            result, error = None, f"{type(exc).__name__}: {exc}"
    unknown = []
    for match in UNRECOGNIZED.finditer(cap.err + "\n" + cap.out):
        unknown += match.group(1).split()
    if error is not None:
        said = [line.strip() for line in cap.err.splitlines() if "error" in line.lower()]
        error = (said[-1] if said else error)[:600]
    return result, error, cap.warnings_said(), unknown


def mismatches(expect, got):
    bad = []
    for key, want in expect.items():
        if want is None:
            continue
        if got.get(key) != want:
            bad.append(f"{key} {got.get(key)!r} (profile wants {want!r})")
    return bad


def choose_switch(parse, effective, base, candidates):
    """The prefill switch spelling the engine accepts: a clean one first, a deprecated one that
    still disables the prefill graph second; None when none does."""
    tried, clean, mapped = [], None, None
    for arg in candidates:
        got, error, said, unknown = attempt(parse, effective, base + [arg])
        ok = got is not None and got.get("prefill_graph_disabled") is True
        tried.append({"arg": arg, "accepted": ok, "warnings": said, "error": error,
                      "unknown": unknown,
                      "prefill_graph": got.get("prefill_graph") if got else None})
        if ok and not said and clean is None:
            clean = arg
        elif ok and mapped is None:
            mapped = arg
    return clean or mapped, tried


def main(engine, payload):
    version = version_of(engine)
    try:
        where, parse, effective = {"sglang": sglang_parser, "vllm": vllm_parser}[engine]()
    except KeyError:
        return emit("serve_args", "ERROR", f"unknown engine {engine!r}")
    except Exception as exc:  # ImportError, or the engine failing at import time
        return emit("serve_args", "DEFERRED",
                    f"{engine}'s own parser cannot be imported in this image "
                    f"({type(exc).__name__}: {str(exc)[:300]}): the serve command is unchecked",
                    engine=engine, version=version, parser=None, commands=[])
    plan = json.loads(payload)
    launcher = LAUNCHERS[engine]
    commands = plan.get("commands") or []
    if not commands:
        return emit("serve_args", "ERROR", "no serve command to parse was configured")
    switch, tried = None, []
    if any(c.get("switch") for c in commands):
        base = next(c for c in commands if c.get("switch"))["head"][len(launcher):]
        switch, tried = choose_switch(parse, effective, base, plan.get("prefill_candidates", []))
    results, failed = [], []
    for command in commands:
        head, tail = command["head"], command.get("tail", [])
        if command.get("switch") and switch is None:
            argv = head + tail
            detail = (f"{engine} {version} accepts none of the prefill switch spellings "
                      + ", ".join(t["arg"] for t in tried) + ": "
                      + "; ".join(f"{t['arg']}: {t['error'] or t['prefill_graph']}"
                                  for t in tried))
            results.append({"label": command["label"], "argv": argv, "status": "FAIL",
                            "detail": detail, "warnings": [], "effective": None})
            failed.append(f"{command['label']}: {detail}")
            continue
        argv = head + ([switch] if command.get("switch") else []) + tail
        if argv[:len(launcher)] != launcher:
            detail = f"not a {engine} serve command: {' '.join(argv[:3])}"
            results.append({"label": command["label"], "argv": argv, "status": "FAIL",
                            "detail": detail, "warnings": [], "effective": None})
            failed.append(f"{command['label']}: {detail}")
            continue
        got, error, said, unknown = attempt(parse, effective, argv[len(launcher):])
        expect = dict(command.get("expect") or {})
        if not command.get("switch"):
            expect.pop("prefill_graph_disabled", None)
        if got is None:
            flags = [u for u in unknown if u.startswith("-")] or unknown
            if unknown:
                detail = (f"{engine} {version} does not accept " + ", ".join(flags)
                          + f" (unrecognized arguments: {' '.join(unknown)}; removed or never "
                          f"a {engine} flag)")
            else:
                detail = f"{engine} {version} rejected the command: {error}"
            status = "FAIL"
        else:
            bad = mismatches(expect, got)
            status = "FAIL" if bad else "PASS"
            detail = (f"parsed by {engine} {version}, but " + "; ".join(bad)) if bad else \
                (f"parsed by {engine} {version}: tp {got['tp']}, context {got['context_length']}"
                 f", max requests {got['max_requests']}, prefill graph {got['prefill_graph']}"
                 + (f"; {len(said)} engine warning(s) kept: " + " | ".join(said)[:400]
                    if said else ""))
        results.append({"label": command["label"], "argv": argv, "status": status,
                        "detail": detail, "warnings": said, "effective": got,
                        "unknown": unknown, "error": error})
        if status != "PASS":
            failed.append(f"{command['label']}: {detail}")
    data = dict(engine=engine, version=version, parser=where, prefill_switch=switch,
                prefill_tried=tried, commands=results)
    if failed:
        return emit("serve_args", "FAIL", "; ".join(failed)[:1200], **data)
    warned = sum(1 for r in results if r["warnings"])
    return emit("serve_args", "PASS",
                f"{len(results)} serve command(s) parsed by {engine} {version}'s own parser"
                + (f" (prefill switch {switch})" if switch else "")
                + (f"; {warned} with engine warnings kept" if warned else ""), **data)


if __name__ == "__main__":
    if len(sys.argv) != 3:   # e.g. the cluster probe runner without a plan: nothing to judge
        sys.exit(emit("serve_args", "DEFERRED", "no serve command was given to parse (usage: "
                      "serve_args.py ENGINE JSON; imagekit's probe plan passes them)"))
    sys.exit(main(sys.argv[1], sys.argv[2]))
