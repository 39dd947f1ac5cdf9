"""The C extensions of disq (everything else is in pyproject.toml), both optional:

- `disq._gcfree`: one tiny function, disq/gcfree.py says why. Without a compiler disq
  falls back to ctypes, ~0.4 us slower per job created.
- the hot path compiled by mypyc (issue #22; README, "The compiled hot path"): the
  modules of NATIVE, each from its own .py file, which stays the one source (mypyc
  compiles the typed Python as it is). They become extension modules beside their .py
  files, with one shared library `disq/_native__mypyc*.so`. Without mypyc or a C
  compiler, or with DISQ_PURE_PYTHON=1 at install, disq installs as pure Python; a
  node runs the .py files whenever the compiled ones are absent, older than their
  sources or turned off (disq/__init__.py).
"""

import os
import sys

from setuptools import Extension, setup

# The connection's parse and dispatch, the job commands and their requests, the job,
# queue, timer and ID structures and the core that runs them.
NATIVE = [
    "disq/clock.py",
    "disq/ids.py",
    "disq/job.py",
    "disq/scantable.py",
    "disq/timers.py",
    "disq/queue.py",
    "disq/requests.py",
    "disq/jobops.py",
    "disq/memory.py",
    "disq/failures.py",
    "disq/node.py",
    "disq/server/resp.py",
    "disq/server/reply.py",
    "disq/server/table.py",
    "disq/server/pending.py",
    "disq/server/connection.py",
    "disq/server/commands/jobs.py",
    # the cluster bus: its codec, framing, links and membership (the 3-node case)
    "disq/cluster/clocks.py",
    "disq/cluster/nodes.py",
    "disq/cluster/messages.py",
    "disq/cluster/port.py",
    "disq/cluster/membership.py",
    "disq/cluster/link.py",
    "disq/cluster/bus.py",
    # replication: the copies of a job on its peers, their acks and DEDUP's checks
    "disq/dedup.py",
    "disq/replication/clock.py",
    "disq/replication/wire.py",
    "disq/replication/tables.py",
    "disq/replication/targets.py",
    "disq/replication/queues.py",
    "disq/replication/jobset.py",
    "disq/replication/stats.py",
    "disq/replication/acks.py",
    "disq/replication/dedup.py",
    "disq/replication/schedules.py",
    "disq/replication/requeue.py",
    "disq/replication/failures.py",
    "disq/replication/federation.py",
    "disq/replication/copies.py",
    "disq/replication/replicator.py",
]

LENIENT = ["--ignore-missing-imports", "--follow-imports=silent", "--allow-subclassing-any",
           "--no-warn-return-any", "--no-warn-unused-ignores", "--allow-untyped-decorators"]


def native_extensions() -> list[Extension]:
    if os.environ.get("DISQ_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify

        # `make lint` checks the types (mypy --strict). Here the packages disq
        # imports may be absent (pip builds in an environment of its own): what they
        # are not there to type is Any, which mypyc calls as Python does.
        extensions = mypycify([*LENIENT, *NATIVE], group_name="disq._native",
                              opt_level="3")
    except (Exception, SystemExit) as exc:  # no mypyc, or it refused the code
        print(f"disq: the hot path is not compiled ({exc!r}); pure Python",
              file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # a compiler error: pure Python (disq/__init__.py)
    return extensions


setup(ext_modules=[Extension("disq._gcfree", ["disq/_gcfree.c"], optional=True),
                   *native_extensions()])
