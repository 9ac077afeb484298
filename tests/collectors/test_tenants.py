"""pid -> (tenant, job) from fixture /proc trees: cgroup, mapping file, env, cache."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dprobe.collectors.cgroup import parse_cgroup
from dprobe.collectors.errors import ProcessGone
from dprobe.collectors.tenant_map import TenantMap, load_tenant_map
from dprobe.collectors.tenants import Attribution, TenantResolver
from dprobe.errors import UsageError

UID = "6f1c2a4e-1b2c-4d5e-8f90-a1b2c3d4e5f6"
K8S_SYSTEMD = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-9a8b.scope\n"
)
K8S_CGROUPFS_V1 = (
    "12:memory:/kubepods/besteffort/pod" + UID + "/4f3e2d1c\n"
    "11:cpu,cpuacct:/kubepods/besteffort/pod" + UID + "/4f3e2d1c\n"
)
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n"
SLURM_V1 = (
    "7:cpuset:/slurm/uid_1001/job_90210/step_batch/task_0\n6:memory:/slurm/uid_1001/job_90210\n"
)
SLICE = "0::/research.slice/train-42.service\n"
LOGIN = "0::/user.slice/user-1000.slice/session-3.scope\n"


@pytest.mark.parametrize(
    ("text", "pod", "job", "uid", "slices", "unit"),
    [
        (K8S_SYSTEMD, UID, None, None, (), None),
        (K8S_CGROUPFS_V1, UID, None, None, (), None),
        (SLURM_V2, None, "4711", None, (), "slurmstepd.scope"),
        (SLURM_V1, None, "90210", 1001, (), None),
        (SLICE, None, None, None, ("research.slice",), "train-42.service"),
        (LOGIN, None, None, None, ("user-1000.slice",), None),
        ("", None, None, None, (), None),
    ],
)
def test_parse_cgroup(text, pod, job, uid, slices, unit) -> None:
    ident = parse_cgroup(text)
    assert (ident.pod_uid, ident.slurm_job, ident.slurm_uid) == (pod, job, uid)
    assert (ident.slices, ident.unit) == (slices, unit)


def resolver(proc_tree, tenant_map=None, **kw) -> TenantResolver:
    kw.setdefault("pod_log_dir", None)
    kw.setdefault("user_name", {1000: "alice", 1001: "bob"}.get)
    return TenantResolver(proc_root=proc_tree.root, tenant_map=tenant_map, **kw)


def test_kubernetes_pod_maps_by_namespace_from_the_kubelet_log_folder(proc_tree, pod_logs) -> None:
    proc_tree.add(10, K8S_SYSTEMD)
    pod_logs("team-vision", "trainer-0", UID)
    m = TenantMap(namespaces={"team-vision": "vc-vision"})
    who = resolver(proc_tree, m, pod_log_dir=pod_logs.root).resolve(10)
    assert (who.tenant, who.job, who.source) == ("vc-vision", "trainer-0", "namespace")


def test_pod_entry_beats_namespace_and_unmapped_namespace_is_the_tenant(
    proc_tree, pod_logs
) -> None:
    proc_tree.add(10, K8S_CGROUPFS_V1)
    pod_logs("ml-prod", "trainer-0", UID)
    by_pod = TenantMap(pods={"ml-prod/trainer-0": "vc-prod"}, namespaces={"ml-prod": "vc-x"})
    assert resolver(proc_tree, by_pod, pod_log_dir=pod_logs.root).resolve(10).tenant == "vc-prod"
    unmapped = resolver(proc_tree, TenantMap(), pod_log_dir=pod_logs.root).resolve(10)
    assert (unmapped.tenant, unmapped.source) == ("ml-prod", "namespace")


def test_pod_uid_without_kubelet_folder_maps_by_uid_or_is_unassigned(proc_tree) -> None:
    proc_tree.add(10, K8S_SYSTEMD)
    assert resolver(proc_tree, TenantMap(pods={UID: "vc-u"})).resolve(10).tenant == "vc-u"
    who = resolver(proc_tree).resolve(10)
    assert (who.tenant, who.job) == ("unassigned", UID)


def test_slurm_job_with_user_and_account_rules(proc_tree) -> None:
    proc_tree.add(20, SLURM_V1, uid=0, env={"SLURM_JOB_ACCOUNT": "proj123"})
    by_user = resolver(proc_tree, TenantMap(users={"bob": "vc-bob"})).resolve(20)
    # the uid comes from the v1 cgroup path (uid_1001 = bob), not from /proc status (0)
    assert (by_user.tenant, by_user.job, by_user.source) == ("vc-bob", "slurm-90210", "user")
    by_account = resolver(
        proc_tree, TenantMap(accounts={"proj123": "vc-research"}), env_vars=["SLURM_JOB_ACCOUNT"]
    ).resolve(20)
    assert (by_account.tenant, by_account.source) == ("vc-research", "env")


def test_systemd_slice_maps_and_unit_is_the_job(proc_tree) -> None:
    proc_tree.add(30, SLICE)
    who = resolver(proc_tree, TenantMap(slices={"research.slice": "vc-r"})).resolve(30)
    assert (who.tenant, who.job, who.source) == ("vc-r", "train-42.service", "slice")


def test_environment_is_read_only_when_allowed_and_only_plain_ids_are_used(proc_tree) -> None:
    proc_tree.add(40, LOGIN, env={"DPROBE_TENANT": "vc-env", "SECRET_TOKEN": "hunter2"})
    proc_tree.add(41, LOGIN, start_time=5, env={"DPROBE_TENANT": "$(rm -rf /) hunter2"})
    assert resolver(proc_tree).resolve(40).tenant == "unassigned"
    allowed = resolver(proc_tree, env_vars=["DPROBE_TENANT"])
    assert allowed.resolve(40).tenant == "vc-env"
    assert allowed.resolve(41).tenant == "unassigned"  # not an identifier: ignored


def test_unknown_process_is_unassigned_with_a_pid_job(proc_tree) -> None:
    proc_tree.add(50, LOGIN)
    who = resolver(proc_tree).resolve(50)
    assert (who.tenant, who.job, who.source) == ("unassigned", "pid-50", "unassigned")


def test_cache_is_per_pid_and_start_time(proc_tree) -> None:
    proc_tree.add(60, SLICE, start_time=111)
    r = resolver(proc_tree, TenantMap(slices={"research.slice": "vc-r", "other.slice": "vc-o"}))
    assert r.resolve(60).tenant == "vc-r"
    # same pid, same start time: cached even though the cgroup file changed
    (proc_tree.root / "60" / "cgroup").write_text("0::/other.slice/x.service\n")
    assert r.resolve(60).tenant == "vc-r"
    # the pid was reused by a new process (new start time): resolved afresh
    proc_tree.add(60, "0::/other.slice/x.service\n", start_time=222)
    assert r.resolve(60).tenant == "vc-o"


def test_retain_forgets_processes_that_are_gone(proc_tree) -> None:
    proc_tree.add(70, SLICE)
    proc_tree.add(71, SLICE)
    r = resolver(proc_tree)
    r.resolve(70), r.resolve(71)
    r.retain([71])
    assert {pid for pid, _ in r._cache} == {71}


def test_a_vanished_process_raises_process_gone(proc_tree) -> None:
    proc_tree.add(80, SLICE)
    r = resolver(proc_tree)
    proc_tree.remove(80)
    with pytest.raises(ProcessGone):
        r.resolve(80)


def hide(monkeypatch: pytest.MonkeyPatch, proc_dir: Path) -> None:
    """Make the files of ``proc_dir`` answer EPERM, as a ``hidepid=1`` /proc does."""
    read_bytes = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self.parent == proc_dir:
            raise PermissionError(1, "Operation not permitted", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", denied)


def test_a_hidden_process_raises_process_gone(proc_tree, monkeypatch) -> None:
    proc_tree.add(81, SLICE)
    proc_tree.add(82, SLICE)
    hide(monkeypatch, proc_tree.root / "81")
    r = resolver(proc_tree, TenantMap(slices={"research.slice": "vc-r"}))
    with pytest.raises(ProcessGone, match="hidden"):
        r.resolve(81)
    assert r.resolve(82).tenant == "vc-r"


def test_a_process_whose_attribution_fails_raises_process_gone_once(proc_tree, caplog) -> None:
    proc_tree.add(83, LOGIN)
    (proc_tree.root / "83" / "status").write_text("Name:\tpython\nUid:\tnot-a-number\n")
    r = resolver(proc_tree, TenantMap(users={"alice": "vc-nlp"}))
    with pytest.raises(ProcessGone, match="attribution failed"):
        r.resolve(83)
    assert "process 83: attribution failed" in caplog.text
    # remembered like any other result: no error (nor log) at every tick
    assert r.resolve(83) == Attribution("unassigned", "pid-83", "unassigned")


def test_mapping_file_is_read_and_validated(tmp_path: Path) -> None:
    good = tmp_path / "map.toml"
    good.write_text('[namespaces]\nteam-a = "vc-a"\n[users]\nalice = "vc-nlp"\n')
    m = load_tenant_map(good)
    assert m.namespaces == {"team-a": "vc-a"} and m.users == {"alice": "vc-nlp"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[groups]\nx = "y"\n')
    with pytest.raises(UsageError, match="unknown tables"):
        load_tenant_map(bad)
    with pytest.raises(UsageError, match=r"missing\.toml: no such file"):
        load_tenant_map(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[pod]\n"ml/t-0" = "vc-a"\n',
            "unknown tables [pod] (line 1) (did you mean [pods]?): use [pods], [namespaces], "
            "[accounts], [slices], [users]",
        ),
        (
            'alice = "vc-a"\n[users]\nbob = "vc-b"\n',
            "key(s) alice (line 1) outside any table: put each in one of [pods], [namespaces], "
            "[accounts], [slices], [users]",
        ),
    ],
)
def test_a_misspelt_table_or_a_key_outside_any_is_named_as_such(
    tmp_path: Path, text: str, message: str
) -> None:
    bad = tmp_path / "tenants.toml"
    bad.write_text(text)
    with pytest.raises(UsageError) as err:
        load_tenant_map(bad)
    assert str(err.value) == f"tenant map {bad}: {message}"


def test_every_problem_of_a_mapping_file_is_named_at_once(tmp_path: Path) -> None:
    """An operator fixing the file learns all of them from one start, not one per start."""
    bad = tmp_path / "tenants.toml"
    bad.write_text(
        'alice = "vc-a"\n[pod]\n"ml/t-0" = "vc-a"\n[users]\nbob = 7\n'
        '[slices]\n"system.slice" = "vc-s"\n[accounts]\np1 = "vc-\\u0007"\n'
    )
    with pytest.raises(UsageError) as err:
        load_tenant_map(bad)
    problems = str(err.value).removeprefix(f"tenant map {bad}: ").split("; ")
    assert [p.split(" ", 1)[0] for p in problems] == [
        "key(s)",
        "unknown",
        "[accounts]",
        "[users]",
        "[slices]",
    ]
    assert "\n" not in str(err.value)  # one line: a service's error line holds them all
    assert "(did you mean [pods]?)" in problems[1] and "'system.slice'" in problems[4]


def test_a_mapping_file_saved_with_a_byte_order_mark_reads_like_one_without(
    tmp_path: Path,
) -> None:
    plain, marked = tmp_path / "plain.toml", tmp_path / "marked.toml"
    text = '[namespaces]\nteam-a = "vc-a"\n'
    plain.write_text(text, encoding="utf-8")
    marked.write_text(text, encoding="utf-8-sig")  # what Windows editors write
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert load_tenant_map(marked) == load_tenant_map(plain)


def test_a_mapping_to_a_tenant_with_a_control_character_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "map.toml"
    path.write_text('[users]\nalice = "vc-a\\u001b[31m"\n')  # a TOML escape: ESC
    with pytest.raises(
        UsageError, match=r"\[users\] tenant 'vc-a\\x1b\[31m' \(line 2\) holds a control"
    ):
        load_tenant_map(path)


STATIC_UID = "8d3b5e2ad0c2b0a2d6e4c76e7e8e2d02"  # the kubelet's MD5 hash of a static pod


@pytest.mark.parametrize(
    "text",
    [
        f"0::/kubepods/burstable/pod{STATIC_UID}/0123abcd\n",
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-ab.scope\n",
    ],
)
def test_static_pod_uids_without_dashes_are_recognised(text) -> None:
    assert parse_cgroup(text).pod_uid == STATIC_UID


def test_a_longer_hex_string_after_pod_is_not_a_static_pod_uid() -> None:
    assert parse_cgroup(f"0::/system.slice/x-pod{STATIC_UID}ab.scope\n").pod_uid is None


def test_static_pod_resolves_to_its_namespace(proc_tree, pod_logs) -> None:
    proc_tree.add(11, f"0::/kubepods/burstable/pod{STATIC_UID}/0123abcd\n")
    pod_logs("kube-system", "etcd-node1", STATIC_UID)
    who = resolver(proc_tree, pod_log_dir=pod_logs.root).resolve(11)
    assert (who.tenant, who.job, who.source) == ("kube-system", "etcd-node1", "namespace")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_pod_whose_folder_appears_after_the_last_read_is_attributed_soon(
    proc_tree, pod_logs
) -> None:
    other = "11111111-1111-1111-1111-111111111111"
    proc_tree.add(10, f"0::/kubepods/burstable/pod{other}/c1\n")
    proc_tree.add(12, K8S_CGROUPFS_V1)
    pod_logs("team-a", "trainer-a", other)
    clock = FakeClock()
    m = TenantMap(namespaces={"team-vision": "vc-vision"})
    r = resolver(proc_tree, m, pod_log_dir=pod_logs.root, monotonic=clock)
    assert r.resolve(10).tenant == "team-a"  # reads the folder at t=0
    clock.now = 5.0
    # pod 12 started (its process runs) before the kubelet's folder is there
    assert r.resolve(12).tenant == "unassigned"
    pod_logs("team-vision", "trainer-0", UID)
    clock.now = 7.0  # well before the 10 s a shared refresh period would wait
    who = r.resolve(12)
    assert (who.tenant, who.job, who.source) == ("vc-vision", "trainer-0", "namespace")
    clock.now = 600.0
    assert r.resolve(12) == who  # found: remembered for good


def test_the_pod_folder_is_read_at_most_once_a_second(proc_tree, pod_logs, monkeypatch) -> None:
    import dprobe.collectors.tenants as tenants

    reads: list[object] = []
    listdir = tenants.os.listdir

    def counting(path):
        reads.append(path)
        return listdir(path)

    monkeypatch.setattr(tenants.os, "listdir", counting)
    for pid in range(100, 110):  # ten processes of ten pods without a folder
        proc_tree.add(pid, f"0::/kubepods/burstable/pod{pid:08d}-0000-0000-0000-000000000000/c\n")
    clock = FakeClock()
    r = resolver(proc_tree, pod_log_dir=pod_logs.root, monotonic=clock)
    for t in (0.0, 0.3, 0.6, 0.9):
        clock.now = t
        assert {r.resolve(pid).tenant for pid in range(100, 110)} == {"unassigned"}
    assert len(reads) == 1


def test_an_unreadable_pod_folder_is_logged_once(proc_tree, tmp_path, caplog) -> None:
    proc_tree.add(10, K8S_SYSTEMD)
    proc_tree.add(11, K8S_SYSTEMD, start_time=5)
    clock = FakeClock()
    missing = tmp_path / "not-mounted"
    r = resolver(proc_tree, pod_log_dir=missing, monotonic=clock)
    for t in range(0, 120, 5):
        clock.now = float(t)
        r.resolve(10), r.resolve(11)
    warnings = [rec for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warnings) == 1
    assert str(missing) in warnings[0].getMessage()
    assert "namespaces" in warnings[0].getMessage()


def test_a_pod_namespace_beats_the_container_user(proc_tree, pod_logs) -> None:
    proc_tree.add(10, K8S_CGROUPFS_V1, uid=0)  # a container running as root
    proc_tree.add(11, LOGIN, uid=0)  # root on the host
    pod_logs("team-a", "trainer-0", UID)
    users = TenantMap(users={"root": "vc-ops"})
    r = resolver(proc_tree, users, pod_log_dir=pod_logs.root, user_name={0: "root"}.get)
    assert (r.resolve(10).tenant, r.resolve(10).source) == ("team-a", "namespace")
    assert (r.resolve(11).tenant, r.resolve(11).source) == ("vc-ops", "user")
    mapped = TenantMap(namespaces={"team-a": "vc-a"}, users={"root": "vc-ops"})
    r = resolver(proc_tree, mapped, pod_log_dir=pod_logs.root, user_name={0: "root"}.get)
    assert r.resolve(10).tenant == "vc-a"


SLURM_IN_POD = (
    f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-ab.scope/"
    "system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n"
)


def test_a_slurm_job_inside_a_pod_is_the_job(proc_tree, pod_logs) -> None:
    ident = parse_cgroup(SLURM_IN_POD)
    assert (ident.pod_uid, ident.slurm_job) == (UID, "5")
    proc_tree.add(10, SLURM_IN_POD)
    pod_logs("slurm", "slurmd-0", UID)
    who = resolver(proc_tree, pod_log_dir=pod_logs.root).resolve(10)
    assert (who.tenant, who.job) == ("slurm", "slurm-5")
    # a plain pod is still named by the pod
    proc_tree.add(11, K8S_SYSTEMD)
    assert resolver(proc_tree, pod_log_dir=pod_logs.root).resolve(11).job == "slurmd-0"


def test_users_accept_numeric_uids_before_names(proc_tree) -> None:
    proc_tree.add(10, LOGIN, uid=1000)
    proc_tree.add(11, LOGIN, uid=4242, start_time=5)
    m = TenantMap(users={"1000": "vc-uid", "alice": "vc-name", "4242": "vc-4242"})
    r = resolver(proc_tree, m, user_name={1000: "alice"}.get)
    assert (r.resolve(10).tenant, r.resolve(10).source) == ("vc-uid", "user")
    # a uid the collector's passwd does not know (an image's /etc/passwd)
    assert r.resolve(11).tenant == "vc-4242"


def test_user_names_are_looked_up_once_per_uid_for_a_while(proc_tree) -> None:
    calls: list[int] = []

    def slow_lookup(uid: int) -> str | None:  # SSSD or LDAP: seconds per call
        calls.append(uid)
        return {1000: "alice"}.get(uid)

    for pid in range(10, 20):
        proc_tree.add(pid, LOGIN, uid=1000 if pid % 2 else 777)
    clock = FakeClock()
    m = TenantMap(users={"alice": "vc-nlp"})
    r = resolver(proc_tree, m, user_name=slow_lookup, monotonic=clock)
    assert [r.resolve(pid).tenant for pid in (10, 11)] == ["unassigned", "vc-nlp"]
    for pid in range(12, 20):
        r.resolve(pid)
    assert sorted(calls) == [777, 1000]  # unknown uids are remembered too
    clock.now = 24 * 3600.0  # names can change: looked up again after a while
    r.retain([])
    r.resolve(11)
    assert sorted(calls) == [777, 1000, 1000]


@pytest.mark.parametrize(
    "key",
    [
        "system.slice",
        "user.slice",
        "machine.slice",
        "-.slice",
        "kubepods-burstable.slice",
        "research",
        "research.service",
        "research.slice/train.slice",
    ],
)
def test_slices_that_can_never_match_are_refused(tmp_path: Path, key: str) -> None:
    path = tmp_path / "map.toml"
    path.write_text(f'[slices]\n"{key}" = "vc-x"\n')
    with pytest.raises(UsageError, match=re.escape(repr(key))):
        load_tenant_map(path)


def test_a_slice_that_can_match_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "map.toml"
    path.write_text('[slices]\n"research.slice" = "vc-r"\n"user-1000.slice" = "vc-u"\n')
    assert load_tenant_map(path).slices == {"research.slice": "vc-r", "user-1000.slice": "vc-u"}


def test_a_removed_cgroup_still_names_its_job_and_unit() -> None:
    # cgroup v2 marks the path of a cgroup removed while the process still runs
    ident = parse_cgroup("0::/system.slice/slurmstepd.scope/job_4711 (deleted)\n")
    assert (ident.slurm_job, ident.unit) == ("4711", "slurmstepd.scope")
    ident = parse_cgroup("0::/research.slice/train-42.service (deleted)\n")
    assert (ident.slices, ident.unit) == (("research.slice",), "train-42.service")


def test_the_user_name_cache_is_bounded() -> None:
    from dprobe.collectors.tenants import _UserNames

    calls: list[int] = []
    names = _UserNames(lambda uid: calls.append(uid) or f"u{uid}", lambda: 0.0, max_size=2)
    assert [names(1), names(2), names(1), names(3)] == ["u1", "u2", "u1", "u3"]
    assert len(names._names) == 2
    names(1)  # kept: used more recently than 2
    names(2)  # dropped when 3 came: looked up again
    assert calls == [1, 2, 3, 2]
