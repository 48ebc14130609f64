"""Traces: what a run did and saw (format in schema.py and sbspec/trace-format.md)."""
