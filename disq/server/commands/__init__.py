"""One module per command family; each handler registers itself in `..table`.

- jobs.py: ADDJOB GETJOB ACKJOB FASTACK NACK ENQUEUE DEQUEUE DELJOB WORKING SHOW LOADJOB
  JOBSET
- queues.py: QLEN QPEEK QSTAT QSCAN JSCAN PAUSE
- cron.py: CRON (ADD, DEL, LIST; a disq extension)
- batches.py: BATCH (NEW, CLOSE, STATUS, LIST; a disq extension)
- topics.py: TOPIC (SUBSCRIBE, UNSUBSCRIBE, LIST, PUBLISH; a disq extension)
- policies.py: QPOLICY (SET, GET, DEL), DEADLETTER (REQUEUE) (disq extensions)
- cluster.py: CLUSTER HELLO
- acl.py: AUTH ACL (users and permissions)
- admin.py: PING INFO CONFIG DEBUG TIME COMMAND CLIENT SHUTDOWN SLOWLOG LATENCY
  BGREWRITEAOF MONITOR (QUIT is handled by the connection itself)
"""

from __future__ import annotations

from ..table import COMMANDS, CommandSpec
from . import (  # noqa: F401  (each registers its commands)
    acl,
    admin,
    batches,
    cluster,
    cron,
    jobs,
    policies,
    queues,
    retention,
    topics,
)


def load_commands() -> dict[bytes, CommandSpec]:
    """The table of every command: importing this package registered them all."""
    return COMMANDS
