"""Checks of user input, done before any network or cluster work.

Every function returns the checked value or raises `InvalidInput` with one line naming what was
wrong and where (exit 2). This module is in the types layer so that every layer may use it, and
it imports nothing heavy at module level (the CLI's `--help` must stay fast): PyYAML is imported
only by `load_yaml`.

Why each rule exists:
- numbers: click accepts `nan`, `inf` and negatives for a float option; a Pod created with a
  timeout of nan never ends, one with -5 ends before it starts.
- names: a Kubernetes name is a DNS-1123 label or subdomain; an OCI repository is lowercase path
  components. `UP::bad` or `../x` reach the API (or a file path) otherwise.
- files: read as UTF-8 with a size bound; a non-UTF-8 or huge file is one line, not a traceback
  or gigabytes in memory.
- YAML: aliases are refused (an alias bomb expands to gigabytes; kubectl refuses it too).
- paths from a spec stay inside the spec's directory (`../../../../etc/passwd` is refused
  without being read).
"""

from __future__ import annotations

import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from imagekit.errors import InvalidInput

#: Input files (specs, locks, Pod manifests, configs, records) are small; 4 MiB is generous.
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Integers in records and manifests: nothing we read needs more than 18 digits.
MAX_INT_DIGITS = 18

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_PART = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_OCI_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI_REPOSITORY = re.compile(rf"^{_OCI_COMPONENT}(?:/{_OCI_COMPONENT})*$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _shown(value: object) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------------- numbers

def positive(value: float | int | str | None, what: str, *, zero_ok: bool = False,
             maximum: float | None = None) -> float:
    """A finite number > 0 (>= 0 with zero_ok), at most `maximum` when given (a string is
    read as a number: an environment knob's text)."""
    if value is None:
        raise InvalidInput(f"{what} needs a number", where=what)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{what} must be a number, not {_shown(value)}", where=what) from None
    if not math.isfinite(number):
        raise InvalidInput(f"{what} must be a finite number, not {_shown(value)}", where=what)
    if number < 0 or (number == 0 and not zero_ok):
        raise InvalidInput(f"{what} must be {'>= 0' if zero_ok else '> 0'}, not {_shown(value)}",
                           where=what)
    if maximum is not None and number > maximum:
        raise InvalidInput(f"{what} must be at most {maximum:g}, not {_shown(value)}", where=what)
    return number


def count(value: int | None, what: str, *, minimum: int = 0,
          maximum: int = 10**MAX_INT_DIGITS) -> int:
    """An integer in [minimum, maximum] (a bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, not {_shown(value)}", where=what)
    if value < minimum or value > maximum:
        raise InvalidInput(f"{what} must be between {minimum} and {maximum}, not "
                           f"{_shown(value)}", where=what)
    return value


# ------------------------------------------------------------------------------------ names

def dns_label(value: str, what: str) -> str:
    """A Kubernetes DNS-1123 label (namespaces, most object names): [a-z0-9-], <= 63."""
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
        raise InvalidInput(f"{what} must be a DNS-1123 label (lowercase letters, digits and "
                           f"'-', at most 63, alphanumeric at both ends), not {_shown(value)!r}",
                           where=what)
    return value


def dns_subdomain(value: str, what: str) -> str:
    """A Kubernetes DNS-1123 subdomain (Pod, ConfigMap, PVC, PriorityClass names): <= 253."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise InvalidInput(f"{what} must be a DNS-1123 subdomain (lowercase letters, digits, "
                           f"'-' and '.', at most 253), not {_shown(value)!r}", where=what)
    return value


def label_pairs(values: list[str] | None, what: str) -> dict[str, str]:
    """`key=value` options (a nodeSelector), checked as the API server checks label keys and
    values, so a typo is one line here rather than a 422 after a pull Secret was created."""
    pairs: dict[str, str] = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        prefix, slash, name = key.rpartition("/")
        if not sep or not name:
            raise InvalidInput(f"{what} must look like key=value", where=value)
        if len(name) > 63 or not _LABEL_PART.match(name) or (slash and (
                len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))):
            raise InvalidInput(f"{what} key {_shown(key)!r} is not a Kubernetes label key "
                               "([prefix/]name: name <= 63 of [A-Za-z0-9-_.], alphanumeric at "
                               "both ends; prefix a DNS subdomain)", where=value)
        if len(val) > 63 or not _LABEL_PART.match(val):
            raise InvalidInput(f"{what} value {_shown(val)!r} is not a Kubernetes label value "
                               "(<= 63 of [A-Za-z0-9-_.], alphanumeric at both ends, or empty)",
                               where=value)
        pairs[key] = val
    return pairs


#: The taint effects a toleration may name (core/v1 TaintEffect).
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def tolerations(values: list[str] | None, what: str = "--toleration") -> list[dict]:
    """`key[=value]:Effect` (operator Equal) or `key:Effect` (operator Exists), as Pod
    tolerations; an unknown effect or a missing key is one line here, not a 422 later."""
    out: list[dict] = []
    for value in values or []:
        spec, sep, effect = value.rpartition(":")
        if not sep or effect not in TAINT_EFFECTS or not spec:
            raise InvalidInput("toleration must look like key[=value]:NoSchedule|NoExecute|"
                               "PreferNoSchedule", where=value)
        key, eq, val = spec.partition("=")
        out.append({"key": key, "operator": "Equal", "value": val, "effect": effect} if eq else
                   {"key": key, "operator": "Exists", "effect": effect})
    return out


def probe_choices(values: list[str] | None) -> list[tuple[str, list[str]]] | None:
    """`--probe NAME` or `--probe NAME=ARG,ARG` (repeatable) as (probe, arguments) pairs; None
    when none was given (the spec's plan applies then)."""
    if not values:
        return None
    plan = []
    for value in values:
        name, _, args = value.partition("=")
        plan.append((name, [a for a in args.split(",") if a] if args else []))
    return plan


_CUDA_VERSION = re.compile(r"\d+(\.\d+){0,2}")
_CUDA_ARCH = re.compile(r"(sm|compute)_\d{2,3}[af]?")


def image_facts(cuda: str | None, arch: str | None) -> dict[str, Any]:
    """PodIntent fields from `--image-cuda 12.8 --image-arch sm_80,sm_90` (what
    torch.version.cuda and torch.cuda.get_arch_list() say of the image)."""
    facts: dict[str, Any] = {}
    if cuda is not None:
        if not _CUDA_VERSION.fullmatch(cuda.strip()):
            raise InvalidInput("--image-cuda must look like 12.8", where=cuda)
        facts["image_cuda"] = cuda.strip()
    if arch is not None:
        entries = [a.strip() for a in arch.split(",") if a.strip()]
        bad = [a for a in entries if not _CUDA_ARCH.fullmatch(a)]
        if bad:
            raise InvalidInput("--image-arch entries look like sm_90 or compute_90",
                               where=",".join(bad))
        facts["image_arch"] = entries
    return facts


_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def env_pairs(values: list[str] | None, what: str) -> dict[str, str]:
    """`KEY=VALUE` options for a container's env, the key checked as the API server checks an
    EnvVar name (`BAD KEY=1` is one line here, not a ConfigMap created and a Pod refused)."""
    pairs: dict[str, str] = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{what} must look like KEY=VALUE", where=value[:80])
        if len(key) > 253 or not _ENV_NAME.match(key):
            raise InvalidInput(f"{what} name {_shown(key)!r} is not a valid environment "
                               "variable name (letters, digits, '_', '-', '.'; not starting "
                               "with a digit)", where=value[:80])
        if "\x00" in val or len(val) > 32768:
            raise InvalidInput(f"{what} value of {key} is not a usable value", where=key)
        pairs[key] = val
    return pairs


def oci_repository(value: str, what: str) -> str:
    """An OCI distribution repository name: lowercase path components, <= 255 characters."""
    if not isinstance(value, str) or len(value) > 255 or not _OCI_REPOSITORY.match(value):
        raise InvalidInput(f"{what} must be an OCI repository name (lowercase components "
                           f"separated by '/'), not {_shown(value)!r}", where=what)
    return value


def safe_name(value: str, what: str) -> str:
    """A name that becomes one path component (an evidence kind): no '/', no '..'."""
    if not isinstance(value, str) or not _SAFE_NAME.match(value) or ".." in value:
        raise InvalidInput(f"{what} must be a plain name (letters, digits, '.', '_', '-'), "
                           f"not {_shown(value)!r}", where=what)
    return value


# ------------------------------------------------------------------------------------ files

def read_bytes(path: Path | str, what: str, *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular, readable file of at most max_bytes."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat then refuses it
        # (and devices: /dev/zero would be read without end, /dev/null is not a file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise InvalidInput(f"{what} is not a regular file", where=str(path))
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise InvalidInput(f"{what} not found", where=str(path)) from None
    except IsADirectoryError:
        raise InvalidInput(f"{what} is a directory, not a file", where=str(path)) from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {what}: {exc.strerror or exc}", where=str(path)) \
            from None
    if len(data) > max_bytes:
        raise InvalidInput(f"{what} is larger than {max_bytes // 1024} KiB", where=str(path))
    return data


def read_text(path: Path | str, what: str, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A file's text as UTF-8 (a non-UTF-8 file is one line naming the byte offset)."""
    data = read_bytes(path, what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} is not UTF-8 text (byte {exc.start})", where=str(path)) \
            from None


def inside(root: Path, relative: str, what: str, where: str) -> Path:
    """`root / relative`, refused unless it stays inside root (after resolving links).

    Nothing is read or printed from a refused path."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise InvalidInput(f"{what} must be a relative path", where=where)
    if os.path.isabs(relative):
        raise InvalidInput(f"{what} {_shown(relative)!r} must be relative to the spec's "
                           "directory", where=where)
    base = Path(root).resolve()
    full = (base / relative).resolve()
    if full != base and base not in full.parents:
        raise InvalidInput(f"{what} {_shown(relative)!r} leaves the spec's directory",
                           where=where)
    return full


def writable_dir(path: Path | str, what: str) -> Path:
    """A directory we can write into, created when missing; checked before any network work
    so that nothing is done that cannot be recorded."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise InvalidInput(f"{what} is not a writable directory: {exc.strerror or exc}",
                           where=str(path)) from None
    return path


def writable_file(path: Path | str, what: str) -> Path:
    """A file we may (over)write: not a directory, its directory writable (created)."""
    path = Path(path)
    if path.is_dir():
        raise InvalidInput(f"{what} names a directory, not a file", where=str(path))
    writable_dir(path.parent, what)
    if path.exists() and not os.access(path, os.W_OK):
        raise InvalidInput(f"{what} is not writable", where=str(path))
    return path


def existing_dir(path: Path | str, what: str) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise InvalidInput(f"{what} is not an existing directory", where=str(path))
    return path


def pem_ca_file(path: Path | str, what: str = "--ca-file") -> Path:
    """A readable file holding at least one PEM certificate that OpenSSL accepts."""
    import ssl

    text = read_text(path, what, max_bytes=MAX_FILE_BYTES)
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise InvalidInput(f"{what} holds no PEM certificate", where=str(path))
    try:
        ssl.create_default_context().load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0][:80]
        raise InvalidInput(f"{what} is not a usable PEM certificate: {reason}",
                           where=str(path)) from None
    return Path(path)


# ------------------------------------------------------------------------------------- YAML

def load_yaml(text: str, where: str, *, what: str = "YAML") -> Any:
    """One YAML document, safely: aliases and anchors refused before anything is built, big
    integers refused (a 400-digit number is not a count)."""
    import yaml

    class _NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise InvalidInput(f"{what} uses an alias (*{event.anchor}); aliases are "
                                   "refused", where=where)
            event = self.peek_event()
            if getattr(event, "anchor", None):
                raise InvalidInput(f"{what} defines an anchor (&{event.anchor}); anchors are "
                                   "refused", where=where)
            return super().compose_node(parent, index)

    try:
        loader = _NoAliases(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInput(f"{what} is not YAML: {first}", where=where) from None
    bounded(data, where, what=what)
    return data


def bounded(data: Any, where: str, *, what: str = "document", depth: int = 0) -> Any:
    """Refuse integers beyond MAX_INT_DIGITS digits and nesting beyond 64 levels."""
    if depth > 64:
        raise InvalidInput(f"{what} nests deeper than 64 levels", where=where)
    if isinstance(data, bool):
        return data
    if isinstance(data, int):
        if abs(data) >= 10**MAX_INT_DIGITS:
            raise InvalidInput(f"{what} holds an integer of more than {MAX_INT_DIGITS} digits",
                               where=where)
    elif isinstance(data, float):
        if not math.isfinite(data):
            raise InvalidInput(f"{what} holds a non-finite number", where=where)
    elif isinstance(data, dict):
        for key, value in data.items():
            bounded(key, where, what=what, depth=depth + 1)
            bounded(value, where, what=what, depth=depth + 1)
    elif isinstance(data, list):
        for value in data:
            bounded(value, where, what=what, depth=depth + 1)
    return data


def load_json(text: str, where: str, *, what: str = "JSON") -> Any:
    """One JSON document with the same bounds as load_yaml (no NaN, no 400-digit integers)."""
    import json

    def _constant(name: str) -> Any:
        raise InvalidInput(f"{what} holds {name}, which is not JSON", where=where)

    def _int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise InvalidInput(f"{what} holds an integer of more than {MAX_INT_DIGITS} digits",
                               where=where)
        return int(digits)

    try:
        data = json.loads(text, parse_constant=_constant, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not JSON: {exc.msg} (line {exc.lineno})", where=where) \
            from None
    except RecursionError:
        raise InvalidInput(f"{what} nests too deeply", where=where) from None
    return bounded(data, where, what=what)
