"""Read what a process's cgroup says about who runs it: Kubernetes pod, Slurm job, slice.

Example:
    >>> ident = parse_cgroup(
    ...     "0::/kubepods.slice/kubepods-burstable.slice/"
    ...     "kubepods-burstable-pod6f1c2a4e_1b2c_4d5e_8f90_a1b2c3d4e5f6.slice/"
    ...     "cri-containerd-ab12.scope\\n"
    ... )
    >>> ident.pod_uid
    '6f1c2a4e-1b2c-4d5e-8f90-a1b2c3d4e5f6'
    >>> parse_cgroup("0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\\n").slurm_job
    '4711'
    >>> parse_cgroup("0::/research.slice/train-42.service\\n").slices
    ('research.slice',)
    >>> is_tenant_slice("research.slice"), is_tenant_slice("system.slice")
    (True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a pod UID: a UUID (dashes as underscores in systemd slice names), or for a static pod the
# 32 hex digits of the kubelet's hash of its manifest
_POD_RE = re.compile(
    r"(?<![0-9A-Za-z])pod("
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32}"
    r")(?![0-9a-f])"
)
_SLURM_JOB_RE = re.compile(r"(?:^|/)job_(\d+)(?:/|$)")
_SLURM_UID_RE = re.compile(r"(?:^|/)uid_(\d+)(?:/|$)")
# slices every host has: they say nothing about a tenant
_GENERIC_SLICES = frozenset({"-.slice", "system.slice", "user.slice", "machine.slice"})


def is_tenant_slice(name: str) -> bool:
    """Whether ``name`` can be one of :attr:`CgroupIdentity.slices`: a single ``.slice``
    unit that is neither one every host has nor one of Kubernetes' ``kubepods`` slices."""
    return (
        name.endswith(".slice")
        and "/" not in name
        and name not in _GENERIC_SLICES
        and not name.startswith("kubepods")
    )


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """Ids found in a cgroup path. ``slices`` innermost first; ``unit`` is the systemd
    service or scope the process runs in (not a login session scope); ``slurm_in_pod``:
    the Slurm job runs inside the pod (a ``slurmd`` run in a pod), not the other way."""

    pod_uid: str | None = None
    slurm_job: str | None = None
    slurm_uid: int | None = None
    slices: tuple[str, ...] = ()
    unit: str | None = None
    slurm_in_pod: bool = False


def parse_cgroup(text: str) -> CgroupIdentity:
    """Parse the content of ``/proc/PID/cgroup`` (cgroup v1 or v2)."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            is_v2 = parts[0] == "0" and parts[1] == ""
            # v2 marks a cgroup removed while the process still runs in it
            path = parts[2].removesuffix(" (deleted)")
            (unified if is_v2 else legacy).append(path)
    paths = unified + legacy  # cgroup v2's unified line first, then the v1 hierarchies
    pod_uid = slurm_job = unit = None
    slurm_uid: int | None = None
    slices: tuple[str, ...] = ()
    slurm_in_pod = False
    for path in paths:
        pod_match = _POD_RE.search(path)
        job_match = _SLURM_JOB_RE.search(path)
        if pod_uid is None and pod_match:
            pod_uid = pod_match.group(1).replace("_", "-")
        if slurm_job is None and job_match:
            slurm_job = job_match.group(1)
            slurm_in_pod = pod_match is not None and pod_match.start() < job_match.start()
        if slurm_uid is None and (m := _SLURM_UID_RE.search(path)):
            slurm_uid = int(m.group(1))
        parts = [p for p in path.split("/") if p]
        if not slices:
            slices = tuple(reversed([p for p in parts if is_tenant_slice(p)]))
        if unit is None:
            for p in reversed(parts):
                if p.endswith(".service") or (
                    p.endswith(".scope") and not p.startswith("session-")
                ):
                    if not p.startswith(("cri-", "docker-", "crio-", "libpod-")):
                        unit = p
                    break
    return CgroupIdentity(
        pod_uid=pod_uid,
        slurm_job=slurm_job,
        slurm_uid=slurm_uid,
        slices=slices,
        unit=unit,
        slurm_in_pod=slurm_in_pod,
    )
