"""Map NVML failures to :class:`BackendError` with a bounded ``kind`` and a ``retriable`` flag.

Retriable: the next tick may succeed (a timeout, a busy library).
Fatal: it will not without intervention (the GPU is lost, needs a reset, no driver).
A ``DRIVER_WIDE`` kind concerns NVML or the driver, not one device: a read that meets one
fails as a whole, fatally, so that the backend is reopened (NVML initialised again).

Example:
    >>> import pynvml
    >>> err = to_backend_error(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), device="0")
    >>> err.kind, err.retriable
    ('gpu_lost', False)
"""

from __future__ import annotations

from typing import Any

from dprobe.collectors.errors import BackendError

# NVML return codes (nvml.h); fixed by NVIDIA's ABI, repeated here so a fake module works.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
FUNCTION_NOT_FOUND = 13  # an older driver lacks the call
NOT_FOUND = 6
TIMEOUT = 10
GPU_IS_LOST = 15

_KINDS: dict[int, tuple[str, bool]] = {
    1: ("uninitialized", True),
    2: ("invalid_argument", False),
    NOT_SUPPORTED: ("not_supported", False),
    NO_PERMISSION: ("no_permission", False),
    NOT_FOUND: ("not_found", True),
    7: ("insufficient_size", True),
    8: ("insufficient_power", False),
    9: ("no_driver", False),
    TIMEOUT: ("timeout", True),
    11: ("irq_issue", True),
    12: ("no_driver", False),
    FUNCTION_NOT_FOUND: ("function_not_found", False),
    14: ("corrupted_inforom", False),
    GPU_IS_LOST: ("gpu_lost", False),
    16: ("reset_required", False),
    17: ("operating_system", True),
    18: ("driver_mismatch", False),
    19: ("in_use", True),
    20: ("out_of_memory", True),
    21: ("no_data", True),
    27: ("not_ready", True),
    28: ("gpu_not_found", False),
}


# A value NVML does not give this caller: the device or the driver lacks it, or it needs
# privileges (a MIG GPU's own memory). An optional value failing so is skipped, not its GPU.
UNAVAILABLE = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION})

# The library or the driver failed, not one GPU (unloaded, replaced by another version,
# NVML shut down): every GPU fails alike until NVML is initialised again.
DRIVER_WIDE = frozenset({"uninitialized", "no_driver", "driver_mismatch"})


def to_backend_error(exc: BaseException, device: str | None = None) -> BackendError:
    """Translate an ``NVMLError`` (or ``NVMLLibraryMismatchError``) of ``pynvml``."""
    code: Any = getattr(exc, "value", None)
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        kind, retriable = "driver_mismatch", False
    elif isinstance(code, int) and code in _KINDS:
        kind, retriable = _KINDS[code]
    else:
        kind, retriable = "other", True
    where = f" on GPU {device}" if device is not None else ""
    return BackendError(f"NVML {kind}{where}: {exc}", kind=kind, retriable=retriable, device=device)
