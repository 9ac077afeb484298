"""``simulate --vcs`` and ``--colocate`` read a gzip-compressed table as the trace readers
read a ``.csv.gz``: the same run as with the plain file, and a damaged one is one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dprobe.cli import main

COLOCATE = (
    ",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,"
    "amp2,speed2,gpu_util,gmem_util,gmem\n"
    "0,VGG16,ImageNet,1,32,0,0.7,MobileNetV2,ImageNet,1,32,0,0.8,90,40,9000\n"
)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n"
        + "".join(f"{i},{'ab'[i % 2]},{1 + i % 3},{i},{20 + i},vgg16\n" for i in range(12))
    )
    made = {"jobs": jobs}
    for name, text in (("vcs", "vc,node num\na,1\nb,2\n"), ("colocate", COLOCATE)):
        made[name] = tmp_path / f"{name}.csv"
        made[name].write_text(text)
        made[f"{name}.gz"] = tmp_path / f"{name}.csv.gz"
        made[f"{name}.gz"].write_bytes(gzip.compress(text.encode(), mtime=0))
    return made


@pytest.mark.parametrize("flag", ["--vcs", "--colocate"])
def test_a_compressed_table_runs_as_the_plain_one(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    table = flag.removeprefix("--")
    base = ["simulate", "--jobs", str(inputs["jobs"]), "--policies", "fifo"]
    base += ["--modes", "static", "--chart", "", "--json"]
    if flag == "--colocate":
        base += ["--vcs", str(inputs["vcs"])]
    runs = []
    for given in (inputs[table], inputs[f"{table}.gz"]):
        code, out, err = _run([*base, flag, str(given)], capsys)
        assert code == 0, err
        runs.append(json.loads(out))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("flag", ["--vcs", "--colocate"])
def test_a_damaged_compressed_table_is_one_line_naming_it(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    table = flag.removeprefix("--")
    bad = inputs[f"{table}.gz"]
    bad.write_bytes(bad.read_bytes()[:20])
    argv = ["simulate", "--jobs", str(inputs["jobs"]), "--modes", "static", "--chart", ""]
    if flag == "--colocate":
        argv += ["--vcs", str(inputs["vcs"])]
    code, out, err = _run([*argv, flag, str(bad)], capsys)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"dprobe simulate: {bad}: unreadable: "), line
