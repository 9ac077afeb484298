"""The stream worker (faust): ingest, per-tenant windows, forecast + scale.

Thin shells around :mod:`dprobe.models` and :mod:`dprobe.streams.state`: agents move
bytes between Kafka and the pure aggregation code, keep plain state in changelog-backed
tables, and never decide anything themselves. This package module imports nothing, so
importing :mod:`dprobe.streams.state` stays light (no faust).
"""
