"""Real-GPU check of the NVML collector: two load processes of different tenants, the
collector's snapshots of them, and a comparison with what the processes report.

    python scripts/gpu_check.py --report gpu-check-report.json [--seconds 30]

Needs a machine with an NVIDIA GPU, torch with CUDA, and dprobe installed (see
``scripts/gpu-check.sh``, which prepares that offline and calls this). It starts a
*heavy* process (large matrix products back to back, ~1 GiB of tensors) and a *light*
one (small products with pauses, ~3 GiB of tensors), each with ``DPROBE_TENANT`` set to
its own tenant, runs ``dprobe collect --backend nvml --output`` for ``--seconds``
snapshots at 1 s, and checks:

- every load process appears in the snapshots, labelled with its own tenant;
- NVML's memory of each process is at least what torch reserved in it and at most that
  plus 2 GiB (the CUDA context and libraries);
- the heavy process's median SM utilisation is above the light one's, and the GPU's
  median utilisation is above 10 %.

The report (one JSON file) holds every measured figure and a verdict per check; the
exit status is 0 when all checks pass, 1 otherwise, 2 when no GPU could be used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GiB = 1 << 30


def _load(kind: str, seconds: float, status: Path) -> int:
    """A load process: allocate, report, compute until ``seconds`` have passed."""
    import torch

    dev = torch.device("cuda:0")
    size, pause, hold = (4096, 0.0, 1 * GiB) if kind == "heavy" else (512, 0.05, 3 * GiB)
    ballast = torch.empty(hold // 4, dtype=torch.float32, device=dev)  # memory the check expects
    a = torch.randn(size, size, device=dev)
    b = torch.randn(size, size, device=dev)
    torch.cuda.synchronize()
    info = {
        "pid": os.getpid(),
        "kind": kind,
        "tenant": os.environ.get("DPROBE_TENANT", ""),
        "reserved_bytes": torch.cuda.memory_reserved(dev),
        "allocated_bytes": torch.cuda.memory_allocated(dev),
        "ballast_bytes": ballast.numel() * 4,
        "ready": True,
    }
    status.write_text(json.dumps(info))
    end = time.monotonic() + seconds
    busy = 0.0
    start = time.monotonic()
    while time.monotonic() < end:
        t0 = time.monotonic()
        for _ in range(8):
            a = (a @ b) / size
        torch.cuda.synchronize()
        busy += time.monotonic() - t0
        if pause:
            time.sleep(pause)
    info["busy_fraction"] = busy / max(time.monotonic() - start, 1e-9)
    status.write_text(json.dumps(info))
    return 0


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _gpu_problem(out: dict[str, Any]) -> str:
    """Why no GPU can be used ("" when one can); notes the GPU's name in ``out``."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed: {exc}"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    out["gpu"] = torch.cuda.get_device_name(0)
    out["torch"] = torch.__version__
    return ""


def _check(report: Path, seconds: int, dprobe: list[str]) -> int:
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    problem = _gpu_problem(out)
    if problem:
        out["error"] = f"no usable GPU: {problem}"
        report.write_text(json.dumps(out, indent=2))
        print(out["error"], file=sys.stderr)
        return 2
    work = report.parent / "gpu-check-work"
    work.mkdir(parents=True, exist_ok=True)
    loads = {}
    for kind in ("heavy", "light"):
        status = work / f"{kind}.json"
        status.unlink(missing_ok=True)
        env = {**os.environ, "DPROBE_TENANT": f"tenant-{kind}"}
        cmd = [sys.executable, __file__, "--load", kind, "--seconds", str(seconds + 20)]
        proc = subprocess.Popen([*cmd, "--status", str(status)], env=env)
        loads[kind] = (proc, status)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(st.exists() for _, st in loads.values()):
        time.sleep(0.5)
    snaps_path = work / "snapshots.jsonl"
    snaps_path.unlink(missing_ok=True)
    collect = [*dprobe, "collect", "--backend", "nvml", "--tenant-env", "DPROBE_TENANT"]
    collect += ["--interval", "1", "--max-ticks", str(seconds), "--output", str(snaps_path)]
    run = subprocess.run(collect, check=False, capture_output=True, text=True, timeout=seconds + 60)
    out["collect"] = {"argv": collect, "rc": run.returncode, "stderr": run.stderr[-2000:]}
    for proc, _ in loads.values():
        proc.wait(timeout=seconds + 120)
    status = {k: json.loads(st.read_text()) for k, (_, st) in loads.items() if st.exists()}
    snaps = [json.loads(line) for line in snaps_path.read_text().splitlines() if line.strip()]
    out["snapshots"] = len(snaps)
    out["loads"] = status
    checks: dict[str, bool] = {}
    seen: dict[str, dict[str, list[float]]] = {}
    tenants: dict[str, set[str]] = {}
    for kind, st in status.items():
        procs = [p for s in snaps for p in s.get("procs", []) if p.get("pid") == st["pid"]]
        seen[kind] = {
            "mem_used": [float(p["mem_used"]) for p in procs],
            "sm_util": [float(p["sm_util"]) for p in procs if p.get("sm_util") is not None],
        }
        tenants[kind] = {str(p.get("tenant")) for p in procs}
        mem = _median(seen[kind]["mem_used"])
        lo, hi = st["reserved_bytes"], st["reserved_bytes"] + 2 * GiB
        checks[f"{kind}_seen"] = bool(procs)
        checks[f"{kind}_tenant"] = tenants[kind] == {f"tenant-{kind}"}
        checks[f"{kind}_memory"] = mem is not None and lo <= mem <= hi
        out[kind] = {
            "snapshots_with_it": len(procs),
            "tenants": sorted(tenants[kind]),
            "nvml_mem_used_median": mem,
            "torch_reserved": st["reserved_bytes"],
            "sm_util_median": _median(seen[kind]["sm_util"]),
            "busy_fraction_reported": st.get("busy_fraction"),
        }
    heavy, light = out.get("heavy", {}), out.get("light", {})
    hs, ls = heavy.get("sm_util_median"), light.get("sm_util_median")
    checks["heavy_busier_than_light"] = hs is not None and ls is not None and hs > ls
    gpu_util = [float(g["util"]) for s in snaps for g in s.get("gpus", [])]
    out["gpu_util_median"] = _median(gpu_util)
    checks["gpu_busy"] = (out["gpu_util_median"] or 0.0) > 10.0
    out["checks"] = checks
    out["passed"] = all(checks.values())
    report.write_text(json.dumps(out, indent=2, default=str))
    print(json.dumps({"passed": out["passed"], "checks": checks}, indent=2))
    return 0 if out["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", type=Path, default=Path("gpu-check-report.json"))
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--dprobe", default="dprobe", help="the dprobe command to run")
    p.add_argument("--load", choices=("heavy", "light"), help=argparse.SUPPRESS)
    p.add_argument("--status", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.load:
        return _load(args.load, float(args.seconds), args.status)
    return _check(args.report, args.seconds, args.dprobe.split())


if __name__ == "__main__":
    sys.exit(main())
