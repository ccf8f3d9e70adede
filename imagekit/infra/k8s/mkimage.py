#!/usr/bin/env python3
"""Build a single-layer OCI image archive (importable with `ctr images import`) from local
files, no registry needed."""
import hashlib
import io
import json
import sys
import tarfile

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


def add_bytes(tf, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def blob(tf, data):
    d = hashlib.sha256(data).hexdigest()
    add_bytes(tf, "blobs/sha256/" + d, data)
    return "sha256:" + d, len(data)


def build(out, ref, files, symlinks, entrypoint, cmd=None):
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as lt:
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            lt.addfile(info)
        for path, src in files.items():
            lt.add(src, arcname=path)
        for path, target in symlinks.items():
            info = tarfile.TarInfo(path)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            lt.addfile(info)
    layer = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    with tarfile.open(out, "w") as tf:
        ldig, lsize = blob(tf, layer)
        cfg = {"architecture": "amd64", "os": "linux",
               "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": ["PATH=/bin"],
                          "WorkingDir": "/"},
               "rootfs": {"type": "layers", "diff_ids": [diff_id]},
               "created": "2024-01-01T00:00:00Z"}
        cdig, csize = blob(tf, json.dumps(cfg).encode())
        man = {"schemaVersion": 2, "mediaType": MANIFEST,
               "config": {"mediaType": CONFIG, "digest": cdig, "size": csize},
               "layers": [{"mediaType": LAYER, "digest": ldig, "size": lsize}]}
        mdig, msize = blob(tf, json.dumps(man).encode())
        idx = {"schemaVersion": 2, "manifests": [{
            "mediaType": MANIFEST, "digest": mdig, "size": msize,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}}]}
        add_bytes(tf, "index.json", json.dumps(idx).encode())
        add_bytes(tf, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')


if __name__ == "__main__":
    pause_bin, d = sys.argv[1], sys.argv[2]   # usage: mkimage.py /path/to/static/pause OUTDIR
    build(d + "/pause.tar", "registry.k8s.io/pause:3.6", {"pause": pause_bin}, {}, ["/pause"])
    bb = ["sh", "sleep", "cat", "echo", "true", "false", "ls", "wget", "nc", "httpd", "env",
          "test", "id", "touch", "mkdir"]
    build(d + "/busybox.tar", "docker.io/library/busybox:1.36", {"bin/busybox": "/bin/busybox"},
          {"bin/" + b: "busybox" for b in bb}, None, ["sh"])
