"""The server's fields that every request reads or counts, in one object that mypyc
compiles (`server.hot`).

The connection is compiled; the Server and its parts are Python objects, whose every
attribute read from compiled code is a generic getattr (a type lookup and a dict
lookup: ~250-450 instructions). Here each is one load. Each field has one writer,
named beside it; none copies a field kept elsewhere (the ones derived from other
state, `refusing` and `slow_usec`, are recomputed by their writer when it changes).
"""

from __future__ import annotations

import time
from typing import Any

from .histograms import Latencies
from .request_parser import RequestLimits


class HotState:
    def __init__(self, config: Any) -> None:
        # Seconds since the epoch, refreshed by the cron (hz; Housekeeping): what
        # per-request bookkeeping reads instead of calling the clock, as Redis's
        # server.unixtime.
        self.unixtime = time.time()
        # Counted by the connections (connection.py, pending.py); INFO's totals, cleared by
        # CONFIG RESETSTAT (Stats).
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        # CLIENT PAUSE: no client request runs before this time.monotonic() value
        # (ClientRegistry).
        self.clients_paused_until = 0.0
        # Commands are refused while loading (-LOADING) or after an AOF write error
        # (-MISCONF): one flag for the connection to check, set by the Server from
        # its `loading` and the AOF's state; the reasons in Server.refusal().
        self.refusing = False
        self.monitors: set[Any] = set()  # the clients that sent MONITOR (they add and leave)
        # Microseconds from which a command is looked at after it ran: the lower of the
        # slowlog and latency monitor thresholds (one comparison per command; Stats).
        self.slow_usec = 0
        # What every client's request parser reads (one object: CONFIG SET changes it,
        # through `config_changed`).
        # ADDJOB's, GETJOB's and the delivery lag's histograms (/metrics), here where
        # compiled code reaches them as a field (the Server is a Python object)
        self.latencies = Latencies()
        self.request_limits = RequestLimits(config.proto_max_bulk_len,
                                            config.proto_max_multibulk_len,
                                            config.client_query_buffer_limit)

    def config_changed(self, name: str, value: Any) -> None:
        """A config listener: the limits the request parser reads."""
        limits = self.request_limits
        if name == "proto-max-bulk-len":
            limits.proto_max_bulk_len = value
        elif name == "proto-max-multibulk-len":
            limits.proto_max_multibulk_len = value
        elif name == "client-query-buffer-limit":
            limits.client_query_buffer_limit = value
