"""sandbox-replayer: replay coding-agent trajectories in containers."""

__version__ = "0.1.0"
