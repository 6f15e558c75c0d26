"""The verbs on top of the pipeline: compare, batch, export, view, verify, setup (docs/architecture.md)."""
