"""INFO: Disque's sections and field names, read from the server's counters."""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import TYPE_CHECKING

from .. import pure_python
from ..config import VERSION

if TYPE_CHECKING:
    from .app import Server

DEFAULT_SECTIONS = ("server", "clients", "memory", "jobs", "queues", "persistence", "stats",
                    "cpu")
ALL_SECTIONS = DEFAULT_SECTIONS + ("commandstats",)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    for unit in ("K", "M", "G", "T"):
        n_f = n / 1024
        if n_f < 1024 or unit == "T":
            return f"{n_f:.2f}{unit}"
        n = int(n_f)
    return f"{n}B"


def _server(s: Server) -> list[str]:
    uptime = int(time.time() - s.start_time)
    uname = os.uname()  # what platform.system(), release() and machine() read
    return [
        f"disque_version:{VERSION}",
        "disque_git_sha1:00000000",
        "disque_git_dirty:0",
        "disque_build_id:disq",
        f"disq_compiled:{0 if pure_python else 1}",  # the hot path (disq/__init__.py)
        f"os:{uname.sysname} {uname.release} {uname.machine}",
        f"arch_bits:{64 if sys.maxsize > 2**32 else 32}",
        "multiplexing_api:epoll",
        "gcc_version:0.0.0",
        f"process_id:{os.getpid()}",
        f"run_id:{s.run_id}",
        f"tcp_port:{s.config.port}",
        f"uptime_in_seconds:{uptime}",
        f"uptime_in_days:{uptime // 86400}",
        f"hz:{s.config.hz}",
        f"executable:{sys.argv[0] and os.path.abspath(sys.argv[0])}",
        f"config_file:{s.config.config_file or ''}",
    ]


def _clients(s: Server) -> list[str]:
    return [
        f"connected_clients:{len(s.clients.connected)}",
        f"http_connections:{s.clients.http_connections}",
        "client_longest_output_list:0",
        f"client_biggest_input_buf:{s.clients.biggest_input_buffer()}",
        f"blocked_clients:{s.node.blocked_clients}",
    ]


def _memory(s: Server) -> list[str]:
    used = s.stats.used_memory()
    rss = s.stats.rss()
    peak = max(s.stats.memory_peak, used)
    return [
        f"used_memory:{used}",
        f"used_memory_human:{human_bytes(used)}",
        f"used_memory_rss:{rss}",
        f"used_memory_peak:{peak}",
        f"used_memory_peak_human:{human_bytes(peak)}",
        f"mem_fragmentation_ratio:{s.stats.fragmentation_ratio():.2f}",
        "mem_allocator:pymalloc",
    ]


def _jobs(s: Server) -> list[str]:
    return [f"registered_jobs:{len(s.node.jobs)}"]


def _batches(s: Server) -> list[str]:
    """Batches (batches.py) this node holds, by phase; the member IDs it keeps for
    them (bounded); the flows' children waiting here for their parents (flows.py)."""
    table = s.node.batches
    phases = [0, 0, 0]
    for batch in table.batches.values():
        phases[batch.phase] += 1
    return [f"batches:{len(table)}", f"batches_open:{phases[0]}",
            f"batches_closed:{phases[1]}", f"batches_done:{phases[2]}",
            f"batch_member_ids:{table.member_ids}",
            f"flow_children_waiting:{len(s.flows.children)}"]


def _results(s: Server) -> list[str]:
    """How jobs ended (results.py): the results kept and what they take, those gone
    by their RESULT-TTL or for memory, results given again for a job that had one, and
    the jobs WAITJOBs watch here."""
    ends = s.node.ends
    return [f"results_kept:{len(ends)}", f"results_bytes:{ends.bytes}",
            f"results_expired:{ends.expired}", f"results_evicted:{ends.evicted}",
            f"results_repeated:{ends.repeats}", f"jobs_watched:{len(ends.watchers)}"]


def _queues(s: Server) -> list[str]:
    return [f"registered_queues:{len(s.node.queues)}"]


def _persistence(s: Server) -> list[str]:
    lines = [f"loading:{int(s.loading)}"]
    lines += s.aof.info()
    loader = s.loader
    if s.loading and loader is not None:
        elapsed = time.time() - loader.start_time
        total = max(loader.total_bytes, 1)
        done = loader.loaded_bytes
        eta = int(elapsed * (total - done) / done) if done and elapsed >= 1 else 1
        lines += [
            f"loading_start_time:{int(loader.start_time)}",
            f"loading_total_bytes:{loader.total_bytes}",
            f"loading_loaded_bytes:{done}",
            f"loading_loaded_perc:{done * 100 / total:.2f}",
            f"loading_eta_seconds:{eta}",
        ]
    return lines


def _stats(s: Server) -> list[str]:
    return [
        f"total_connections_received:{s.clients.connections_received}",
        f"total_commands_processed:{s.stats.commands_processed}",
        f"instantaneous_ops_per_sec:{s.stats.ops_per_sec}",
        f"total_net_input_bytes:{s.hot.net_input_bytes}",
        f"total_net_output_bytes:{s.hot.net_output_bytes}",
        f"instantaneous_input_kbps:{s.stats.input_kbps:.2f}",
        f"instantaneous_output_kbps:{s.stats.output_kbps:.2f}",
        f"rejected_connections:{s.clients.rejected_connections}",
        f"rejected_commands_per_ip:{s.clients.rejected_commands_per_ip}",
        f"rejected_commands_rate:{s.clients.rejected_commands_rate}",
        # users and permissions, as Redis 7 names them
        f"acl_access_denied_auth:{s.acl.denied_auth}",
        f"acl_access_denied_cmd:{s.acl.denied_cmd}",
        f"acl_access_denied_key:{s.acl.denied_key}",
        f"acl_access_denied_auth_throttled:{s.acl.denied_auth_throttled}",
        # failed authentications per address (auth_throttle.py): the pauses, the
        # addresses with recent failures
        f"acl_auth_pauses:{s.auth_throttle.pauses}",
        f"acl_auth_failing_sources:{s.auth_throttle.failing_sources(time.monotonic())}",
        "latest_fork_usec:0",
    ]


def _cpu(s: Server) -> list[str]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [
        f"used_cpu_sys:{me.ru_stime:.2f}",
        f"used_cpu_user:{me.ru_utime:.2f}",
        f"used_cpu_sys_children:{kids.ru_stime:.2f}",
        f"used_cpu_user_children:{kids.ru_utime:.2f}",
    ]


def _commandstats(s: Server) -> list[str]:
    lines = []
    for spec in s.commands.values():
        if spec.calls:
            per_call = spec.usec / spec.calls
            lines.append(
                f"cmdstat_{spec.name}:calls={spec.calls},usec={spec.usec},"
                f"usec_per_call={per_call:.2f}")
    return lines


def _federation(s: Server) -> list[str]:
    """disq's own section, shown only when asked by name: Disque's layout is unchanged."""
    stats = s.node.stats
    return [f"jobs_imported:{stats.jobs_imported}", f"jobs_exported:{stats.jobs_exported}"]


def _dedup(s: Server) -> list[str]:
    """disq's own section (ADDJOB DEDUP), shown only when asked by name."""
    table = s.node.dedup
    replication = s.replication
    conflicts = replication.dedup.conflicts if replication is not None else 0
    return [f"dedup_keys:{len(table)}", f"dedup_hits:{table.hits}",
            f"dedup_conflicts:{conflicts}"]


def _clock(s: Server) -> list[str]:
    """disq's own section (clock offsets), shown only when asked by name: each peer's
    clock minus this node's (ms, +/- uncertainty_ms) and the round trip it was
    measured over."""
    lines = [f"clock_skew_warn_ms:{s.config.clock_skew_warn_ms}"]
    peers = s.bus.peer_clocks() if s.bus is not None else []
    known = [estimate[0] for _, estimate in peers if estimate is not None]
    lines.append(f"clock_peers_measured:{len(known)}")
    lines.append(f"clock_max_abs_offset_ms:{max(map(abs, known), default=0)}")
    for i, (node, estimate) in enumerate(peers):
        line = f"peer{i}:id={node.id},ip={node.ip},port={node.port}"
        if estimate is not None:
            offset, uncertainty, rtt = estimate
            line += f",offset_ms={offset},uncertainty_ms={uncertainty},rtt_us={rtt}"
        lines.append(line)
    return lines


def _failures(s: Server) -> list[str]:
    """disq's own section (dead letters, back-off, rate limits), shown only
    when asked by name: the totals, then one line per queue whose jobs became dead
    letters here (by the queue they came from)."""
    node = s.node
    failures = node.failures
    lines = [f"dead_lettered_jobs:{sum(failures.dead_lettered.values())}",
             f"dead_letters_requeued:{failures.revived}",
             f"backoff_requeues:{failures.backoff_requeues}",
             f"rate_limited_getjobs:{failures.rate_limited}",
             f"queue_policies:{len(node.policies)}"]
    for i, (queue, count) in enumerate(sorted(failures.dead_lettered.items())):
        name = queue.decode("utf-8", "replace")
        lines.append(f"qdl{i}:queue={name},dead_lettered={count}")
    return lines


def _users(s: Server) -> list[str]:
    """disq's own section (usage accounting), shown only when asked by
    name: per user, the commands it ran and the jobs it added, consumed and acked."""
    return [f"user_{u.name}:commands={u.calls},jobs_added={u.jobs_added},"
            f"jobs_consumed={u.jobs_consumed},jobs_acked={u.jobs_acked},"
            f"bytes_in={u.bytes_in},bytes_out={u.bytes_out}"
            for u in s.acl.live()]


def _retention(s: Server) -> list[str]:
    """disq's own section (QPOLICY ... RETAIN), shown only when asked by name: the
    acked jobs this node keeps on disk, in all and per queue (bytes, jobs, the oldest
    segment's first ack time, Unix ms; 0: none)."""
    store = s.retention
    size, count, oldest = store.totals()
    lines = [f"retained_bytes:{size}", f"retained_jobs:{count}",
             f"retained_oldest_ms:{oldest}", f"retained_queues:{len(store.queues)}",
             f"retained_records_appended:{store.appended}",
             f"retained_segments_expired:{store.expired_segments}",
             f"retained_write_errors:{store.write_errors}",
             f"retained_damaged_segments:{len(store.damaged)}",
             f"retained_indexing:{int(not store.loaded)}"]
    for i, queue in enumerate(sorted(store.queues)):
        info = store.queue_info(queue)
        if info is not None:
            name = queue.decode("utf-8", "replace")
            lines.append(f"rq{i}:queue={name},bytes={info[0]},jobs={info[1]},"
                         f"oldest_ms={info[2]}")
    return lines


_SECTIONS = {
    "server": ("Server", _server),
    "clients": ("Clients", _clients),
    "memory": ("Memory", _memory),
    "jobs": ("Jobs", _jobs),
    "queues": ("Queues", _queues),
    "persistence": ("Persistence", _persistence),
    "stats": ("Stats", _stats),
    "cpu": ("CPU", _cpu),
    "commandstats": ("Commandstats", _commandstats),
    "federation": ("Federation", _federation),
    "dedup": ("Dedup", _dedup),
    "clock": ("Clock", _clock),
    "failures": ("Failures", _failures),
    "users": ("Users", _users),
    "results": ("Results", _results),
    "batches": ("Batches", _batches),
    "retention": ("Retention", _retention),
}


def render(server: Server, section: str | None) -> str:
    if section is None or section in ("default",):
        wanted: tuple[str, ...] = DEFAULT_SECTIONS
    elif section in ("all", "everything"):
        wanted = ALL_SECTIONS
    else:
        wanted = (section,) if section in _SECTIONS else ()
    blocks = []
    for name in wanted:
        title, build = _SECTIONS[name]
        blocks.append(f"# {title}\r\n" + "".join(line + "\r\n" for line in build(server)))
    return "\r\n".join(blocks)
