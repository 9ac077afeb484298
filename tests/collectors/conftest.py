"""Fixtures of the collector tests: fake /proc trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


class ProcTree:
    """Builds ``/proc/<pid>/{cgroup,stat,status,cmdline,environ}`` under a temp folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(
        self,
        pid: int,
        cgroup: str = "0::/\n",
        *,
        start_time: int = 1000,
        uid: int = 1000,
        env: dict[str, str] | None = None,
        cmdline: str = "python train.py",
    ) -> None:
        d = self.root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(cgroup)
        # comm with spaces and parentheses: the parser must split after the last ')'
        fields = ["S"] + ["0"] * 18 + [str(start_time), "0", "0"]
        (d / "stat").write_text(f"{pid} (py (worker) 1) " + " ".join(fields) + "\n")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        environ = "".join(f"{k}={v}\0" for k, v in (env or {}).items())
        (d / "environ").write_bytes(environ.encode())

    def remove(self, pid: int) -> None:
        for f in (self.root / str(pid)).iterdir():
            f.unlink()
        (self.root / str(pid)).rmdir()


@pytest.fixture
def proc_tree(tmp_path: Path) -> ProcTree:
    return ProcTree(tmp_path / "proc")


@pytest.fixture
def pod_logs(tmp_path: Path) -> Callable[[str, str, str], None]:
    """Add a kubelet pod log folder ``<namespace>_<pod>_<uid>``."""
    root = tmp_path / "pods"
    root.mkdir()

    def add(namespace: str, pod: str, uid: str) -> None:
        (root / f"{namespace}_{pod}_{uid}").mkdir()

    add.root = root  # type: ignore[attr-defined]
    return add
