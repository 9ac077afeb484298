"""Attribute a GPU process to a tenant and a job: cgroup, then mapping file, then env.

Resolution order for a pid (the conventions users of Kubernetes, Slurm and systemd know):

1. ``/proc/PID/cgroup``: a Kubernetes pod UID (namespace and pod name come from the
   kubelet's ``/var/log/pods/<namespace>_<pod>_<uid>`` folders), a Slurm ``job_<id>``,
   systemd slices and the unit;
2. the operator's mapping file (:mod:`dprobe.collectors.tenant_map`): pod, namespace,
   slice, then the process's Unix user (numeric uid, then name), this one only for a
   process that is not in a pod: a container's uid says nothing about its tenant;
3. only if the operator names them, environment variables of the process (e.g.
   ``SLURM_JOB_ACCOUNT``, mapped through ``[accounts]``, else taken as the tenant when it
   is a plain identifier);
4. a Kubernetes namespace is the tenant when nothing above matched;
5. else ``unassigned``.

The job is the pod name (or UID), ``slurm-<id>``, the systemd unit, else ``pid-<pid>``;
for a Slurm job run inside a pod (``slurmd`` in a pod) it is ``slurm-<id>``: the
innermost of the two names the job. Only these resolved ids ever leave the host: command
lines and environment values are never exported.

Results are cached per (pid, start time), so a recycled pid is resolved afresh. A
process in a pod whose kubelet folder is not there yet is resolved again after 1 s, then
at growing intervals up to 30 s, until the folder appears. User names are cached per uid
for 10 minutes. A process whose ``stat`` cannot be read (it ended, or a ``hidepid``
``/proc``, ``ProtectProc=`` or a security module hides it) raises :class:`ProcessGone`,
and so does any other failure to attribute one process (logged once, then cached as
``unassigned``): the caller reports it unassigned and goes on with the other processes.

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
_POD_DIR_MIN_INTERVAL_S = 1.0  # the pod log folder is listed at most this often
_POD_RETRY_MIN_S = 1.0  # a pod not found there is looked for again after this,
_POD_RETRY_MAX_S = 30.0  # then after twice as long each time, up to this
_POD_RETRY_MAX_UIDS = 4096
_USER_NAME_TTL_S = 600.0
_USER_NAME_MAX = 4096
_FOREVER = float("inf")


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


class _UserNames:
    """``lookup`` (uid -> user name) with each answer, ``None`` included, kept for
    ``ttl_s`` seconds, for at most ``max_size`` uids (least recently used go first): a
    passwd lookup through SSSD or LDAP can block for seconds."""

    def __init__(
        self,
        lookup: Callable[[int], str | None],
        monotonic: Callable[[], float],
        *,
        ttl_s: float = _USER_NAME_TTL_S,
        max_size: int = _USER_NAME_MAX,
    ) -> None:
        self._lookup = lookup
        self._monotonic = monotonic
        self._ttl_s = ttl_s
        self._max_size = max_size
        self._names: OrderedDict[int, tuple[str | None, float]] = OrderedDict()

    def __call__(self, uid: int) -> str | None:
        now = self._monotonic()
        hit = self._names.get(uid)
        if hit is not None and now < hit[1]:
            self._names.move_to_end(uid)
            return hit[0]
        name = self._lookup(uid)
        self._names[uid] = (name, now + self._ttl_s)
        self._names.move_to_end(uid)
        if len(self._names) > self._max_size:
            self._names.popitem(last=False)
        return name


class TenantResolver:
    """Resolve pids to :class:`Attribution` with a cache per (pid, start time).

    Args:
        proc_root: the procfs to read (``/proc``; the host's when containerised).
        tenant_map: the operator's mapping (empty by default).
        env_vars: environment variable names the operator allows reading, in order.
        pod_log_dir: the kubelet's pod log folder (names namespaces and pods).
        user_name: uid -> user name (default: the passwd database); each uid's answer is
            kept 10 minutes.
        max_cache: bound of the cache (oldest entries go first).
        monotonic: the clock of the retries and of the user name cache.
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
        self._monotonic = monotonic
        self._user_name = _UserNames(user_name, monotonic)
        users = self.tenant_map.users
        self._users_by_uid = {int(k): v for k, v in users.items() if k.isascii() and k.isdigit()}
        self._users_by_name = len(self._users_by_uid) < len(users)
        self._max_cache = max_cache
        # (pid, start time) -> (attribution, monotonic time it is to be resolved again)
        self._cache: OrderedDict[tuple[int, int], tuple[Attribution, float]] = OrderedDict()
        self._pods: dict[str, tuple[str, str]] = {}
        self._pods_read_at = float("-inf")
        self._pod_dir_errors: set[str] = set()
        self._env_denied_said = False  # a process's environment could not be read
        # pod UID not in the log folder -> (when to look again, the wait before that)
        self._pod_retry: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def resolve(self, pid: int) -> Attribution:
        """Attribution of ``pid``; raises :class:`ProcessGone` if the process has ended, is
        hidden from this collector, or could not be attributed for any other reason."""
        key: tuple[int, int] | None = None
        try:
            key = (pid, self._start_time(pid))
            hit = self._cache.get(key)
            if hit is not None and (hit[1] == _FOREVER or self._monotonic() < hit[1]):
                return hit[0]
            result, until = self._resolve_uncached(pid)
        except ProcessGone:
            raise
        except Exception as exc:  # one odd process must not end the tick of all others
            log.exception("process %d: attribution failed, reporting it unassigned", pid)
            if key is not None:  # once per process, not at every tick
                failed = Attribution(UNASSIGNED, f"pid-{pid}", "unassigned")
                self._remember(key, failed, _FOREVER)
            raise ProcessGone(f"process {pid}: attribution failed") from exc
        self._remember(key, result, until)
        return result

    def _remember(self, key: tuple[int, int], result: Attribution, until: float) -> None:
        self._cache[key] = (result, until)
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
        except PermissionError as exc:
            if not self._env_denied_said:  # every process of another user would say it
                self._env_denied_said = True
                log.warning(
                    "tenant_env_vars: process %d: its environment cannot be read (%s): "
                    "reading other users' needs CAP_SYS_PTRACE (add it to the unit's "
                    "CapabilityBoundingSet= and AmbientCapabilities=); until then such "
                    "processes are attributed without it (said once)",
                    pid,
                    exc.strerror or exc,
                )
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
        """(namespace, pod) of a pod UID from the kubelet's log folder names; the folder
        is listed again (at most once a second) when ``uid`` is not in the last listing."""
        found = self._pods.get(uid)
        if found is None and self.pod_log_dir is not None:
            now = self._monotonic()
            if now - self._pods_read_at >= _POD_DIR_MIN_INTERVAL_S:
                self._pods_read_at = now
                self._read_pod_dir(self.pod_log_dir)
                found = self._pods.get(uid)
        return found

    def _read_pod_dir(self, folder: Path) -> None:
        try:
            names = os.listdir(folder)
        except OSError as exc:
            problem = f"{type(exc).__name__}: {exc.strerror or exc}"
            if problem not in self._pod_dir_errors:  # once per distinct error
                self._pod_dir_errors.add(problem)
                log.warning(
                    "pod log folder %s cannot be read (%s): the namespaces and names of "
                    "pods cannot be found, so pods are attributed by their UID only; "
                    "mount the kubelet's /var/log/pods there or set pod_log_dir",
                    folder,
                    problem,
                )
            return
        self._pod_dir_errors.clear()
        pods: dict[str, tuple[str, str]] = {}
        for name in names:
            parts = name.rsplit("_", 2)
            if len(parts) == 3:
                pods[parts[2]] = (parts[0], parts[1])
        self._pods = pods

    def _retry_pod_at(self, uid: str) -> float:
        """When to resolve again a process of pod ``uid``, not found in the log folder:
        1 s after the first miss, then twice as long after each, up to 30 s."""
        now = self._monotonic()
        last = self._pod_retry.get(uid)
        if last is not None and now < last[0]:  # another process of the pod set it
            return last[0]
        wait = _POD_RETRY_MIN_S if last is None else min(last[1] * 2, _POD_RETRY_MAX_S)
        self._pod_retry[uid] = (now + wait, wait)
        self._pod_retry.move_to_end(uid)
        if len(self._pod_retry) > _POD_RETRY_MAX_UIDS:
            self._pod_retry.popitem(last=False)
        return now + wait

    # the rules
    def _resolve_uncached(self, pid: int) -> tuple[Attribution, float]:
        """The attribution of ``pid`` and until when it holds (monotonic time)."""
        try:
            ident = parse_cgroup(self._read(pid, "cgroup"))
        except PermissionError:
            ident = CgroupIdentity()
        namespace = pod = None
        until = _FOREVER
        if ident.pod_uid:
            found = self._pod(ident.pod_uid)
            if found:
                namespace, pod = found
                self._pod_retry.pop(ident.pod_uid, None)
            elif self.pod_log_dir is not None:  # its folder may not be there yet
                until = self._retry_pod_at(ident.pod_uid)
        return self._apply_rules(pid, ident, namespace, pod), until

    def _apply_rules(
        self, pid: int, ident: CgroupIdentity, namespace: str | None, pod: str | None
    ) -> Attribution:
        m = self.tenant_map
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
        if m.users and not ident.pod_uid:  # a container's uid does not name its tenant
            tenant = self._user_tenant(pid, ident)
            if tenant is not None:
                return Attribution(tenant, job, "user")
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

    def _user_tenant(self, pid: int, ident: CgroupIdentity) -> str | None:
        """The ``[users]`` entry of the process's uid: numeric uid first, then name."""
        uid = ident.slurm_uid
        if uid is None:
            try:
                uid = self._uid(pid)
            except PermissionError:
                return None
        if uid is None:
            return None
        tenant = self._users_by_uid.get(uid)
        if tenant is None and self._users_by_name:
            user = self._user_name(uid)
            if user is not None:
                tenant = self.tenant_map.users.get(user)
        return tenant

    @staticmethod
    def _job(pid: int, ident: CgroupIdentity, pod: str | None) -> str:
        if ident.pod_uid and not (ident.slurm_job and ident.slurm_in_pod):
            return pod or ident.pod_uid
        if ident.slurm_job:
            return f"slurm-{ident.slurm_job}"
        if ident.unit:
            return ident.unit
        return f"pid-{pid}"
