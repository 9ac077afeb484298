"""``dprobe demo --out`` that cannot be a folder is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


@pytest.mark.parametrize("kind", ["file", "under_a_file"])
def test_an_out_that_cannot_be_a_folder_exits_2_naming_it(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder\n")
    out = blocker if kind == "file" else blocker / "demo"
    # an unreachable bootstrap: the refusal comes before any broker is looked for
    code = main(["--bootstrap", "127.0.0.1:1", "demo", "--duration", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--out" in err and str(out) in err, err
    assert "Traceback" not in err
    assert blocker.read_text() == "not a folder\n"


def test_the_extras_check_holds_once_faust_is_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """faust replaces its module with a lazy one that has no ``__spec__``: once it is
    imported in the process, asking for its spec raised ValueError instead of finding it."""
    import faust  # noqa: F401 - the import is the point

    out = tmp_path / "taken"
    out.write_text("not a folder\n")
    code = main(["--bootstrap", "127.0.0.1:1", "demo", "--duration", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--out" in err and "Traceback" not in err, err
