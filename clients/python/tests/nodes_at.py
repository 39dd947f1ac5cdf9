"""What the client's test modules import beside their fixtures (conftest.py's): a
module of its own, since another conftest.py of the suite (tests/browser's) may be the
one `import conftest` finds."""

from __future__ import annotations

from support import DisqProcess


def addr(node: DisqProcess) -> str:
    """A node's address as the client takes it."""
    return f"127.0.0.1:{node.port}"
