"""Devices: inventory of each rank's GPU, the expectations (model, count, memory), NUMA and
`nvidia-smi topo -m`, the image-to-GPU fit (the rules are fit.py's), the software versions."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from .common import ANSI, check
from .fit import fit_checks
from .state import Base


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi topo -m` (tab-separated): links between devices and each GPU's affinity.

    Returns {"devices": [...], "links": {"GPU0": {"GPU1": "NV18", ...}}, "affinity":
    {"GPU0": {"CPU Affinity": "0-47", "NUMA Affinity": "0", ...}}}. Unknown layouts yield empty
    parts; the raw text is always kept beside the parse by the caller.
    """
    lines = [ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_index = next((i for i, line in enumerate(lines)
                         if line.startswith("\t") and "GPU0" in line), None)
    result: dict[str, Any] = {"devices": [], "links": {}, "affinity": {}}
    if header_index is None:
        return result
    columns = [c.strip() for c in lines[header_index].split("\t")][1:]
    devices = [c for c in columns if re.fullmatch(r"(GPU|NIC|mlx)\S*", c)]
    result["devices"] = devices
    for line in lines[header_index + 1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        cells = [c.strip() for c in line.split("\t")]
        name, values = cells[0], cells[1:]
        if not name:
            continue
        # device columns come first; nvidia-smi pads the affinity columns with empty cells
        row = dict(zip(devices, values))
        result["links"][name] = {d: row[d] for d in devices if d in row and d != name}
        rest = [c for c in columns if c not in devices]
        extra = dict(zip(rest, [v for v in values[len(devices):] if v]))
        if extra:
            result["affinity"][name] = extra
    return result


def pci_sysfs_name(bus_id: str) -> str:
    """'00000000:18:00.0' or '0000:18:00.0' -> '0000:18:00.0' (sysfs spelling, lower case)."""
    domain, rest = bus_id.strip().lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def numa_of(bus_id: str | None, sysfs: Path = Path("/sys/bus/pci/devices")) -> dict[str, Any]:
    """A GPU's NUMA node and local CPU list, read from sysfs by PCI bus id (-1: none reported)."""
    if not bus_id:
        return {"numa_node": None, "cpu_affinity": None, "source": "no PCI bus id"}
    base = sysfs / pci_sysfs_name(bus_id)
    try:
        numa = int((base / "numa_node").read_text().strip())
    except (OSError, ValueError):
        numa = None
    try:
        cpus = (base / "local_cpulist").read_text().strip()
    except OSError:
        cpus = None
    return {"numa_node": numa, "cpu_affinity": cpus, "source": str(base)}


def smi_bus_id(uuid: str | None) -> str | None:
    """A GPU's PCI bus id from nvidia-smi, matched by UUID (when torch does not expose it)."""
    smi = shutil.which("nvidia-smi")
    if not uuid or smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].removeprefix("GPU-") == uuid.removeprefix("GPU-"):
            return pci_sysfs_name(parts[1])
    return None


class DevicesPart(Base):

    # -- inventory ----------------------------------------------------------------------

    def inventory(self) -> dict[str, Any]:
        info: dict[str, Any] = {"rank": self.rank, "local_rank": self.local_rank,
                                "hostname": socket.gethostname(), "device": str(self.device),
                                "visible_devices": torch.cuda.device_count()
                                if torch.cuda.is_available() else 0}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            info.update(name=props.name, total_memory_bytes=int(props.total_memory),
                        total_memory_gib=round(props.total_memory / 1024**3, 2),
                        compute_capability=f"{props.major}.{props.minor}",
                        multiprocessors=props.multi_processor_count)
            uuid = getattr(props, "uuid", None)
            info["uuid"] = f"GPU-{uuid}" if uuid is not None and \
                not str(uuid).startswith("GPU-") else (str(uuid) if uuid else None)
            bus_id = None
            if hasattr(props, "pci_bus_id") and hasattr(props, "pci_domain_id"):
                bus_id = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:" \
                         f"{props.pci_device_id:02x}.0"  # type: ignore[attr-defined]
            info["pci_bus_id"] = bus_id or smi_bus_id(info["uuid"])
        else:
            info.update(name=f"cpu ({platform.processor() or platform.machine()})",
                        total_memory_bytes=None, total_memory_gib=None,
                        compute_capability=None, multiprocessors=os.cpu_count(), uuid=None,
                        pci_bus_id=None)
        return info

    def device_checks(self, ranks: list[dict[str, Any]]) -> None:
        a = self.args
        if a.expect_model is not None:
            if self.device.type != "cuda":
                self.checks.append(check("device-model", "DEFERRED",
                                         f"no GPU in this run (backend {self.backend}): "
                                         f"cannot compare with {a.expect_model!r}"))
            else:
                bad = [r for r in ranks if a.expect_model.lower() not in r["name"].lower()]
                self.checks.append(check(
                    "device-model", "FAIL" if bad else "PASS",
                    (f"rank {bad[0]['rank']} is {bad[0]['name']!r}, expected "
                     f"{a.expect_model!r}" if bad else
                     f"all {len(ranks)} GPUs are {ranks[0]['name']!r} "
                     f"(expected {a.expect_model!r})"),
                    bad_ranks=[r["rank"] for r in bad]))
        if a.min_memory_gib is not None:
            if self.device.type != "cuda":
                self.checks.append(check("device-memory", "DEFERRED",
                                         f"no GPU in this run (backend {self.backend})"))
            else:
                bad = [r for r in ranks if r["total_memory_gib"] < a.min_memory_gib]
                low = min(r["total_memory_gib"] for r in ranks)
                self.checks.append(check(
                    "device-memory", "FAIL" if bad else "PASS",
                    (f"rank {bad[0]['rank']} has {bad[0]['total_memory_gib']} GiB, expected >= "
                     f"{a.min_memory_gib}" if bad else
                     f"smallest GPU has {low} GiB (expected >= {a.min_memory_gib})"),
                    bad_ranks=[r["rank"] for r in bad]))
        if a.expect_gpus is not None:
            if self.device.type != "cuda":
                self.checks.append(check("gpu-count", "DEFERRED",
                                         f"no GPU in this run (backend {self.backend})"))
            else:
                per_host: dict[str, int] = {}
                for r in ranks:
                    per_host[r["hostname"]] = r["visible_devices"]
                wrong = {h: c for h, c in per_host.items() if c != a.expect_gpus}
                ok = not wrong and self.local_world == a.expect_gpus
                detail = (f"{a.expect_gpus} GPUs visible on each of {len(per_host)} host(s), "
                          f"one rank on each" if ok else
                          f"expected {a.expect_gpus} GPUs per host with one rank each; visible "
                          f"{per_host}, ranks per host {self.local_world}")
                self.checks.append(check("gpu-count", "PASS" if ok else "FAIL", detail,
                                         visible_per_host=per_host,
                                         ranks_per_host=self.local_world))

    # -- topology -------------------------------------------------------------------------

    def topology(self, ranks: list[dict[str, Any]]) -> dict[str, Any]:
        topo: dict[str, Any] = {"nvidia_smi": None, "matrix": None, "raw": None,
                                "gpus": [], "note": None}
        smi = shutil.which("nvidia-smi")
        if smi is None:
            topo["note"] = "nvidia-smi not on PATH: no link matrix"
        else:
            topo["nvidia_smi"] = smi
            try:
                done = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True,
                                      timeout=60, check=False)
                topo["raw"] = done.stdout + (done.stderr if done.returncode else "")
                if done.returncode == 0:
                    topo["matrix"] = parse_topo_matrix(done.stdout)
                else:
                    topo["note"] = f"nvidia-smi topo -m exited {done.returncode}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                topo["note"] = f"nvidia-smi topo -m failed: {exc}"
        for r in ranks:
            entry = {"rank": r["rank"], "hostname": r["hostname"], "pci_bus_id": r["pci_bus_id"]}
            entry.update(r.get("numa", {}))
            topo["gpus"].append(entry)
        return topo

    # -- image-to-GPU fit, NVML health, small messages -------------------------------------

    def fit(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        """This rank's GPU against the running image's torch: CUDA version, arch list."""
        driver: Any = None
        how = None
        try:
            import pynvml as nv  # optional
            nv.nvmlInit()
            try:
                driver, how = nv.nvmlSystemGetCudaDriverVersion(), "NVML"
            finally:
                nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - no NVML: ask the CUDA driver through torch
            try:
                driver = int(torch._C._cuda_getDriverVersion())  # type: ignore[attr-defined]
                how = "cuDriverGetVersion"
            except Exception:  # noqa: BLE001
                driver = None
        props = torch.cuda.get_device_properties(self.device)
        out = fit_checks(torch.version.cuda, list(torch.cuda.get_arch_list()),
                         (props.major, props.minor), driver,
                         where=f"of {mine.get('name')} ({how or 'driver version unread'})")
        return out

    def software(self) -> dict[str, Any]:
        nccl = None
        if self.backend == "nccl":
            try:
                version = torch.cuda.nccl.version()
                nccl = ".".join(str(x) for x in version) if isinstance(version, tuple) \
                    else str(version)
            except Exception:  # noqa: BLE001 - a version string is informative only
                nccl = None
        driver = None
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                driver = subprocess.run(
                    [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True, text=True, timeout=30, check=False,
                ).stdout.split("\n")[0].strip() or None
            except (OSError, subprocess.TimeoutExpired):
                driver = None
        return {"python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "nccl": nccl, "driver": driver,
                "hostname": socket.gethostname(), "kernel": platform.release()}
