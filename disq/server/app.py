"""The server: start-up, listeners, the wiring of every layer, and what commands ask
of the node as a whole (DEBUG LOADAOF, CLUSTER RESET, CONFIG SET's reactions to the
directives it owns; reactions.py registers each).

One node = one process = one event loop (uvloop). `Server` is made of parts in their
own modules, each owning its state: `clients` (clients.py: ClientRegistry), `stats`
(stats.py: SLOWLOG, LATENCY, ops, memory), `housekeeping` (housekeeping.py: the job
timer, the cron, the watchdog), `access` (access.py: what a change of the users does)
and `shutdown` (shutdown.py), made once the loop runs.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any

from .. import pure_python, schedules, tls
from ..acl import AclTable
from ..aof.disk import OFF, ON
from ..aof.fileformat import RecordEncoder
from ..aof.frames import KeyFileError
from ..aof.loader import AofLoader, AofLoadError
from ..aof.writer import AppendOnlyFile
from ..cluster.bus import ClusterBus
from ..cluster.membership import Membership
from ..config import DISQ_VERSION, Config, ConfigApplyError, ConfigError
from ..errors import LEAVING, LOADING, DisqError
from ..exposure import bus_closed
from ..gcfree import tune_collector
from ..ids import new_node_id
from ..node import Node, now_ms
from ..policies import QueuePolicy
from ..purges import Purge
from ..retention.store import RETAIN_DIR, RetentionStore
from ..schedules import CronSchedule
from ..topics import Subscription, subscription_key
from .access import Access
from .admin_service import AdminService
from .auth_throttle import AuthThrottle
from .batch_service import BatchService
from .clients import ClientRegistry
from .commands import load_commands
from .connection import Client
from .cron_service import ScheduleService
from .flows import Flows
from .histograms import Latencies
from .hotstate import HotState
from .housekeeping import Housekeeping
from .info import rss_bytes
from .process import (
    LEVELS,
    adjust_open_files_limit,
    daemonize,
    exposure_warning,
    setup_logging,
)
from .queue_service import QueueService
from .reactions import bind_reactions, reacts_to
from .records import ConfigRecords
from .replay_service import ReplayService
from .service import JobService
from .shutdown import Shutdown
from .stats import Stats
from .table import CATEGORIES, rename_command
from .topic_service import TopicService

if TYPE_CHECKING:
    from ..replication.replicator import Replication
    from ..replication.stats import NodeStats

log = logging.getLogger("disq")


def _log_spec_converted(name: bytes, stored: str, spec: str) -> None:
    """A schedule stored seconds last (disq/schedules.py): said once, the others alike."""
    log.warning("CRON %s: its six-field spec '%s' was stored with the seconds last (as "
                "before); it is now '%s', seconds first, with the same meaning (any other "
                "schedule stored so is converted the same way)",
                name.decode(errors="replace"), stored, spec)
    schedules.on_spec_converted = schedules.ignore_conversion


class Server:
    """One node's server: its parts, and what reaches across them."""

    def __init__(self, config: Config, argv: list[str] | None = None) -> None:
        self.config = config
        self.argv = list(argv or [])
        schedules.on_spec_converted = _log_spec_converted
        self.commands = load_commands()
        for name, new_name in config.renamed_commands:
            rename_command(name, new_name)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.start_time = time.time()
        self.run_id = os.urandom(20).hex()
        # What every request reads or counts, compiled (hotstate.py).
        self.hot = HotState(config)
        self.latencies: Latencies = self.hot.latencies  # ADDJOB, GETJOB, delivery lag
        self.commands[b"addjob"].histogram = self.latencies.addjob
        self.commands[b"getjob"].histogram = self.latencies.getjob
        config.listeners.append(self.hot.config_changed)
        self.loading = False
        self.loader: AofLoader | None = None  # while loading: the progress for INFO
        self.aof: AppendOnlyFile  # from the start of serve(), before any client
        # users (disq/acl.py), and failed authentications per address, RESP and HTTP alike
        self.acl = AclTable(CATEGORIES, config.requirepass, config.aclfile)
        self.auth_throttle = AuthThrottle()
        self.clients = ClientRegistry(config, self.hot)
        self.access = Access(self.acl, self.clients)
        self._metrics: Any = None  # the metrics port (metrics-port): http/metricsport.py
        self._http: Any = None  # the HTTP port (http-port): http/connections.py's HttpPort
        self.membership: Membership
        self.node: Node
        self.stats: Stats  # from prepare(), with the node
        self.housekeeping: Housekeeping
        self.shutdown: Shutdown  # from the start of serve()
        self.bus: ClusterBus | None = None
        self.replication: Replication | None = None
        # (those of the parts made in prepare() are bound there)
        self._reactions = bind_reactions(self, self.clients, self.access, every=False)
        config.listeners.append(self._config_changed)

    # -- start-up ----------------------------------------------------------------------
    def prepare(self) -> None:
        """Everything before the loop runs: directory, identity, the node. As in
        Disque, `dir` is entered first, so a relative logfile, cluster config file
        or AOF lives there."""
        try:
            os.chdir(self.config.dir)
        except OSError as exc:
            raise SystemExit(f"Can't chdir to '{self.config.dir}': {exc}") from None
        setup_logging(self.config)
        adjust_open_files_limit(self.config)
        self.membership = Membership.load_or_create(
            self.config.cluster_config_file, self.config.node_port)
        self.node = Node(self.config, self.membership.myself.id)
        self.stats = Stats(self.config, self.node, self.commands, self.hot, self.clients,
                           self.start_time)
        self.jobs = JobService(self)  # the job operations, for RESP and HTTP alike
        self.queues_service = QueueService(self)  # the queue operations, the same way
        self.schedules_service = ScheduleService(self)  # CRON's
        self.batch_service = BatchService(self)  # BATCH's
        self.flows = Flows(self)  # ADDJOB ... AFTER's children waiting here
        self.topic_service = TopicService(self)  # TOPIC's
        self.admin_service = AdminService(self)  # the cluster's reads, the users
        try:  # RETAIN queues' acked jobs, under `dir` (the AOF's key, if any)
            self.retention = RetentionStore(self.node, RETAIN_DIR,
                                            self.config.aof_encryption_key_file)
        except KeyFileError as exc:
            raise SystemExit(exc.strerror) from None
        self.node.retention = self.retention
        self.replays = ReplayService(self)  # REPLAY, RETAINED
        self.access.load_aclfile(self.node.id)
        self.stats.update_memory_limit()
        self.node.leaving = self.membership.leaving  # kept in nodes.conf
        if self.membership.restored:  # it may have known DEDUP keys it has lost
            self.node.dedup_since = now_ms()
        self.config_records = ConfigRecords(self.membership, self.node)
        self.housekeeping = Housekeeping(self.config, self.node, self.stats, self.clients,
                                         self.config_records)
        self.node.arm_timer = self.housekeeping.arm_timer
        self.node.consumers.on_ready = self.housekeeping.serve_ready_soon
        self.node.ends.on_ready = self.housekeeping.serve_ends_soon
        self._reactions = bind_reactions(self, self.clients, self.access, self.stats,
                                         self.housekeeping)
        if self.config.daemonize:
            daemonize()
        if self.config.pidfile:
            with open(self.config.pidfile, "w") as fh:
                fh.write(f"{os.getpid()}\n")

    async def serve(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        # Off until _load_data's end, but there for INFO, CONFIG SET and BGREWRITEAOF.
        self.aof = AppendOnlyFile(self.config, self.node, loop)
        self.aof.on_status_change = self._update_refusing
        self.clients.loop = self.stats.loop = self.access.loop = loop
        self.housekeeping.start(loop, self.aof)
        self.shutdown = Shutdown(self.config, self.argv, loop, self.aof, self.membership,
                                 self.clients, lambda: self.loading)
        # The HTTP and metrics ports before the RESP port: a node that answers PING
        # serves them too, and importing aiohttp (only then) holds the loop for a
        # while, which a client already connected would wait through. A busy port
        # stops the start, as `port` does.
        if self.config.http_port:
            from .http.app import start_http
            self._http = await start_http(self)
        if self.config.metrics_port:
            from .http.metricsport import start_metrics_port
            self._metrics = await start_metrics_port(self)
        if self.config.appendonly or self.config.aof_enqueue_jobs_once:
            # Loading from before the first client can connect: a PING answered in the
            # turn between listening and the load's start would say "loaded" (INFO
            # loading:0) of a node that may yet refuse its AOF (a wrong key) and exit
            self.loading = True
            self._update_refusing()
        await self._listen()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.shutdown.on_signal, sig)
        self.config_records.load()  # (the job timer needs the loop)
        self.stats.baseline_rss = rss_bytes()  # the interpreter, its modules, an empty node
        await self._load_data()
        if self.shutdown.stopped.done():
            return
        await self.retention.start(loop)
        for purge in list(self.node.policies.purges.entries.values()):
            self.node.purge(purge)  # jobs of a purged queue the AOF kept: gone as DELJOB
        if self.config.appendonly:
            try:
                self.aof.open()
            except OSError as exc:
                log.warning("Can't open the append-only file: %s", exc.strerror)
                raise SystemExit(1) from None
        self.bus = ClusterBus(self.membership, self.config.bind, self.config.node_port,
                              lambda: self.config.cluster_node_timeout, loop,
                              secret=self.config.cluster_secret,
                              tls=tls.bus_contexts(self.config) if self.config.tls_cluster
                              else None,
                              clock_skew_warn=lambda: self.config.clock_skew_warn_ms,
                              closed=bus_closed(self.config))
        self.shutdown.bus = self.bus
        await self.bus.start()
        self._connect_cluster()
        self.housekeeping.schedule_cron()
        if self.config.watchdog_period:  # from now on the cron re-arms it
            self.housekeeping.arm_watchdog()
        log.info("Node configured with ID %s", self.node.id)
        log.info("Hot path: %s", f"pure Python ({pure_python})" if pure_python else "compiled")
        log.info("disq %s (Disque %s compatible), port %d, pid %d: ready to accept "
                 "connections", DISQ_VERSION, "1.0-rc1", self.config.node_port, os.getpid())
        try:
            await self.shutdown.stopped
        finally:
            self.retention.close()  # its last records written and fsynced
            if self._http is not None:
                await self._http.cleanup()
            if self._metrics is not None:
                await self._metrics.cleanup()

    async def _load_data(self) -> None:
        """Disque's loadDataFromDisk: the AOF, if on (or aof-enqueue-jobs-once asks
        for it), before anything else. Clients may connect meanwhile: they get
        -LOADING. A damaged file stops the start."""
        cfg = self.config
        if not (cfg.appendonly or cfg.aof_enqueue_jobs_once):
            return
        loader = self.loader = self._new_loader()
        self.loading = True
        self._update_refusing()
        try:
            for _ in loader.run():
                await asyncio.sleep(0)  # a turn for the clients (-LOADING, INFO)
                if self.shutdown.stopped.done():
                    return
        except AofLoadError as exc:
            log.warning("%s", exc)
            raise SystemExit(1) from None
        finally:
            self.loading = False
            self._update_refusing()
        if cfg.aof_enqueue_jobs_once:  # a one-time option: it turns itself off
            cfg.apply("aof-enqueue-jobs-once", ["no"])
            if cfg.config_file:
                try:
                    cfg.rewrite()
                except ConfigError as exc:
                    log.warning("CONFIG REWRITE failed (executed to turn off "
                                "aof-enqueue-jobs-once): %s", exc)

    def _new_loader(self) -> AofLoader:
        cfg = self.config
        return AofLoader(self.node, cfg.appendfilename,
                         enqueue_jobs=cfg.aof_enqueue_jobs_once,
                         load_truncated=cfg.aof_load_truncated,
                         known_ids=self.membership.known_id_map(),
                         key_file=cfg.aof_encryption_key_file,
                         load_corrupt=cfg.aof_load_corrupt)

    def _update_refusing(self) -> None:
        self.hot.refusing = self.loading or self.aof.write_errno != 0

    def refusal(self, flags: str, name: str) -> DisqError | None:
        """The error for a command while `refusing`, in Disque's order: -MISCONF for
        write commands and PING after an AOF write error, then -LOADING. Each a fixed
        error, fresh: its reply is bytes made already."""
        misconf = self.aof.misconf
        if misconf is not None and ("w" in flags or name == "ping"):
            return misconf()
        if self.loading and "l" not in flags:
            return LOADING()
        return None

    async def _listen(self) -> None:
        cfg = self.config
        if cfg.port:  # `port 0`: no plain TCP (with a tls-port, TLS only)
            await self._listen_tcp(cfg.port, None)
        if cfg.tls_port:
            await self._listen_tcp(cfg.tls_port, tls.client_port_context(cfg))
        factory = self._new_client
        if cfg.unixsocket:
            try:
                os.unlink(cfg.unixsocket)
            except FileNotFoundError:
                pass
            server = await self.loop.create_unix_server(  # type: ignore[union-attr]
                factory, cfg.unixsocket, backlog=cfg.tcp_backlog)
            if cfg.unixsocketperm:
                os.chmod(cfg.unixsocket, cfg.unixsocketperm)
            self.shutdown.listeners.append(server)
        if not self.shutdown.listeners:
            raise SystemExit("Configured to not listen anywhere, exiting.")
        warning = exposure_warning(cfg.bind, self.acl.auth_required)
        if warning:
            log.warning("%s", warning)

    async def _listen_tcp(self, port: int, ssl_context: ssl.SSLContext | None) -> None:
        """Listen on `port` at every `bind` address (TLS with `ssl_context`)."""
        cfg = self.config
        explicit = cfg.bind != ["127.0.0.1", "::1"]
        extra = ({"ssl": ssl_context, "ssl_handshake_timeout": tls.HANDSHAKE_TIMEOUT}
                 if ssl_context is not None else {})
        for host in cfg.bind:
            try:
                server = await self.loop.create_server(  # type: ignore[union-attr]
                    self._new_client, host, port, backlog=cfg.tcp_backlog,
                    reuse_address=True, family=socket.AF_INET6 if ":" in host
                    else socket.AF_INET, **extra)  # type: ignore[call-overload,unused-ignore]
            except OSError as exc:
                unavailable = exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
                if not explicit and unavailable:
                    log.warning("Could not listen on %s:%d (%s), skipping", host, port,
                                exc.strerror)
                    continue
                raise SystemExit(
                    f"Could not create server TCP listening socket {host}:{port}: "
                    f"{exc.strerror}") from None
            self.shutdown.listeners.append(server)

    def _new_client(self) -> Client:
        return Client(self)

    # -- commands that reach beyond one client ------------------------------------------
    def _connect_cluster(self) -> None:
        """Let the replication layer (when present) speak for the node on the bus."""
        try:
            from ..replication.replicator import Replication
        except ImportError:
            return
        assert self.bus is not None and self.loop is not None  # the bus is up first
        self.replication = Replication(self.node, self.bus, self.loop)
        self.node.cluster = self.replication
        self.replication.recurring.on_change = self._schedule_changed
        self.replication.batches.on_done = self.flows.batch_done
        self.replication.topics.on_change = self._subscription_changed
        self.replication.purges.on_change = self._purge_changed
        self.replication.failures.on_policy_change = self._policy_changed
        self.replication.stats.local = self.node_stats
        from ..replication.retention import RetainedReads
        self.replays.reads = RetainedReads(self.bus, self.loop, self.retention)
        from ..replication.users import UserSync
        user_sync = self.access.user_sync = UserSync(self.acl, self.bus)
        self.housekeeping.cluster_ticks += [self.replication.recurring.cron,
                                            self.replication.batches.cron,
                                            self.replication.topics.cron,
                                            self.replication.purges.cron,
                                            self.replication.failures.cron, user_sync.cron]

    def node_stats(self) -> NodeStats:
        """This node's stats as its peers and the dashboard get them: the server's
        (`Stats.node_stats`) and its users' usage."""
        stats = self.stats.node_stats()
        stats.users = [user.usage() for user in self.acl.live()]
        return stats

    def _schedule_changed(self, schedule: CronSchedule) -> None:
        """CRON: persisted with the AOF when it is on, and in nodes.conf (what a node
        without the AOF restarts from) in any case."""
        self.node.persistence.schedule_stored(schedule)
        self.config_records.changed("cron", schedule.name, schedule.version,
                                    schedule.deleted)

    def _subscription_changed(self, subscription: Subscription) -> None:
        """TOPIC SUBSCRIBE / UNSUBSCRIBE: kept in nodes.conf, as CRON's schedules are."""
        self.config_records.changed("topic", subscription_key(subscription),
                                    subscription.version, subscription.deleted)

    def _purge_changed(self, purge: Purge) -> None:
        """QDEL / QPURGE: kept in nodes.conf, so that the jobs an AOF brings back and the
        copies that come late after a restart are still deleted."""
        self.config_records.changed("purge", purge.queue, purge.version, purge.deleted)

    def _policy_changed(self, policy: QueuePolicy) -> None:
        """QPOLICY: persisted as CRON's schedules are."""
        self.node.persistence.policy_stored(policy)
        self.config_records.changed("qpolicy", policy.queue, policy.version,
                                    policy.deleted)

    def debug_load_aof(self) -> bytes:
        """DEBUG LOADAOF: forget every job and load the AOF again. Unlike Disque,
        dropping the jobs logs nothing: Disque logs a DELJOB for each and then appends
        them to the very file it reloads, which empties it for the next start."""
        aof = self.aof
        if aof.rewrite is not None:
            aof.rewrite.cancel()  # its file would miss the jobs loaded now
        if aof.state != OFF:
            aof.write_pending()
        try:
            with aof.not_recording():
                self.flush_data()
                loader = self._new_loader()
                for _ in loader.run():
                    pass
        except AofLoadError as exc:
            log.warning("DEBUG LOADAOF: %s", exc)
            return b"-ERR " + str(exc).replace("\r", " ").replace("\n", " ").encode() + b"\r\n"
        if aof.state == ON and loader.size_after != loader.total_bytes:
            aof.current_size = loader.size_after  # a cut-off tail was truncated
        log.warning("Append Only File loaded by DEBUG LOADAOF")
        return b"+OK\r\n"

    def flush_data(self) -> None:
        """Drop every job and queue (DEBUG FLUSHALL, CLUSTER RESET). As Disque's
        flushServerData, consumers blocked in GETJOB get a null reply."""
        self.node.consumers.end_waits()
        self.node.flushall()

    def cluster_reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every other node and every job; HARD also takes a
        new node ID."""
        assert self.bus is not None
        self.bus.reset()
        self.flush_data()
        if hard:
            node_id = new_node_id()
            self.bus.set_my_id(node_id)
            self.node.set_id(node_id)
            if self.replication is not None:
                self.replication.identity_changed()
            self.aof.encoder = RecordEncoder(self.node.id)  # jobs list their holder
        self.membership.save()

    def set_leaving(self, leaving: bool) -> None:
        node = self.node
        node.leaving = leaving
        self.membership.set_leaving(leaving)
        if leaving:
            node.consumers.end_waits(LEAVING())

    # -- CONFIG SET's reactions (reactions.py; the others are beside what they change) ----
    def _config_changed(self, name: str, value: Any) -> None:
        reaction = self._reactions.get(name)
        if reaction is not None:
            reaction(value)

    @reacts_to("loglevel")
    def _loglevel_changed(self, level: str) -> None:
        log.setLevel(LEVELS[level])

    @reacts_to("dir")
    def _dir_changed(self, path: str) -> None:
        if self.loop is not None:
            try:
                os.chdir(path)
            except OSError as exc:
                log.warning("Can't chdir to '%s': %s", path, exc)

    @reacts_to("appendonly")
    def _appendonly_changed(self, on: bool) -> None:
        if on and self.aof.state == OFF:
            if not self.aof.turn_on():
                self.config.apply("appendonly", ["no"])
                raise ConfigApplyError("Unable to turn on AOF. Check server logs.")
        elif not on and self.aof.state != OFF:
            self.aof.turn_off()
        self._update_refusing()

    @reacts_to("appendfsync")
    def _appendfsync_changed(self, policy: str) -> None:
        self.aof.release()  # a weaker policy may let waiting replies go

    # -- logging helpers ------------------------------------------------------------------
    def log_verbose(self, message: str) -> None:
        log.log(15, message)

    def log_warning(self, message: str) -> None:
        log.warning(message)

    def log_exception(self, message: str, exc: BaseException) -> None:
        log.error("%s: %r", message, exc, exc_info=exc)


def run(config: Config, argv: list[str]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        uvloop = None  # type: ignore[assignment]
    tune_collector()
    server = Server(config, argv)
    server.prepare()
    if uvloop is not None:
        uvloop.run(server.serve())
    else:
        asyncio.run(server.serve())
