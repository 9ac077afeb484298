"""Read the worker's ``/metrics``: the latest forecasts and quotas, late partials and
dead letters.

(Consumer lag is measured by the demo itself, every second, with the same
:class:`~dprobe.sinks.consumer_lag.ConsumerLag` the worker exports every few seconds.)

Example:
    >>> text = '''dprobe_tenant_forecast_gpus{tenant="vc-a",horizon="3600",quantile="0.5"} 4.0
    ... dprobe_tenant_forecast_gpus{tenant="vc-a",horizon="3600",quantile="0.9"} 6.5
    ... dprobe_tenant_quota_gpus{tenant="vc-a"} 8.0
    ... dprobe_late_partials_total 3.0
    ... dprobe_deadletters_total{reason="clock_skew"} 2.0
    ... dprobe_deadletters_total{reason="decode_error"} 0.0
    ... '''
    >>> s = parse_metrics(text)
    >>> s.forecasts, s.quotas, s.late_partials, s.dead_letters
    ({('vc-a', 3600.0): (4.0, 6.5)}, {'vc-a': 8.0}, 3, {'clock_skew': 2, 'decode_error': 0})
"""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from dprobe.demo.record import Scrape


def parse_metrics(text: str) -> Scrape:
    """The demo's values from a Prometheus text exposition (other series are ignored)."""
    p50: dict[tuple[str, float], float] = {}
    p90: dict[tuple[str, float], float] = {}
    quotas: dict[str, float] = {}
    late: int | None = None
    dead: dict[str, int] | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "dprobe_tenant_forecast_gpus":
                key = (labels["tenant"], float(labels["horizon"]))
                target = p50 if labels.get("quantile") == "0.5" else p90
                target[key] = float(sample.value)
            elif sample.name == "dprobe_tenant_quota_gpus":
                quotas[labels["tenant"]] = float(sample.value)
            elif sample.name == "dprobe_late_partials_total":
                late = int(sample.value)
            elif sample.name == "dprobe_deadletters_total":
                dead = dead if dead is not None else {}
                dead[labels.get("reason", "")] = int(sample.value)
    forecasts = {k: (v, p90.get(k, v)) for k, v in p50.items()}
    return Scrape(forecasts=forecasts, quotas=quotas, late_partials=late, dead_letters=dead)


def fetch(url: str, timeout_s: float = 2.0) -> str | None:
    """The body of ``url``, or ``None`` when nothing answers there (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return str(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
