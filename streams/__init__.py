"""The stream worker (faust): ingest, per-tenant windows, forecast + scale.

Thin shells around :mod:`dprobe.models`: agents move bytes between Kafka and the pure
aggregation code, keep plain state in changelog-backed tables, and never decide anything
themselves.
"""
