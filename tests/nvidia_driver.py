"""Whether this machine has a working NVIDIA driver (tests of what happens without one
skip where there is one)."""

from __future__ import annotations


def has_nvidia_driver() -> bool:
    """``True`` when NVML initialises (a driver and its library are installed)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError, OSError):
        return False
    pynvml.nvmlShutdown()
    return True
