"""The C extensions of disq (everything else is in pyproject.toml), all optional:

- `disq._gcfree`: one tiny function, disq/gcfree.py says why. Without a compiler disq
  falls back to ctypes, ~0.4 us slower per job created.
- `disq._msgcost`: what a bus frame would take once decoded, counted from its bytes
  (disq/cluster/messages.py). Without it, only a frame's lists are counted.
- `disq._bustag`: the GMAC tags of the bus's frames with cluster-secret, on OpenSSL's
  libcrypto (its headers: Debian's libssl-dev). Without it, the same tags through the
  cryptography package, ~7,000 instructions more a frame (disq/cluster/session.py).
- the hot path compiled by mypyc (README, "The compiled hot path"): the
  modules of NATIVE, each from its own .py file, which stays the one source (mypyc
  compiles the typed Python as it is). They become extension modules beside their .py
  files, with one shared library `disq/_native__mypyc*.so`. Without mypyc or a C
  compiler, or with DISQ_PURE_PYTHON=1 at install, disq installs as pure Python; a
  node runs the .py files whenever the compiled ones are absent, older than their
  sources or turned off (disq/__init__.py).

`make` has pip install disq as Python only (DISQ_NO_EXTENSIONS=1, quick) and builds the
extensions in place itself, once, with `python setup.py build_in_place` (`InPlaceBuild`):
`make run` starts its node at once and builds them in the background for the next
start, and `make test` installs its extras without compiling them again.
"""

import glob
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The connection's parse and dispatch, the job commands and their requests, the job,
# queue, timer and ID structures and the core that runs them.
NATIVE = [
    "disq/clock.py",
    "disq/ids.py",
    "disq/job.py",
    "disq/lifecycle.py",
    "disq/outcomes.py",
    "disq/scantable.py",
    "disq/timers.py",
    "disq/queue.py",
    "disq/turns.py",  # the groups' turns of a priority (PriorityJobs' order)
    "disq/queue_federation.py",  # what federation keeps of a queue (Queue.federation)
    "disq/options.py",  # the options' parsers, which every request's parse runs
    "disq/requests.py",
    "disq/queue_requests.py",
    "disq/jobops.py",
    "disq/endings.py",  # results and job ends (Node's JobEndings)
    "disq/results.py",  # the results kept, which every ACK looks at (Node.ends)
    "disq/end_requests.py",  # ACKJOB's RESULT form, tested on every ACKJOB
    "disq/memory.py",
    "disq/failures.py",
    "disq/admission.py",  # ADDJOB's checks and the new job (Node.admission)
    "disq/consumers.py",  # GETJOB and the blocked consumers (Node.consumers)
    "disq/orderkeys.py",  # ORDERKEY's lines (Node.orderkeys: every GETJOB looks at it)
    "disq/wakeups.py",  # what the node's timer does (Node.wakeups)
    "disq/node.py",
    "disq/acl.py",  # the user each request checks (restricted, calls)
    "disq/server/resp.py",
    "disq/server/reply.py",
    "disq/server/table.py",
    "disq/server/hotstate.py",
    "disq/server/request_parser.py",
    "disq/server/read_pause.py",
    "disq/server/pending.py",
    "disq/server/histograms.py",  # ADDJOB's and GETJOB's latencies, observed per request
    "disq/server/connection.py",
    "disq/server/commands/jobs.py",
    "disq/server/service.py",  # the job service ADDJOB's handler calls
    # the cluster bus: its codec, framing, links and membership (the 3-node case)
    "disq/cluster/clocks.py",
    "disq/cluster/nodes.py",
    "disq/cluster/messages.py",
    "disq/cluster/port.py",
    "disq/cluster/actions.py",
    "disq/cluster/membership.py",
    "disq/cluster/link.py",
    "disq/cluster/bus.py",
    # replication: the copies of a job on its peers, their acks and DEDUP's checks
    "disq/dedup_table.py",
    "disq/replication/clock.py",
    "disq/replication/wire.py",
    "disq/replication/tables.py",
    "disq/replication/targets.py",
    "disq/replication/queues.py",
    "disq/replication/jobset.py",
    "disq/replication/stats.py",
    "disq/replication/acks.py",
    "disq/replication/dedup_queries.py",
    "disq/replication/dedup_checks.py",
    "disq/replication/schedules.py",
    "disq/replication/requeue.py",
    "disq/replication/failures.py",
    "disq/replication/federation.py",
    "disq/replication/placement.py",
    "disq/replication/copies.py",
    "disq/replication/incoming.py",
    "disq/replication/replicator.py",
]

READ_AT = time.time()  # before mypycify reads the sources
SHARED_LIB = "_native__mypyc"  # the group's library, which every compiled module loads
LENIENT = ["--ignore-missing-imports", "--follow-imports=silent", "--allow-subclassing-any",
           "--no-warn-return-any", "--no-warn-unused-ignores", "--allow-untyped-decorators"]


def native_extensions() -> list[Extension]:
    if os.environ.get("DISQ_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify

        # `make lint` checks the types (mypy --strict). Here the packages disq
        # imports may be absent (pip builds in an environment of its own): what they
        # are not there to type is Any, which mypyc calls as Python does.
        # one C file per module (multi_file), which ParallelBuildExt compiles on every
        # core: one file of 21 MB took gcc 2.5 minutes alone, for the same code
        # (bench/instructions.py: within 0.5%)
        extensions = mypycify([*LENIENT, *NATIVE], group_name="disq._native",
                              opt_level="3", multi_file=True)
    except (Exception, SystemExit) as exc:  # no mypyc, or it refused the code
        print(f"disq: the hot path is not compiled ({exc!r}); pure Python",
              file=sys.stderr)
        return []
    for extension in extensions:
        # (mypyc writes the group's headers to build/disq/ for a dotted group name,
        # and includes them from build/)
        extension.include_dirs.append(os.path.join("build", "disq"))
        extension.optional = True  # a compiler error: pure Python (disq/__init__.py)
    return extensions


class ParallelBuildExt(build_ext):
    """build_ext compiling an extension's C files in parallel (setuptools compiles
    them one after the other; its --parallel runs whole extensions at once, and the
    mypyc group's shared library is one extension of 100 C files)."""

    def build_extension(self, ext: Extension) -> None:
        compiler: Any = self.compiler
        compile_one = compiler.compile

        def compile_parallel(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            if len(sources) < 2:
                return list(compile_one(sources, *args, **kwargs))
            largest_first = sorted(sources, key=lambda source: -os.path.getsize(source))
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # gcc runs apart
                compiled = pool.map(lambda source: compile_one([source], *args, **kwargs),
                                    largest_first)
                objects = dict(zip(largest_first, compiled, strict=True))
            return [obj for source in sources for obj in objects[source]]

        compiler.compile = compile_parallel
        try:
            super().build_extension(ext)
        finally:
            del compiler.compile


class InPlaceBuild(ParallelBuildExt):
    """`python setup.py build_in_place`: the extensions built apart (build/in-place/),
    then moved beside their sources, each file replaced whole (os.replace: a running
    node keeps the file it loaded; copying over it, as build_ext --inplace does, changes
    the code under it). mypyc's shared library goes away first and comes back last, so a
    node starting meanwhile never loads new modules with an old library or the reverse:
    without the library it runs the .py files (disq/__init__.py). Its time is set to the
    build's start, so a .py file edited during the build is newer and runs as Python."""

    description = "build the extensions and move them beside their sources"

    def finalize_options(self) -> None:
        super().finalize_options()
        self.inplace = False
        self.build_lib = os.path.join("build", "in-place")

    def run(self) -> None:
        super().run()
        moves = []
        for ext in self.extensions:
            built = self.get_ext_fullpath(ext.name)
            if os.path.exists(built):  # an optional extension may have failed
                moves.append((built, os.path.relpath(built, self.build_lib)))
        library = [move for move in moves if os.path.basename(move[1]).startswith(SHARED_LIB)]
        if library:
            for old in glob.glob(os.path.join("disq", SHARED_LIB + ".*")):
                os.remove(old)
            os.utime(library[0][0], (READ_AT, READ_AT))
        for built, target in [*(move for move in moves if move not in library), *library]:
            os.replace(built, target)


setup(cmdclass={"build_ext": ParallelBuildExt, "build_in_place": InPlaceBuild},
      ext_modules=[] if os.environ.get("DISQ_NO_EXTENSIONS", "") not in ("", "0") else [
          Extension("disq._gcfree", ["disq/_gcfree.c"], optional=True),
          Extension("disq._msgcost", ["disq/_msgcost.c"], optional=True),
          Extension("disq._bustag", ["disq/_bustag.c"], libraries=["crypto"], optional=True),
          *native_extensions()])
