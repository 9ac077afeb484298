"""``dprobe collect`` given a tenant map or proc_root it cannot even look at: exit 2.

A path with a name longer than a file name allows, like one under a folder the service's
user may not enter, makes ``stat`` fail with an error other than "no such file": the
collector names the setting and the reason in one line instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

from dprobe.cli import main

TOO_LONG = "a" * 300  # a file name holds at most 255 bytes


def _collect_once(capsys, *flags: str) -> tuple[int, list[str]]:
    code = main(["collect", "--once", *flags])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_tenant_map_that_cannot_be_looked_at_exits_2_in_one_line(capsys, tmp_path) -> None:
    path = tmp_path / TOO_LONG / "tenants.toml"
    code, err = _collect_once(capsys, "--backend", "synthetic", "--tenant-map", str(path))
    assert code == 2
    assert err == [f"dprobe collect: tenant map {path}: cannot read: File name too long"]


def test_a_missing_tenant_map_is_still_named_as_missing(capsys, tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    code, err = _collect_once(capsys, "--backend", "synthetic", "--tenant-map", str(path))
    assert (code, err) == (2, [f"dprobe collect: tenant map {path}: no such file"])


def test_a_proc_root_that_cannot_be_looked_at_exits_2_in_one_line(capsys, tmp_path) -> None:
    proc = tmp_path / TOO_LONG
    code, err = _collect_once(capsys, "--backend", "nvml", "--proc-root", str(proc))
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"dprobe collect: collector.proc_root: {proc}")
