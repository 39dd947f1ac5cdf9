"""disq: a multi-master in-memory job broker compatible with Disque."""

from .config import DISQ_VERSION as __version__

__all__ = ["__version__"]
