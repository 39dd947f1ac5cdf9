"""Stopping the node: SHUTDOWN, SIGTERM and SIGINT; and DEBUG RESTART, which
executes the program again. A part of `Server`."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from ..aof.disk import WAIT_REWRITE
from ..aof.rewrite import rewrite_now

if TYPE_CHECKING:
    from ..aof.writer import AppendOnlyFile
    from ..cluster.bus import ClusterBus
    from ..cluster.membership import Membership
    from ..config import Config
    from .connection import Client

log = logging.getLogger("disq")


class Shutdown:
    """Server's way out (a mixin: the state is set in Server.__init__)."""

    config: Config
    argv: list[str]
    loop: asyncio.AbstractEventLoop | None
    loading: bool
    aof: AppendOnlyFile
    bus: ClusterBus | None
    membership: Membership
    clients: dict[int, Client]
    _servers: list[asyncio.AbstractServer]
    _stopped: asyncio.Future[None] | None

    # -- shutdown and restart ------------------------------------------------------------
    def _on_signal(self, sig: int) -> None:
        log.warning("Received %s scheduling shutdown...", signal.Signals(sig).name)
        if not self.shutdown():
            log.warning("%s received but errors trying to shut down the server, check "
                        "the logs for more information", signal.Signals(sig).name)

    def shutdown(self, rewrite_aof: bool = False) -> bool:
        """Stop the node. False (and the node goes on) if the AOF could not be
        rewritten, as SHUTDOWN REWRITE-AOF asked or the first file of an AOF turned
        on at run time needs."""
        log.warning("User requested shutdown...")
        aof = self.aof
        if not self.loading and (rewrite_aof or aof.state == WAIT_REWRITE):
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
        for server in self._servers:
            server.close()
        for client in list(self.clients.values()):
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
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
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
            for server in self._servers:
                server.close()
            os.execv(sys.executable, [sys.executable, "-m", "disq", *self.argv])
        self.loop.call_later(delay_ms / 1000, again)  # type: ignore[union-attr]
