"""A record-scale image, generated (never downloaded) and cached by content.

The record's SGLang CUDA base has 63 layers. This stands in for it: 63 layers, about 1.5 GB
uncompressed at `scale=1.0` — mostly incompressible shared-object layers (random bytes in
`lib*.so` files), compressible source layers (text drawn from a small vocabulary, ~3x at gzip
-6), and three layers of 150 MB — as an official copy (gzip -6) and a mirror recompressed at
gzip -1 (other blob digests, the same diffIDs and config).

`scale` shrinks every layer's bytes (never the layer count): the registry tests run the record's
63 layers at a few percent of its bytes, `make bench` at full size.

Generated once per (GENERATOR, scale) and kept under `cache_root()` (IMAGEKIT_RECORD_CACHE,
else /var/lib/imagekit/bench/record when writable, else $TMPDIR): blobs by digest plus
`layout.json`; a half-written cache is never used (built in a temporary folder, renamed).
`push_record` uploads it into a registry once (blobs and manifests already there are skipped).

A large image (`plan_large(total_bytes)`, `generate(total_bytes=N)`): 63 layers of random
(incompressible) shared objects, three of them 1/8 of the total each (1 GB at 8 GB), the rest
spread over the other 60; an official copy only, at gzip -1. It is generated STREAMED: each
layer's tar is written, compressed and hashed (diffID and blob digest) in chunks of
`STREAM_CHUNK`, never held whole in memory, straight into its blob file; cached by content
like the record image (`large-<key>` under `cache_root()`). Disk: about the image's size.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import ManifestBlob, RegistryClient

GENERATOR = 1  # bump when the content changes: the cache key includes it
LAYERS = 63
MB = 1_000_000
BIG = 150 * MB
_WORDS = [w.encode() for w in (  # noqa: SIM905 - one string reads as the vocabulary
    "static inline const void int char return if else for while struct union enum typedef "
    "unsigned size_t uint8_t uint32_t uint64_t float double half bfloat16 cuda kernel "
    "__global__ __device__ threadIdx blockIdx blockDim gridDim warp shfl sync atomicAdd "
    "tensor shape stride dtype device stream event alloc free memcpy launch grid block "
    "import from def class self torch numpy triton jit autotune config meta attn rope norm "
    "layer weight bias scale zero point quant dequant fp8 int4 gemm gemv moe expert router "
    "topk softmax logits token batch seq len head dim hidden rank world nccl allreduce "
    "{ } ( ) ; , = == != < > <= >= + - * / % && || ! & | ^ ~ << >> -> :: # include define"
).split()]
_WORDS = (_WORDS * (256 // len(_WORDS) + 1))[:256]


@dataclass(frozen=True)
class LayerPlan:
    index: int
    kind: str   # "so" (incompressible) or "src" (compressible)
    size: int   # bytes of file content (the tar adds headers)


def plan(scale: float = 1.0) -> list[LayerPlan]:
    """63 layers: three of 150 MB (shared objects), 40 shared-object layers of 3-25 MB and 20
    source layers of 10-40 MB (≈1.5 GB in all at scale 1), every size times `scale`."""
    rng = random.Random(63)
    layers: list[tuple[str, int]] = [("so", BIG)] * 3
    layers += [("so", rng.randint(3 * MB, 25 * MB)) for _ in range(40)]
    layers += [("src", rng.randint(10 * MB, 40 * MB)) for _ in range(20)]
    rng.shuffle(layers)
    return [LayerPlan(i, kind, max(4096, int(size * scale))) for i, (kind, size)
            in enumerate(layers)]


def _content(layer: LayerPlan) -> bytes:
    rng = random.Random(1_000_003 * (layer.index + 1))
    if layer.kind == "so":
        return rng.randbytes(layer.size)
    words = b" ".join(map(_WORDS.__getitem__, rng.randbytes(layer.size // 4 + 16)))
    return words[:layer.size]


def layer_tar(layer: LayerPlan) -> bytes:
    """The layer's tar: its content split over a few files (`lib<i>-<n>.so` or `src/<n>.cu`)."""
    body = _content(layer)
    files = 1 if layer.size < 4 * MB else 4
    step = -(-len(body) // files)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for n in range(files):
            part = body[n * step:(n + 1) * step]
            name = (f"usr/lib/x86_64-linux-gnu/lib{layer.index}-{n}.so" if layer.kind == "so"
                    else f"opt/src/layer{layer.index}/{n}.cu")
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(part), 1700000000, 0o644
            tar.addfile(info, io.BytesIO(part))
    return buffer.getvalue()


GENERATOR_LARGE = 1  # bump when the large image's content changes: its cache key includes it
STREAM_CHUNK = 1 << 20  # bytes generated, tarred, compressed and hashed at a time
LARGE_FILE = 256 * MB  # a large layer's content is split into files of at most this size


def plan_large(total_bytes: int) -> list[LayerPlan]:
    """63 layers of random content adding up to exactly `total_bytes`: three of
    `total_bytes // 8` each (1 GB or more at 8 GB), the other 60 sharing the rest (sizes drawn
    between 0.5x and 1.5x of their mean), in a fixed shuffled order."""
    big = total_bytes // 8
    rest = total_bytes - 3 * big
    others = LAYERS - 3
    if rest < others * 4096:
        raise ValueError(f"a large image of {total_bytes} bytes is too small for "
                         f"{LAYERS} layers")
    rng = random.Random(8_000_063)
    weights = [rng.uniform(0.5, 1.5) for _ in range(others)]
    scale = (rest - others * 4096) / sum(weights)
    sizes = [4096 + int(w * scale) for w in weights]
    sizes[-1] += rest - sum(sizes)  # exact total
    layers = [big] * 3 + sizes
    rng.shuffle(layers)
    return [LayerPlan(i, "so", size) for i, size in enumerate(layers)]


class _RandomReader:
    """`size` random bytes (seeded by the layer) read in pieces: never all in memory."""

    def __init__(self, seed: int, size: int) -> None:
        self.rng, self.left = random.Random(seed), size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        self.left -= n
        return self.rng.randbytes(n) if n else b""


class _BlobWriter:
    """The sink of a layer's tar: hashes the tar (diffID), gzips it at `level` and writes the
    compressed bytes to `path`, hashing them too (the blob digest). Chunk by chunk."""

    def __init__(self, path: Path, level: int) -> None:
        self.file = path.open("wb")
        self.diff = hashlib.sha256()
        self.blob = hashlib.sha256()
        self.tar_bytes = self.blob_bytes = 0
        self.zlib = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing

    def _out(self, data: bytes) -> None:
        if data:
            self.blob.update(data)
            self.blob_bytes += len(data)
            self.file.write(data)

    def write(self, data: bytes) -> int:
        self.diff.update(data)
        self.tar_bytes += len(data)
        self._out(self.zlib.compress(data))
        return len(data)

    def tell(self) -> int:
        return self.tar_bytes

    def close(self) -> None:
        self._out(self.zlib.flush())
        self.file.close()


def stream_layer(layer: LayerPlan, folder: Path, level: int = 1) -> tuple[dict, str, int]:
    """Write `layer` (random content, `lib<i>-<n>.so` files of at most LARGE_FILE) as a gzip'ed
    tar blob under `folder`, streamed: (descriptor, diffID, tar bytes)."""
    files = max(1, -(-layer.size // LARGE_FILE))
    step = -(-layer.size // files)
    partial = folder / f".layer-{layer.index}.partial"
    sink = _BlobWriter(partial, level)
    try:
        with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT,
                          copybufsize=STREAM_CHUNK) as tar:
            for n in range(files):
                size = min(step, layer.size - n * step)
                info = tarfile.TarInfo(f"usr/lib/x86_64-linux-gnu/lib{layer.index}-{n}.so")
                info.size, info.mtime, info.mode = size, 1700000000, 0o644
                seed = 1_000_003 * (layer.index + 1) + 7919 * n + 8_000_000_000
                tar.addfile(info, _RandomReader(seed, size))
        sink.close()
    except BaseException:
        sink.file.close()
        partial.unlink(missing_ok=True)
        raise
    digest = "sha256:" + sink.blob.hexdigest()
    partial.rename(folder / digest.replace(":", "-"))
    return ({"mediaType": mt.OCI_LAYER_GZIP, "digest": digest, "size": sink.blob_bytes},
            "sha256:" + sink.diff.hexdigest(), sink.tar_bytes)


def cache_root() -> Path:
    explicit = os.environ.get("IMAGEKIT_RECORD_CACHE")
    if explicit:
        return Path(explicit)
    shared = Path("/var/lib/imagekit/bench/record")
    try:
        shared.mkdir(parents=True, exist_ok=True)
        if os.access(shared, os.W_OK):
            return shared
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / "imagekit-record"


def cache_key(scale: float) -> str:
    spec = json.dumps({"generator": GENERATOR, "scale": scale,
                       "plan": [(p.kind, p.size) for p in plan(scale)]}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def cache_key_large(total_bytes: int) -> str:
    spec = json.dumps({"generator": GENERATOR_LARGE, "large": total_bytes,
                       "file_max": LARGE_FILE, "level": 1,
                       "plan": [p.size for p in plan_large(total_bytes)]}, sort_keys=True)
    return "large-" + hashlib.sha256(spec.encode()).hexdigest()[:16]


@dataclass
class RecordImage:
    """The generated image on disk: two manifests (official, mirror) over blobs by digest."""

    root: Path
    layout: dict

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest.replace(":", "-")

    def manifest(self, which: str) -> ManifestBlob:
        data = (self.root / f"manifest-{which}.json").read_bytes()
        return ManifestBlob(data, mt.OCI_MANIFEST, Digest.of_bytes(data))

    def descriptors(self, which: str) -> list[dict]:
        body = json.loads(self.manifest(which).data)
        return [body["config"], *body["layers"]]

    def total_bytes(self, which: str) -> int:
        return sum(d["size"] for d in self.descriptors(which))

    @property
    def uncompressed_bytes(self) -> int:
        return self.layout["uncompressed_bytes"]

    @property
    def repository(self) -> str:
        return self.layout.get("repository") or f"record/r{self.layout['key']}"


def _compress_to(tar: bytes, level: int, folder: Path) -> dict:
    data = gzip.compress(tar, compresslevel=level, mtime=0)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (folder / digest.replace(":", "-")).write_bytes(data)
    return {"mediaType": mt.OCI_LAYER_GZIP, "digest": digest, "size": len(data)}


def _config(diff_ids: list[str]) -> bytes:
    return json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/cuda/bin:/usr/bin"], "Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": f"record layer {i}"} for i in range(LAYERS)],
    }, sort_keys=True).encode()


def _cached(key: str, build) -> RecordImage:
    """The image cached under `key`, or `build(work)` run once into a fresh folder that is
    renamed into place only when complete (a failed or killed build leaves nothing cached).
    `build` writes the blobs and manifests and returns the layout's own fields."""
    final = cache_root() / key
    if (final / "layout.json").exists():
        return RecordImage(final, json.loads((final / "layout.json").read_text()))
    final.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=final.parent))
    try:
        (work / "blobs").mkdir()
        layout = {"key": key, **build(work), "layers": LAYERS,
                  "generated_s": round(time.monotonic() - started, 1)}
        (work / "layout.json").write_text(json.dumps(layout, indent=2))
        try:
            work.rename(final)
        except OSError:  # another process finished first: use theirs
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return RecordImage(final, json.loads((final / "layout.json").read_text()))


def _write_manifests(work: Path, diff_ids: list[str], copies: dict[str, list[dict]]) -> None:
    """The shared config blob and one `manifest-<copy>.json` per copy of the layers."""
    config = _config(diff_ids)
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    (work / "blobs" / config_digest.replace(":", "-")).write_bytes(config)
    for which, layers in copies.items():
        body = {"schemaVersion": 2, "mediaType": mt.OCI_MANIFEST,
                "config": {"mediaType": mt.OCI_CONFIG, "digest": config_digest,
                           "size": len(config)},
                "layers": layers}
        (work / f"manifest-{which}.json").write_bytes(json.dumps(body, indent=2).encode())


def _generate_large(total_bytes: int, log=None) -> RecordImage:
    """The large image (official copy only, gzip -1), every layer streamed to its blob file."""
    key = cache_key_large(total_bytes)

    def build(work: Path) -> dict:
        started = time.monotonic()
        layers, diff_ids, uncompressed = [], [], 0
        for layer in plan_large(total_bytes):
            descriptor, diff_id, tar_bytes = stream_layer(layer, work / "blobs", level=1)
            layers.append(descriptor)
            diff_ids.append(diff_id)
            uncompressed += tar_bytes
            if log:
                log(f"large image: layer {layer.index + 1}/{LAYERS} ({layer.size / MB:.1f} MB, "
                    f"{time.monotonic() - started:.0f} s)")
        _write_manifests(work, diff_ids, {"official": layers})
        return {"total_bytes": total_bytes, "generator": GENERATOR_LARGE,
                "copies": ["official"], "repository": f"record/{key}",
                "uncompressed_bytes": uncompressed}

    return _cached(key, build)


def generate(scale: float = 1.0, log=None, *, total_bytes: int | None = None) -> RecordImage:
    """The record image at `scale`, from the cache when it is there (built once otherwise).
    With `total_bytes`: the large image of that many content bytes instead (`plan_large`,
    streamed, official copy only; `scale` is not used)."""
    if total_bytes is not None:
        return _generate_large(total_bytes, log)

    def build(work: Path) -> dict:
        blobs = work / "blobs"
        official, mirror, diff_ids, uncompressed = [], [], [], 0
        for layer in plan(scale):
            tar = layer_tar(layer)
            uncompressed += len(tar)
            diff_ids.append("sha256:" + hashlib.sha256(tar).hexdigest())
            official.append(_compress_to(tar, 6, blobs))
            mirror.append(_compress_to(tar, 1, blobs))
            del tar
            if log:
                log(f"record image: layer {layer.index + 1}/{LAYERS} ({layer.kind}, "
                    f"{layer.size / MB:.1f} MB)")
        _write_manifests(work, diff_ids, {"official": official, "mirror": mirror})
        return {"scale": scale, "generator": GENERATOR, "uncompressed_bytes": uncompressed}

    return _cached(cache_key(scale), build)


def _file_source(path: Path):
    def source():
        with path.open("rb") as f:
            while True:
                data = f.read(1 << 20)
                if not data:
                    return
                yield data
    return source


def push_record(client: RegistryClient, image: RecordImage, which: str,
                repository: str | None = None, tag: str | None = None) -> str:
    """Upload `which` copy ("official" or "mirror") unless the registry serves it already;
    returns `registry/repository:tag`."""
    repository = repository or image.repository
    tag = tag or which
    manifest = image.manifest(which)
    if client.manifest_exists(repository, tag) != manifest.digest:
        for descriptor in image.descriptors(which):
            digest = Digest.parse(descriptor["digest"])
            if not client.blob_exists(repository, digest):
                client.upload_blob(repository, digest, _file_source(
                    image.blob_path(descriptor["digest"])), size=descriptor["size"])
        client.put_manifest(repository, tag, manifest)
    return f"{client.registry}/{repository}:{tag}"


@dataclass(frozen=True)
class Measured:
    code: int
    stdout: str
    stderr: str
    seconds: float
    #: peak resident set of exactly that program (GNU time's %M: the kernel's ru_maxrss of
    #: its child; a small C parent, so nothing of ours is counted in)
    peak_rss_mb: float
    #: CPU seconds (user + system) of that program
    cpu_s: float


GNU_TIME = "/usr/bin/time"


def run_measured(argv: list[str], timeout: float = 600, env: dict | None = None) -> Measured:
    """Run a program and measure it from outside: wall time here, peak RSS and CPU by GNU time
    (`/usr/bin/time -f '%M %U %S'`, the kernel's rusage of that child). Without GNU time, the
    program's VmHWM is polled from /proc (its peak so far, read every 20 ms until it exits)."""
    with tempfile.NamedTemporaryFile(prefix="imagekit-time-", suffix=".txt") as report:
        wrapped = [GNU_TIME, "-f", "%M %U %S", "-o", report.name, *argv] \
            if Path(GNU_TIME).exists() else list(argv)
        started = time.monotonic()
        child = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env)
        peak_kb = 0
        try:
            if wrapped[0] == GNU_TIME:
                out, err = child.communicate(timeout=timeout)
            else:
                out, err, peak_kb = _poll_hwm(child, argv, timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        seconds = time.monotonic() - started
        cpu = 0.0
        if wrapped[0] == GNU_TIME:
            fields = Path(report.name).read_text().split()[-3:]
            with contextlib.suppress(IndexError, ValueError):
                peak_kb, cpu = int(fields[0]), float(fields[1]) + float(fields[2])
    return Measured(child.returncode, out.decode(errors="replace"),
                    err.decode(errors="replace"), seconds, peak_kb / 1024, cpu)


def _poll_hwm(child: subprocess.Popen, argv: list[str], timeout: float
              ) -> tuple[bytes, bytes, int]:
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}

    def drain(stream, key):
        for data in iter(lambda: stream.read(65536), b""):
            chunks[key].append(data)

    readers = [threading.Thread(target=drain, args=(child.stdout, "out"), daemon=True),
               threading.Thread(target=drain, args=(child.stderr, "err"), daemon=True)]
    for reader in readers:
        reader.start()
    peak, deadline, own = 0, time.monotonic() + timeout, argv[0].encode()
    while child.poll() is None:
        try:  # only once exec'd: before that the forked child shows our memory
            if Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")[0] == own:
                for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        if time.monotonic() > deadline:
            child.kill()
        time.sleep(0.02)
    for reader in readers:
        reader.join()
    return b"".join(chunks["out"]), b"".join(chunks["err"]), peak
