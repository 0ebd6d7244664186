"""The ``mcp-router`` command: serve, sessions/show/export, doctor."""

from router.cli.main import main

__all__ = ["main"]
