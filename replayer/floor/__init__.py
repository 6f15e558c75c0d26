"""The floor: records by stage, limits, errors, confined I/O, pins, settings, run folders, signals. It
imports nothing of the project above it; every other layer stands on it (docs/architecture.md)."""
