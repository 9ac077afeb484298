"""``dprobe lag`` refuses a consumer group or topic named twice (exit 2, naming it): a
group watched twice was polled twice and served every series of it twice, which
Prometheus drops as duplicate samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--group", "a", "--group", "b", "--group", "a"], "lag.groups names 'a' twice"),
        (["--topic", "t.x", "--topic", "t.x"], "lag.topics names 't.x' twice"),
    ],
)
def test_a_group_or_topic_given_twice_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    # nothing listens at port 1: the refusal comes before Kafka is asked
    assert main(["--bootstrap", "127.0.0.1:1", "lag", "--metrics-port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1


def test_a_settings_file_that_repeats_a_group_is_refused_by_config_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "lag.toml"
    toml.write_text('[lag]\ngroups = ["dprobe-worker", "dprobe-worker"]\n')
    assert main(["--config", str(toml), "config", "check"]) == 2
    err = capsys.readouterr().err
    assert "[lag] refused: lag.groups names 'dprobe-worker' twice" in err
