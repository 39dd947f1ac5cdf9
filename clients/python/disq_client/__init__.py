"""disq_client: a Python client and worker for disq (and Disque) clusters."""

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
from .types import CronEntry, Hello, HelloNode, Job, JobInfo, QueuePolicy, QueueStat
from .worker import Worker

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
    "CronEntry",
    "ResponseError",
    "TooLateError",
    "Worker",
    "from_json",
    "from_msgpack",
    "json_body",
    "msgpack_body",
    "ssl_context",
    "to_body",
]
