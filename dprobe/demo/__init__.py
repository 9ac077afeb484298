"""``dprobe demo``: the whole pipeline on one machine on an accelerated clock.

Modules, one job each:

- :mod:`~dprobe.demo.plan`: the run's settings and the names derived from them;
- :mod:`~dprobe.demo.record`: what the demo saw (windows, forecasts, quotas, events);
- :mod:`~dprobe.demo.scrape`: reading the worker's ``/metrics``;
- :mod:`~dprobe.demo.summary`: the closing summary (counts, lag, forecast error);
- :mod:`~dprobe.demo.chart`: the PNG of demand vs forecast vs quota per tenant;
- :mod:`~dprobe.demo.processes`: the broker and the worker subprocess;
- :mod:`~dprobe.demo.run`: the orchestration.

Example:
    dprobe demo --duration 90 --out demo-out
"""
