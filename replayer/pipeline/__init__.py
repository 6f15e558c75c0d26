"""The pipeline's stages, in order: plan, the sandbox and its state, rerun, rebuild, continue, the
result (docs/architecture.md). They import the floor, sandboxes, bridges and adapters."""
