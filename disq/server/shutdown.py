"""Stopping the node: SHUTDOWN, SIGTERM and SIGINT; and DEBUG RESTART, which
executes the program again. A part of `Server` (`server.shutdown`)."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..aof.disk import WAIT_REWRITE
from ..aof.rewrite import rewrite_now

if TYPE_CHECKING:
    from ..aof.writer import AppendOnlyFile
    from ..cluster.bus import ClusterBus
    from ..cluster.membership import Membership
    from ..config import Config
    from .clients import ClientRegistry

log = logging.getLogger("disq")


class Shutdown:
    """The server's way out (`server.shutdown`), made once the loop and the AOF are:
    it owns what stopping ends, the listeners and the future `serve` waits on."""

    __slots__ = ("config", "argv", "loop", "aof", "membership", "clients", "loading",
                 "bus", "listeners", "stopped")

    def __init__(self, config: Config, argv: list[str], loop: asyncio.AbstractEventLoop,
                 aof: AppendOnlyFile, membership: Membership, clients: ClientRegistry,
                 loading: Callable[[], bool]) -> None:
        self.config = config
        self.argv = argv
        self.loop = loop
        self.aof = aof
        self.membership = membership
        self.clients = clients
        self.loading = loading  # whether the AOF is loading (then it is not rewritten)
        self.bus: ClusterBus | None = None  # once it runs
        self.listeners: list[asyncio.AbstractServer] = []  # the client ports'
        self.stopped: asyncio.Future[None] = loop.create_future()  # the end of serve

    # -- shutdown and restart ------------------------------------------------------------
    def on_signal(self, sig: int) -> None:
        log.warning("Received %s scheduling shutdown...", signal.Signals(sig).name)
        if not self.stop():
            log.warning("%s received but errors trying to shut down the server, check "
                        "the logs for more information", signal.Signals(sig).name)

    def stop(self, rewrite_aof: bool = False) -> bool:
        """Stop the node. False (and the node goes on) if the AOF could not be
        rewritten, as SHUTDOWN REWRITE-AOF asked or the first file of an AOF turned
        on at run time needs."""
        log.warning("User requested shutdown...")
        aof = self.aof
        if not self.loading() and (rewrite_aof or aof.state == WAIT_REWRITE):
            try:
                rewrite_now(aof)
            except OSError as exc:
                log.warning("Write error writing append only file on disk: %s",
                            exc.strerror)
                return False
            log.info("SYNC append only file rewrite performed")
        aof.shutdown()
        faulthandler.cancel_dump_traceback_later()
        if self.bus is not None:
            self.bus.stop()
        try:
            self.membership.save()  # CRON schedules and queue policies too (records.py)
        except OSError as exc:
            log.warning("Error saving the cluster config on shutdown: %s", exc)
        for server in self.listeners:
            server.close()
        for client in list(self.clients.connected.values()):
            client.close()
        if self.config.unixsocket:
            try:
                os.unlink(self.config.unixsocket)
            except OSError:
                pass
        if self.config.pidfile:
            try:
                os.unlink(self.config.pidfile)
            except OSError:
                pass
        log.warning("Disque is now ready to exit, bye bye...")
        if not self.stopped.done():
            self.stopped.set_result(None)
        return True

    def restart(self, graceful: bool, delay_ms: int) -> None:
        """DEBUG RESTART / CRASH-AND-RECOVER: exec this same program again."""
        def again() -> None:
            self.aof.shutdown()
            if graceful:
                try:
                    self.membership.save()
                except OSError:
                    pass
            for server in self.listeners:
                server.close()
            os.execv(sys.executable, [sys.executable, "-m", "disq", *self.argv])
        self.loop.call_later(delay_ms / 1000, again)
