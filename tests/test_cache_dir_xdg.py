"""Default state folders follow ``$XDG_CACHE_HOME`` as the XDG spec says: an absolute path
is used, a relative one is ignored (it would put a service's spool under whatever folder
it happens to start in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.config import CollectorSettings, load


@pytest.mark.parametrize("value", ["relative/cache", "./cache", ""])
def test_a_relative_or_empty_xdg_cache_home_is_ignored(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    assert load(CollectorSettings).spool_dir == Path.home() / ".cache" / "dprobe" / "spool"


def test_an_absolute_xdg_cache_home_is_used(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert load(CollectorSettings).state_dir == tmp_path / "dprobe" / "collector"
