"""Demand forecasters behind one river-like contract (see :mod:`dprobe.models.forecast.base`)."""
