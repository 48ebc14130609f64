"""Traces: what a run did and saw (format in schema.py and spec/trace-format.md)."""
