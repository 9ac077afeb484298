#!/usr/bin/env bash
# Build, on a machine with internet access, the wheels scripts/gpu-check.sh installs on
# a GPU machine that has none: dprobe itself and what its NVML collector imports, for
# CPython 3.12 on x86-64 Linux, and pytest for the gpu-marked tests (torch is the GPU
# machine's own).
#
#   scripts/gpu-check-wheels.sh [OUT_DIR]      # default build/gpu-check/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/gpu-check/wheels}"
py="${PYTHON:-.venv/bin/python}"
mkdir -p "$out"
"$py" -m pip wheel --quiet --no-deps --wheel-dir "$out" .
"$py" -m pip download --quiet --dest "$out" --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform any \
    "msgspec>=0.19,<0.21" "nvidia-ml-py>=13.580,<14" "prometheus-client>=0.26,<0.27" \
    "aiokafka[zstd,lz4]>=0.14,<0.15" \
    "pytest>=9.2,<10" "pytest-asyncio>=1.5,<2" "pytest-timeout>=2.3,<3"
ls "$out"
