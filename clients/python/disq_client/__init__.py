"""disq_client: a Python client and worker for disq (and Disque) clusters.

The names below are imported on first use (PEP 562), so that importing one module of
the package, as the server does with `disq_client.spec` (the commands' option
tables), does not load the clients, asyncio's included: a node starts faster.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .bodies import from_json, from_msgpack, json_body, msgpack_body, to_body
    from .client import Client
    from .errors import (
        AuthenticationError,
        BadJobIdError,
        BatchError,
        DisqConnectionError,
        DisqError,
        DisqTimeoutError,
        LeavingError,
        LoadingError,
        NoJobError,
        NoReplicationError,
        OutOfMemoryError,
        PausedError,
        ProtocolError,
        QueueFullError,
        ResponseError,
        TooLateError,
    )
    from .tls import ssl_context
    from .types import (
        BatchStatus,
        CronEntry,
        Hello,
        HelloNode,
        Job,
        JobEnd,
        JobError,
        JobInfo,
        QueuePolicy,
        QueueStat,
        RetainedJob,
    )
    from .worker import Worker, report_progress

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "BadJobIdError",
    "BatchError",
    "Client",
    "DisqConnectionError",
    "DisqError",
    "DisqTimeoutError",
    "Hello",
    "HelloNode",
    "Job",
    "JobEnd",
    "JobError",
    "JobInfo",
    "LeavingError",
    "LoadingError",
    "NoJobError",
    "NoReplicationError",
    "OutOfMemoryError",
    "PausedError",
    "ProtocolError",
    "QueueFullError",
    "QueuePolicy",
    "QueueStat",
    "RetainedJob",
    "BatchStatus",
    "CronEntry",
    "ResponseError",
    "TooLateError",
    "Worker",
    "from_json",
    "from_msgpack",
    "json_body",
    "msgpack_body",
    "report_progress",
    "ssl_context",
    "to_body",
]

# each public name -> the module of the package that defines it
_HOMES = {
    "AsyncClient": "aio", "Client": "client", "Worker": "worker", "ssl_context": "tls",
    "report_progress": "worker",
    **{name: "bodies" for name in ("from_json", "from_msgpack", "json_body", "msgpack_body",
                                   "to_body")},
    **{name: "types" for name in ("BatchStatus", "CronEntry", "Hello", "HelloNode", "Job", "JobEnd", "JobError",
                                  "JobInfo", "QueuePolicy", "QueueStat",
                                  "RetainedJob")},
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name) or ("errors" if name in __all__ else None)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # found at once next time
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
