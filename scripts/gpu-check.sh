#!/usr/bin/env bash
# Real-GPU check of the NVML collector (see scripts/gpu_check.py for what it checks).
#
# On a machine with an NVIDIA GPU and a Python 3.12 that has torch with CUDA, and no
# internet: carry the repository with build/gpu-check/wheels (scripts/gpu-check-wheels.sh
# builds it), then
#
#   scripts/gpu-check.sh [REPORT]      # default build/gpu-check/report.json
#
# It makes a virtual environment that sees the system's torch, installs dprobe and the
# collector's dependencies from the wheels only, runs the check for 30 s of snapshots and
# leaves everything it measured in REPORT, then runs the test suite's gpu-marked tests
# against the installed dprobe (their output goes to stdout). Exit 0: all checks and tests
# passed; 1: a check or test failed; 2: no usable GPU or no wheels. It takes about 3
# minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
report="${1:-build/gpu-check/report.json}"
wheels="build/gpu-check/wheels"
venv="build/gpu-check/venv"
py="${PYTHON:-python3}"
mkdir -p "$(dirname "$report")"
if ! ls "$wheels"/dprobe-*.whl >/dev/null 2>&1; then
    echo "gpu-check: no dprobe wheel in $wheels (run scripts/gpu-check-wheels.sh where pip works)" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2 || true
"$py" -m venv --system-site-packages "$venv"
# When "$py" is itself a virtual environment (torch installed in it), --system-site-packages
# sees only the base interpreter's packages: add "$py"'s own site-packages by a .pth file.
"$py" -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/gpu-check-torch.pth"
# from the wheels only; one missing there is a setup problem (exit 2), not a failed check
install() {
    "$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheels" "$@" || {
        echo "gpu-check: $wheels lacks what pip was asked for ($*): rebuild it with" \
            "scripts/gpu-check-wheels.sh where pip works" >&2
        exit 2
    }
}
install --no-deps "$wheels"/dprobe-*.whl
install --ignore-installed msgspec nvidia-ml-py prometheus-client "aiokafka[zstd,lz4]"  # not torch's
# 2: no usable GPU; anything else that is not 0 (a failed check, 124 for a check that ran
# past its time) is a failed check
status=0
timeout 280 "$venv/bin/python" scripts/gpu_check.py --report "$report" --seconds 30 \
    --dprobe "$venv/bin/dprobe" || status=$?
if [ "$status" -eq 2 ]; then exit 2; elif [ "$status" -ne 0 ]; then exit 1; fi

# The gpu-marked tests, against the installed dprobe: the project's own pytest settings
# (and python without -P) would put the source tree first on the path, where collectors/
# is not yet dprobe.collectors.
# (--ignore-installed: a pytest the torch environment may have is not the one tested with)
install --ignore-installed pytest pytest-asyncio pytest-timeout
ini="build/gpu-check/pytest.ini"
cat > "$ini" <<'INI'
[pytest]
addopts = -ra --import-mode=importlib -p no:cacheprovider
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
asyncio_default_test_loop_scope = session
markers =
    gpu: needs a real NVIDIA GPU and driver
    integration: talks to a real Kafka broker
    traces: reads the public traces
    slow: slow
INI
timeout 400 "$venv/bin/python" -P -m pytest -c "$ini" --rootdir . -m gpu \
    tests/collectors/test_gpu_nvml.py tests/collectors/test_output_and_gpu_check.py || exit 1
