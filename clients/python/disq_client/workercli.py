"""The `disq-worker` command: runs the handlers of a `disq_client.Worker` that a module
defines (`disq-worker app.jobs:worker`), with the worker's settings changed by its
options, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Sequence

from .worker import DELIVERY_LIMIT, GRACE_MS, RETRY_BACKOFF, Worker, check_retry_options, log


def load_worker(spec: str) -> Worker:
    """'package.module:name' -> the Worker that module defines under that name."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"disq-worker: expected module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name + ".").startswith(exc.name + "."):
            raise SystemExit(f"disq-worker: no module named {exc.name!r} (looked in "
                             f"{os.getcwd()} and sys.path; run it from the directory that "
                             "holds the module, or set PYTHONPATH)") from None
        raise SystemExit(f"disq-worker: cannot import {module_name!r}: "
                         f"{_describe(exc)}") from None
    except Exception as exc:  # the module's own code failed: say where, in one line
        raise SystemExit(f"disq-worker: cannot import {module_name!r}: "
                         f"{_describe(exc)}") from None
    worker = getattr(module, attr, None)
    if not isinstance(worker, Worker):
        raise SystemExit(f"disq-worker: {spec} is not a disq_client.Worker")
    return worker


def _describe(exc: BaseException) -> str:
    """`ValueError: bad value (app/jobs.py, line 3)`: the error and where it was raised."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and not isinstance(exc, SyntaxError):  # a SyntaxError names its line itself
        text += f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return text


def _backoff_arg(text: str) -> tuple[int, int] | tuple[()]:
    """--retry-backoff BASE_MS,MAX_MS, or 0 (none: the empty tuple)."""
    if text.strip() == "0":
        return ()
    base, sep, top = text.partition(",")
    try:
        if sep:
            return int(base), int(top)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected BASE_MS,MAX_MS or 0, got {text!r}")


def _gone(flag: str, instead: str) -> Callable[[str], None]:
    """The type of a flag that took seconds: refused, naming the flag in ms."""
    def refuse(_: str) -> None:
        raise argparse.ArgumentTypeError(f"{flag} (seconds) is gone: give {instead} "
                                         "(milliseconds)")
    return refuse


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="disq-worker", description="Run the handlers of a disq_client.Worker.")
    parser.add_argument("worker", help="module:attribute of the Worker, e.g. app.jobs:worker")
    parser.add_argument("--nodes", help="seed nodes, host:port[,host:port...] "
                        "(default: the Worker's)")
    parser.add_argument("--concurrency", "-c", type=int, help="jobs run at the same time")
    parser.add_argument("--grace-ms", type=int, metavar="MS",
                        help=f"time running jobs get at shutdown (default: {GRACE_MS})")
    parser.add_argument("--grace", type=_gone("--grace", "--grace-ms"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--password", help="AUTH password (default: $DISQ_PASSWORD)")
    parser.add_argument("--delivery-limit", type=int, metavar="N",
                        help="deliveries after which a failing job is moved to its "
                        f"dead-letter queue; 0: never (default: {DELIVERY_LIMIT})")
    parser.add_argument("--retry-backoff", type=_backoff_arg, metavar="BASE_MS,MAX_MS",
                        help="NACK delay after a failure, doubling from BASE_MS up to "
                        "MAX_MS; 0: NACK at once (default: {},{})".format(*RETRY_BACKOFF))
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = load_worker(args.worker)
    if args.nodes:
        worker.nodes = args.nodes
    if args.concurrency:
        worker.concurrency = args.concurrency
    if args.grace_ms is not None:
        if args.grace_ms < 0:
            parser.error("--grace-ms must not be negative")
        worker.grace_ms = args.grace_ms
    if args.delivery_limit is not None or args.retry_backoff is not None:
        limit = worker.delivery_limit if args.delivery_limit is None else (
            args.delivery_limit or None)
        backoff = worker.retry_backoff if args.retry_backoff is None else (
            args.retry_backoff or None)
        try:
            check_retry_options(limit, backoff)
        except ValueError as exc:
            parser.error(str(exc))
        worker.delivery_limit, worker.retry_backoff = limit, backoff
    password = args.password or os.environ.get("DISQ_PASSWORD")
    if password:
        worker.password = password
    log.info("disq-worker: queues %s, concurrency %d", ", ".join(worker.tasks),
             worker.concurrency)
    worker.run()
    log.info("disq-worker: stopped (%d acked, %d nacked, %d given back)", worker.acked,
             worker.nacked, worker.abandoned)
    if worker.abandoned and any(t.name.startswith("disq-worker")
                                for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(0)  # handler threads past the grace period: do not wait for them
    sys.exit(0)
