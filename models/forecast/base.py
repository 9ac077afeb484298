"""The one contract every demand forecaster follows (river-like).

- ``learn_one(window)``: learn from one closed :class:`~dprobe.schema.TenantWindow`
  (or any object with ``tenant``, ``window_end`` and ``effective_demand_gpus`` /
  ``pending_gpus`` / ``running_gpus``); returns nothing; never mutates its input.
- ``forecast(tenant, horizons)`` -> ``{horizon_s: (p50, p90)}`` in GPUs; a tenant never
  seen gets a forecast too (its own history is empty: the model falls back as it documents).
- ``state_dict()`` / ``load_state_dict(state)``: learned state as plain, serialisable data,
  so a restarted worker resumes warm. Hyperparameters are kept verbatim from ``__init__``.
- optionally ``forget(tenant)``: drop what was learned of one tenant only (a tenant gone
  for long; it is a new tenant if it comes back). What is shared by all tenants stays.
  :func:`forget` calls it where a model has it.

Example:
    >>> class Zero:
    ...     name, version = "zero", "1"
    ...     def learn_one(self, window): pass
    ...     def forecast(self, tenant, horizons): return {h: (0.0, 0.0) for h in horizons}
    ...     def state_dict(self): return {}
    ...     def load_state_dict(self, state): pass
    >>> isinstance(Zero(), Forecaster)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Forecaster(Protocol):
    name: str
    version: str

    def learn_one(self, window: Any) -> None: ...

    def forecast(
        self, tenant: str, horizons: Sequence[float]
    ) -> dict[float, tuple[float, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Forgets(Protocol):
    """A forecaster that can drop one tenant's state (:func:`forget`)."""

    def forget(self, tenant: str) -> None: ...


def forget(model: Any, tenant: str) -> bool:
    """Drop ``tenant``'s state from ``model`` where the model can; whether it could.

    >>> from dprobe.models.forecast.baselines import LastValue
    >>> forget(LastValue(), "gone")
    True
    """
    if isinstance(model, Forgets):
        model.forget(tenant)
        return True
    return False
