"""The readable table printed after the JSON record (rank 0)."""

from __future__ import annotations

from typing import Any

from . import stats
from .common import MODES, human_bytes

# ---------------------------------------------------------------------------- output


def timed_lines(record: dict[str, Any]) -> list[str]:
    """One line per judged item of a timed check: band, median, interval, every cycle."""
    out = []
    for c in record["checks"]:
        d = c.get("data") or {}
        items = d.get("per_rank") if c["name"] == "matmul-rate" else \
            d.get("per_ratio") if c["name"] == "small-message-time" else \
            d.get("sizes") if c["name"] == "bandwidth-verdict" else None
        if c["name"] == "nvml-clock-events":
            items = [dict(rank=k, **{kk[7:]: vv for kk, vv in v.items()
                                     if kk.startswith("judged_")})
                     for k, v in (d.get("per_rank") or {}).items()]
        for it in items or []:
            if not isinstance(it, dict) or "samples" not in it:
                continue
            label = it.get("ratio") if c["name"] == "small-message-time" else \
                human_bytes(it["bytes"]) if "bytes" in it else f"rank {it.get('rank')}"
            cycles = ", ".join(f"{x:.3g}" for x in it["samples"])
            lo, hi = it.get("low"), it.get("high")
            span = f"[{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else "(none)"
            out.append(f"  {c['name']:<20} {str(label):<22} {it.get('band', '-'):<8} median "
                       f"{stats.fmt(it.get('statistic'))} interval {span} bound "
                       f"{stats.fmt(it.get('bound'))}; cycles: {cycles}")
    return out


def table(record: dict[str, Any]) -> str:
    out = []
    bw = record["bandwidth"]
    out.append(f"GPU preflight: {record['status']}   world_size={record['world_size']} "
               f"backend={record['backend']}   wall {record['wall_s']:.1f} s   "
               f"torch {record['software']['torch']} nccl {record['software']['nccl']}")
    out.append("")
    out.append(f"{'rank':>4}  {'host':<16} {'device':<8} {'name':<24} {'memory GiB':>10}  "
               f"{'pci':<13} {'numa':>4}  cpus")
    gpus = {g["rank"]: g for g in (record["topology"] or {}).get("gpus", [])}
    for r in record["ranks"]:
        g = gpus.get(r["rank"], {})
        out.append(f"{r['rank']:>4}  {r['hostname'][:16]:<16} {r['device']:<8} "
                   f"{str(r['name'])[:24]:<24} {str(r['total_memory_gib']):>10}  "
                   f"{str(r['pci_bus_id']):<13} {str(g.get('numa_node')):>4}  "
                   f"{g.get('cpu_affinity')}")
    out.append("")
    for c in record["checks"]:
        out.append(f"  {c['status']:<8} {c['name']:<22} {c['detail']}")
    spread = timed_lines(record)
    if spread:
        out.append("")
        out.append("timed checks: every cycle (the median and its interval are judged):")
        out.extend(spread)
    mm = record["matmul"]
    out.append("")
    ceiling = (f"{100 * mm['fraction_of_ceiling']:.0f}% of the {mm['ceiling_tflops']:g} TFLOP/s "
               f"ceiling" if mm.get("ceiling_tflops") else "no ceiling for this device")
    out.append(f"bf16 matmul {mm['n']}x{mm['n']}x{mm['n']}: slowest rank "
               f"{mm['min_tflops']:.4g} TFLOP/s (median of {mm.get('repeats', 1)} cycles) = "
               f"{ceiling}; max rel error "
               + ", ".join(f"{m['rel_error']:.2e}" if m["rel_error"] is not None else "nan"
                           for m in mm["per_rank"]))
    out.append("")
    out.append(f"all_reduce {bw['dtype']} in-place, warmup {bw['warmup']}, iters {bw['iters']}, "
               f"timer {bw['timer']}; time = slowest rank's average; algbw = bytes/time; "
               f"busbw = algbw*2(n-1)/n = algbw*{bw['busbw_factor']:.3g} (n={bw['n']})")
    out.append(f"{'bytes':>12} {'size':>9} {'time us':>11} {'algbw GB/s':>11} "
               f"{'busbw GB/s':>11} {'slowest':>7}")
    for row in bw["sizes"]:
        out.append(f"{row['bytes']:>12} {human_bytes(row['bytes']):>9} {row['time_us']:>11.2f} "
                   f"{row['algbw_GBps']:>11.2f} {row['busbw_GBps']:>11.2f} "
                   f"{row['slowest_rank']:>7}")
    if bw.get("note"):
        out.append(f"note: {bw['note']}")
    small = record.get("small_messages") or {}
    if small.get("sizes"):
        out.append("")
        out.append(f"small messages, {small['iters']} ops a loop, slowest rank: c10d = "
                   "torch.distributed, one event pair; nccl = ncclAllReduce on its "
                   "communicator, host clock to the stream's end, as nccl-tests:")
        theirs = {r["bytes"]: r for r in (small.get("nccl_tests") or {}).get("sizes", [])}

        def us(v: Any) -> str:
            return "-" if v is None else f"{v:.2f}"

        def pair(d: dict[str, Any], fmt: str) -> str:
            return "/".join(us(d.get(fmt.format(m))) for m in MODES)
        out.append(f"{'bytes':>12} {'c10d eager':>10} {'c10d graph':>10} "
                   f"{'nccl eager':>13} {'nccl graph':>13} {'nccl-tests':>13} "
                   f"{'nccl-tests -G':>13} {'nccl ev eager':>13} {'nccl ev graph':>13}"
                   "  (us; x/y = in place/out of place; ev = one event pair)")
        for row in small["sizes"]:
            g = us(row.get("graph_us")) + ("*" if row.get("graph_empty") else "")
            direct = {f"{m}_{k}": v for m, t in (row.get("nccl") or {}).items()
                      for k, v in t.items()}
            t = theirs.get(row["bytes"], {})
            out.append(f"{row['bytes']:>12} {row['eager_us']:>10.2f} {g:>10} "
                       f"{pair(direct, '{}_eager_us'):>13} {pair(direct, '{}_graph_us'):>13} "
                       f"{pair(t, 'nccl_tests_eager_{}_us'):>13} "
                       f"{pair(t, 'nccl_tests_graph_{}_us'):>13} "
                       f"{pair(direct, '{}_event_eager_us'):>13} "
                       f"{pair(direct, '{}_event_graph_us'):>13}")
        if any(row.get("graph_empty") for row in small["sizes"]):
            out.append("  * the captured CUDA graph held no GPU work")
        why = (small.get("direct") or {}).get("why")
        if why:
            out.append(f"  nccl: not timed directly: {why}")
    for note in record.get("not_applicable") or []:
        out.append(f"  N/A      {note['name']:<22} {note['detail']}")
    topo = record["topology"] or {}
    matrix = topo.get("matrix") or {}
    if matrix.get("links") or matrix.get("affinity"):
        out.append("")
        pairs = [f"{a}-{b} {link}" for a, row in matrix.get("links", {}).items()
                 for b, link in row.items() if a < b]
        out.append("topology (nvidia-smi topo -m): " + ("; ".join(pairs) or "no GPU pairs"))
        for dev, values in matrix.get("affinity", {}).items():
            out.append(f"  {dev}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    if topo.get("note"):
        out.append(f"topology: {topo['note']}")
    return "\n".join(out)
