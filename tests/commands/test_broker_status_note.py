"""`dprobe broker status --bootstrap ADDR`: the note on stderr speaks of ADDR, the
address the user asked about, not of the configured broker.port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import _free_port


def _status(
    state_dir: Path, before: list[str], after: list[str]
) -> subprocess.CompletedProcess[str]:
    """``dprobe BEFORE broker status --state-dir STATE_DIR AFTER``."""
    command = [sys.executable, "-m", "dprobe.cli", *before, "broker", "status"]
    return subprocess.run(
        [*command, "--state-dir", str(state_dir), *after],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_stopped_broker_asked_about_another_address_says_so(tmp_path: Path) -> None:
    port, asked = _free_port(), _free_port()
    state = tmp_path / "broker"
    bootstrap = ["--bootstrap", f"127.0.0.1:{asked}"]
    for before, after in ((bootstrap, []), ([], bootstrap)):  # before the command or after
        res = _status(state, before, [*after, "--port", str(port)])
        assert (res.returncode, res.stdout.split()) == (1, ["stopped", f"127.0.0.1:{port}"])
        assert res.stderr.strip() == (
            f"dprobe broker: the broker of {state} would listen on 127.0.0.1:{port}, not on "
            f"127.0.0.1:{asked} (--bootstrap): status looks at the broker of a state dir "
            "(--state-dir), not at an address"
        )


def test_a_stopped_broker_asked_about_its_own_address_adds_nothing(tmp_path: Path) -> None:
    port = _free_port()
    for asked in (f"127.0.0.1:{port}", f"localhost:{port}", f"kafka-1:9092,localhost:{port}"):
        res = _status(tmp_path / "broker", [], ["--bootstrap", asked, "--port", str(port)])
        assert (res.returncode, res.stdout.split()[0], res.stderr) == (1, "stopped", "")
