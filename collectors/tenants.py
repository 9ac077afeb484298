"""Attribute a GPU process to a tenant and a job: cgroup, then mapping file, then env.

Resolution order for a pid (the conventions users of Kubernetes, Slurm and systemd know):

1. ``/proc/PID/cgroup``: a Kubernetes pod UID (namespace and pod name come from the
   kubelet's ``/var/log/pods/<namespace>_<pod>_<uid>`` folders), a Slurm ``job_<id>``,
   systemd slices and the unit;
2. the operator's mapping file (:mod:`dprobe.collectors.tenant_map`): pod, namespace,
   slice, then the process's Unix user;
3. only if the operator names them, environment variables of the process (e.g.
   ``SLURM_JOB_ACCOUNT``, mapped through ``[accounts]``, else taken as the tenant when it
   is a plain identifier);
4. a Kubernetes namespace is the tenant when nothing above matched;
5. else ``unassigned``.

The job is the pod name (or UID), ``slurm-<id>``, the systemd unit, else ``pid-<pid>``.
Only these resolved ids ever leave the host: command lines and environment values are
never exported. Results are cached per (pid, start time), so a recycled pid is resolved
afresh. A process whose ``stat`` cannot be read (it ended, or a ``hidepid`` ``/proc``,
``ProtectProc=`` or a security module hides it) raises :class:`ProcessGone`, and so does
any other failure to attribute one process (logged once, then cached as ``unassigned``):
the caller reports it unassigned and goes on with the other processes.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "42").mkdir()
    >>> cgroup = "0::/system.slice/slurmstepd.scope/job_77/step_0\\n"
    >>> _ = (root / "42" / "cgroup").write_text(cgroup)
    >>> _ = (root / "42" / "stat").write_text("42 (python) S " + "0 " * 18 + "123456 0\\n")
    >>> _ = (root / "42" / "status").write_text("Name:\\tpython\\nUid:\\t0\\t0\\t0\\t0\\n")
    >>> r = TenantResolver(proc_root=root, tenant_map=TenantMap(users={"root": "vc-ops"}))
    >>> r.resolve(42)
    Attribution(tenant='vc-ops', job='slurm-77', source='user')
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dprobe.collectors.cgroup import CgroupIdentity, parse_cgroup
from dprobe.collectors.errors import ProcessGone
from dprobe.collectors.tenant_map import TenantMap
from dprobe.schema import UNASSIGNED

log = logging.getLogger(__name__)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")
_POD_DIR_REFRESH_S = 10.0


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who a process belongs to, and which rule decided (``source``, a bounded label)."""

    tenant: str
    job: str
    source: str


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


class TenantResolver:
    """Resolve pids to :class:`Attribution` with a cache per (pid, start time).

    Args:
        proc_root: the procfs to read (``/proc``; the host's when containerised).
        tenant_map: the operator's mapping (empty by default).
        env_vars: environment variable names the operator allows reading, in order.
        pod_log_dir: the kubelet's pod log folder (names namespaces and pods).
        user_name: uid -> user name (default: the passwd database).
        max_cache: bound of the cache (oldest entries go first).
    """

    def __init__(
        self,
        proc_root: Path | str = "/proc",
        *,
        tenant_map: TenantMap | None = None,
        env_vars: Sequence[str] = (),
        pod_log_dir: Path | str | None = "/var/log/pods",
        user_name: Callable[[int], str | None] = _user_name,
        max_cache: int = 65_536,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.tenant_map = tenant_map or TenantMap()
        self.env_vars = tuple(env_vars)
        self.pod_log_dir = Path(pod_log_dir) if pod_log_dir else None
        self._user_name = user_name
        self._max_cache = max_cache
        self._monotonic = monotonic
        self._cache: OrderedDict[tuple[int, int], Attribution] = OrderedDict()
        self._pods: dict[str, tuple[str, str]] = {}
        self._pods_read_at = float("-inf")

    def resolve(self, pid: int) -> Attribution:
        """Attribution of ``pid``; raises :class:`ProcessGone` if the process has ended, is
        hidden from this collector, or could not be attributed for any other reason."""
        key: tuple[int, int] | None = None
        try:
            key = (pid, self._start_time(pid))
            hit = self._cache.get(key)
            if hit is not None:
                return hit
            result = self._resolve_uncached(pid)
        except ProcessGone:
            raise
        except Exception as exc:  # one odd process must not end the tick of all others
            log.exception("process %d: attribution failed, reporting it unassigned", pid)
            if key is not None:  # once per process, not at every tick
                self._remember(key, Attribution(UNASSIGNED, f"pid-{pid}", "unassigned"))
            raise ProcessGone(f"process {pid}: attribution failed") from exc
        self._remember(key, result)
        return result

    def _remember(self, key: tuple[int, int], result: Attribution) -> None:
        self._cache[key] = result
        if len(self._cache) > self._max_cache:
            self._cache.popitem(last=False)

    def retain(self, pids: Iterable[int]) -> None:
        """Forget cached processes whose pid is not in ``pids`` (call once per tick)."""
        keep = set(pids)
        for key in [k for k in self._cache if k[0] not in keep]:
            del self._cache[key]

    # reading procfs
    def _read_bytes(self, pid: int, name: str) -> bytes:
        """The file ``name`` of ``pid``; :class:`PermissionError` is left to the caller."""
        try:
            return (self.proc_root / str(pid) / name).read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(f"process {pid} has ended") from None
        except PermissionError:
            raise
        except OSError as exc:
            raise ProcessGone(f"process {pid}: {name} unreadable ({exc})") from None

    def _read(self, pid: int, name: str) -> str:
        return self._read_bytes(pid, name).decode(errors="replace")

    def _start_time(self, pid: int) -> int:
        try:
            stat = self._read(pid, "stat")
        except PermissionError:  # hidepid=, ProtectProc=, SELinux or AppArmor
            raise ProcessGone(f"process {pid} is hidden from this collector") from None
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            return int(fields[19])  # field 22 of proc(5): starttime in clock ticks
        except (IndexError, ValueError):
            raise ProcessGone(f"process {pid}: unreadable stat") from None

    def _uid(self, pid: int) -> int | None:
        for line in self._read(pid, "status").splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
        return None

    def _env(self, pid: int) -> dict[str, str]:
        if not self.env_vars:
            return {}
        try:
            raw = self._read_bytes(pid, "environ")
        except PermissionError:
            return {}
        wanted = set(self.env_vars)
        found: dict[str, str] = {}
        for item in raw.split(b"\0"):
            name, sep, value = item.partition(b"=")
            key = name.decode(errors="replace")
            if sep and key in wanted:
                found[key] = value.decode(errors="replace")
        return found

    def _pod(self, uid: str) -> tuple[str, str] | None:
        """(namespace, pod) of a pod UID from the kubelet's log folder names."""
        if uid not in self._pods and self.pod_log_dir is not None:
            now = self._monotonic()
            if now - self._pods_read_at >= _POD_DIR_REFRESH_S:
                self._pods_read_at = now
                try:
                    names = os.listdir(self.pod_log_dir)
                except OSError:
                    names = []
                for name in names:
                    parts = name.rsplit("_", 2)
                    if len(parts) == 3:
                        self._pods[parts[2]] = (parts[0], parts[1])
        return self._pods.get(uid)

    # the rules
    def _resolve_uncached(self, pid: int) -> Attribution:
        try:
            ident = parse_cgroup(self._read(pid, "cgroup"))
        except PermissionError:
            ident = CgroupIdentity()
        m = self.tenant_map
        namespace = pod = None
        if ident.pod_uid:
            found = self._pod(ident.pod_uid)
            if found:
                namespace, pod = found
        job = self._job(pid, ident, pod)

        candidates: list[tuple[dict[str, str], str | None, str]] = []
        if ident.pod_uid:
            candidates.append((m.pods, ident.pod_uid, "pod"))
        if pod:
            candidates += [(m.pods, f"{namespace}/{pod}", "pod"), (m.pods, pod, "pod")]
        if namespace:
            candidates.append((m.namespaces, namespace, "namespace"))
        candidates += [(m.slices, s, "slice") for s in ident.slices]
        for table, key, source in candidates:
            if key is not None and key in table:
                return Attribution(table[key], job, source)
        uid = ident.slurm_uid
        if uid is None and m.users:
            try:
                uid = self._uid(pid)
            except PermissionError:
                uid = None
        if uid is not None and m.users:
            user = self._user_name(uid)
            if user is not None and user in m.users:
                return Attribution(m.users[user], job, "user")
        env = self._env(pid)
        for name in self.env_vars:
            value = env.get(name)
            if value is None:
                continue
            if value in m.accounts:
                return Attribution(m.accounts[value], job, "env")
            if _ID_RE.match(value):
                return Attribution(value, job, "env")
        if namespace:
            return Attribution(namespace, job, "namespace")
        return Attribution(UNASSIGNED, job, "unassigned")

    @staticmethod
    def _job(pid: int, ident: CgroupIdentity, pod: str | None) -> str:
        if ident.pod_uid:
            return pod or ident.pod_uid
        if ident.slurm_job:
            return f"slurm-{ident.slurm_job}"
        if ident.unit:
            return ident.unit
        return f"pid-{pid}"
