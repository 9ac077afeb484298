"""The worker's stream state as pure functions over plain, serialisable data.

No Kafka, faust or Prometheus here: the agents in :mod:`dprobe.streams` keep these states
in changelog-backed tables and call these functions to change them.

- :mod:`~dprobe.streams.state.seq_tracker`: per-host snapshot ``seq``: duplicates, gaps,
  resets (ingest stage);
- :mod:`~dprobe.streams.state.window_agg`: per-tenant window partials and window states,
  and the TenantWindow of a closed window (ingest and window stages);
- :mod:`~dprobe.streams.state.job_book`: a tenant's pending and running jobs from the
  scheduler's job events (window stage);
- :mod:`~dprobe.streams.state.partition`: the window stage's per-partition state
  (watermark sources, open windows) and its stored form.

Example:
    >>> from dprobe.streams.state import seq_tracker
    >>> seq_tracker.observe(seq_tracker.initial(), seq=0, ts=1.0)[1]
    'new'
"""
