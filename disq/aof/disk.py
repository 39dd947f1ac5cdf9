"""What the AOF writer and its rewrite share: the AOF's states (Disque's aof_state)
and making a renamed file's directory entry durable."""

from __future__ import annotations

import os

OFF, ON, WAIT_REWRITE = "off", "on", "wait-rewrite"


def sync_directory(directory: str) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
