"""A Jepsen-style run against a cluster of real disq-server processes.

Producers ADDJOB unique bodies (REPLICATE 3, RETRY 1, a 2 s timeout) to random nodes
and record every ID they are answered; consumers GETJOB from random nodes and, for
each job, ACKJOB it (30% of the time on another node than the one that delivered it),
NACK it (5%) or abandon it as a consumer that died would (10%: it is queued again after
RETRY), recording every body they acknowledge; meanwhile a nemesis driven by a seeded
`random.Random` injects faults:

- `kill`: kill -9 a random node and restart it later with the same directory (it keeps
  its ID and rejoins), at most `max_down` nodes down at once. With the AOF on
  (`appendonly yes`, fsync everysec) a restarted node loads its jobs back, so any node
  may be killed; with the AOF off a restarted node comes back empty, so the victims
  are drawn from `max_down` fixed nodes: a job's REPLICATE 3 copies then always keep
  one on a node that is never killed, which is Disque's guarantee (a job is lost only
  when every node holding it loses its memory before it is delivered);
- `partition`: cut every link between a random minority (1 or 2 nodes) and the rest,
  either resetting the connections (`drop`) or holding them open without moving a
  byte (`stuck`), then heal, over and over (tests/faults/netproxy.py);
- `mixed`: either of the above at each step.

With `--dedup` every ADDJOB carries its body as a DEDUP key (disq's extension) and a
producer whose ADDJOB failed sends the same body again, to another random node, until
it gets an ID (at most DEDUP_ATTEMPTS times): exactly-once production. The checker then
also counts the bodies that were answered, or delivered, with more than one job ID.
A key is known on every node holding its job, a restarted node neither vouches for
keys it may have lost nor lets copies pass it, and the copies left by a node killed
before it answered are where the retry's copies go (the key's order); what can still
make two jobs (README, DEDUP limits): both sides of a partition, nodes that disagree on
who takes copies, the only node holding such copies down as the retry runs. The run
fails if a body has two jobs (under partitions that may be the first limit, not a bug).

With `--batch N` producers send ADDJOBS of N bodies (DEDUP-JOBS with `--dedup`), as
the Spark writer and the Python client do: each body is checked as above, from its own
entry of the reply (an ID or an error), and with `--dedup` the bodies whose entries
were errors are sent again together, in one ADDJOBS to another random node.

At the end everything is healed and restarted, the producers stop, and the consumers
drain every node until no node holds a queued, active or waiting job. The checker
counts:

- lost: bodies whose ADDJOB was answered with an ID but never delivered to a consumer
  that acknowledged them (must be 0);
- duplicates: acknowledged deliveries beyond the first of a body (at-least-once:
  reported, not failed), as a % of the bodies delivered; NACKed and abandoned
  deliveries are expected to come again and are not counted;
- unexpected: bodies delivered that no producer ever sent (must be 0);
- with `--dedup`, two jobs: bodies answered or delivered with several job IDs (must
  be 0).

Run it longer than the test suite does with, from the repository root:

    python tests/faults/jepsen.py --nemesis kill --seed 1 --duration 300
    python tests/faults/jepsen.py --nemesis partition --seed 1 --duration 300

The same seed gives the same fault schedule (the timing of the traffic around it is
the machine's).
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from netproxy import DROP, STUCK, Network  # noqa: E402
from support import DisqProcess, free_port, myid, wait_for, wait_formed  # noqa: E402

QUEUE = "jepsen"
RETRY_S = 1
ADD_TIMEOUT_MS = 2000
DEDUP_ATTEMPTS = 5


@dataclass
class Config:
    nemesis: str = "kill"  # kill | partition | mixed (both) | none
    seed: int = 1
    duration: float = 20.0  # s of traffic under faults
    nodes: int = 5
    replicate: int = 3
    max_down: int = 2
    aof: bool = True
    any_victim: bool = False  # AOF off: kill any node, not just max_down fixed ones
    producers: int = 3
    consumers: int = 3
    node_timeout: int = 1000  # ms
    drain_timeout: float = 60.0
    nack: float = 0.05  # of the jobs delivered, NACKed
    abandon: float = 0.10  # left without an answer (a consumer that died)
    ack_elsewhere: float = 0.3  # of the acknowledgements, sent to another node
    dedup: bool = False  # ADDJOB ... DEDUP <body>, sent again until it gets an ID
    batch: int = 0  # > 0: ADDJOBS of this many bodies (DEDUP-JOBS with `dedup`)
    log: bool = False


@dataclass
class Result:
    config: Config
    attempted: int = 0
    added: int = 0  # ADDJOB answered with an ID
    uncertain: int = 0  # ADDJOB failed or timed out: the job may or may not exist
    delivered: int = 0  # distinct bodies delivered and acknowledged by a consumer
    completions: int = 0  # deliveries acknowledged by a consumer
    deliveries: int = 0  # GETJOB deliveries in all (NACKed and abandoned ones too)
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    two_jobs: list[str] = field(default_factory=list)  # --dedup: several IDs for a body
    retried: int = 0  # --dedup: jobs sent again with their key
    faults: collections.Counter = field(default_factory=collections.Counter)
    drained: bool = False
    leftover: dict[str, int] = field(default_factory=dict)  # node port -> jobs left
    gc_pending: int = -1  # jobs still registered once drained (acked, not yet collected)
    elapsed: float = 0.0

    @property
    def duplicates(self) -> int:
        return self.completions - self.delivered

    @property
    def duplicate_pct(self) -> float:
        return 100.0 * self.duplicates / self.delivered if self.delivered else 0.0

    def summary(self) -> str:
        c = self.config
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        victims = " any-victim" if c.any_victim and not c.aof else ""
        batch = f" batch={c.batch}" if c.batch else ""
        return (f"jepsen nemesis={c.nemesis} seed={c.seed} aof={'yes' if c.aof else 'no'}"
                f"{victims}{batch} "
                f"duration={c.duration:g}s: added={self.added} uncertain={self.uncertain} "
                f"delivered={self.delivered} (of {self.deliveries} deliveries) "
                f"lost={len(self.lost)} "
                f"duplicates={self.duplicates} ({self.duplicate_pct:.2f}%) "
                f"unexpected={len(self.unexpected)} "
                + (f"dedup: two-jobs={len(self.two_jobs)} retried={self.retried} "
                   if c.dedup else "")
                + f"drained={self.drained} "
                f"gc-pending={self.gc_pending} "
                f"faults: {faults} ({self.elapsed:.1f}s)")


def _client(node: DisqProcess, timeout: float = 3.0) -> redis.Redis:
    client = node.client(protocol=2, socket_timeout=timeout, socket_connect_timeout=1,
                         retry=Retry(NoBackoff(), 0))
    client.response_callbacks.clear()
    return client


class FaultCluster:
    """N nodes, each behind its proxy (see netproxy.py), killable and restartable."""

    def __init__(self, workdir: Path, config: Config) -> None:
        self.config = config
        self.net = Network()
        self.nodes: list[DisqProcess] = []
        self.ids: list[str] = []
        args = ["--cluster-node-timeout", str(config.node_timeout)]
        if config.aof:
            args += ["--appendonly", "yes"]
        try:
            for i in range(config.nodes):
                port = free_port()
                host = f"127.0.0.{2 + i}"
                self.net.add(port, host)
                self.nodes.append(DisqProcess(workdir / f"node{i}", *args, port=port,
                                              host=host).start())
            for node in self.nodes[1:]:  # by the proxies' address: links go through them
                assert _call(self.nodes[0], "CLUSTER", "MEET", "127.0.0.1", node.port) == b"OK"
            self.wait_formed(30)
            self.ids = [myid(node) for node in self.nodes]
            for node, node_id in zip(self.nodes, self.ids, strict=True):
                self.net.name(node.port, node_id)
            wait_for(self._configs_saved, 15, 0.05, "every nodes.conf to list the cluster")
        except BaseException:
            self.close()
            raise

    def wait_formed(self, timeout: float) -> None:
        """Every node reaches every other one; if not in time, what each one sees."""
        try:
            wait_formed(self.nodes, timeout)
        except AssertionError as exc:
            views = []
            for node in self.nodes:
                try:
                    views.append(_call(node, "CLUSTER", "NODES").decode())  # type: ignore[union-attr]
                except redis.exceptions.RedisError as err:
                    views.append(f"{err!r}\n")
            raise AssertionError(f"{exc}:\n" + "".join(
                f"-- {node.host}:{node.port}\n{view}"
                for node, view in zip(self.nodes, views, strict=True))) from None

    def _configs_saved(self) -> bool:
        """A node killed now must come back knowing its peers."""
        for node in self.nodes:
            path = node.dir / "nodes.conf"
            if not path.exists() or len(path.read_text().split("\n")) < len(self.nodes) + 1:
                return False
        return True

    def kill(self, i: int) -> None:
        self.nodes[i].kill()

    def restart(self, i: int) -> None:
        self.nodes[i].start()

    def close(self) -> None:
        for node in self.nodes:
            node.kill()
        self.net.close()


def _call(node: DisqProcess, *args: object) -> object:
    client = _client(node)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


class Workload:
    """Producers, consumers and what they saw."""

    def __init__(self, cluster: FaultCluster, config: Config) -> None:
        self.cluster = cluster
        self.config = config
        self.lock = threading.Lock()
        self.attempted: set[str] = set()
        self.added: dict[str, str] = {}  # body -> job ID
        # body -> every job ID it was answered or delivered with (--dedup: one)
        self.job_ids: collections.defaultdict[str, set[str]] = collections.defaultdict(set)
        self.retried = 0
        self.uncertain: set[str] = set()
        # body -> deliveries a consumer completed (acknowledged, whatever came of it)
        self.delivered: collections.Counter[str] = collections.Counter()
        self.deliveries = 0  # every job GETJOB handed out, NACKed and abandoned too
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads = [threading.Thread(target=self._produce, args=(n,), daemon=True)
                        for n in range(config.producers)]
        self.threads += [threading.Thread(target=self._consume, args=(n,), daemon=True)
                         for n in range(config.consumers)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop_producing.set()
        self.stop_consuming.set()
        for thread in self.threads:
            thread.join(15)

    def _produce(self, worker: int) -> None:
        rng = random.Random(self.config.seed * 1000 + worker)
        batch = self.config.batch
        seq = 0
        clients: dict[int, redis.Redis] = {}
        while not self.stop_producing.is_set():
            bodies = [f"p{worker}-{seq + n}" for n in range(max(batch, 1))]
            seq += len(bodies)
            with self.lock:
                self.attempted.update(bodies)
            replies = self._add(bodies, rng, clients)
            with self.lock:
                for body, reply in zip(bodies, replies, strict=True):
                    if reply is not None:
                        self.added[body] = reply
                        self.job_ids[body].add(reply)
                    else:
                        self.uncertain.add(body)
        for client in clients.values():
            client.close()

    def _add(self, bodies: list[str], rng: random.Random,
             clients: dict[int, redis.Redis]) -> list[str | None]:
        """Each body's job ID, or None (failed: its job may or may not exist). With
        `dedup` the bodies that failed are sent again, to another random node, as
        the Spark writer does, at most DEDUP_ATTEMPTS times."""
        config = self.config
        nodes = self.cluster.nodes
        ids: list[str | None] = [None] * len(bodies)
        left = list(range(len(bodies)))
        attempts = DEDUP_ATTEMPTS if config.dedup else 1
        for attempt in range(attempts):
            i = rng.randrange(len(nodes))
            try:
                client = clients.get(i) or clients.setdefault(i, _client(nodes[i]))
                replies = client.execute_command(*self._add_command([bodies[n] for n in left]))
                if not config.batch:
                    replies = [replies]
            except redis.exceptions.ResponseError:
                replies = [None] * len(left)  # NOREPL, LOADING...: copies may exist
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                replies = [None] * len(left)
                clients.pop(i).close()
                self.stop_producing.wait(0.05)  # the node is down: try another
            for n, reply in zip(left, replies, strict=True):
                if isinstance(reply, bytes):  # (an ADDJOBS entry may be an error)
                    ids[n] = reply.decode()
            left = [n for n in left if ids[n] is None]
            if not left or self.stop_producing.is_set():
                break
            if attempt + 1 < attempts:
                with self.lock:
                    self.retried += len(left)
        return ids

    def _add_command(self, bodies: list[str]) -> list[object]:
        config = self.config
        options = ["REPLICATE", config.replicate, "RETRY", RETRY_S]
        if not config.batch:
            dedup = ["DEDUP", bodies[0]] if config.dedup else []
            return ["ADDJOB", QUEUE, bodies[0], ADD_TIMEOUT_MS, *options, *dedup]
        if config.dedup:
            return ["ADDJOBS", QUEUE, ADD_TIMEOUT_MS, *options, "DEDUP-JOBS",
                    *(part for body in bodies for part in (body, body))]
        return ["ADDJOBS", QUEUE, ADD_TIMEOUT_MS, *options, "JOBS", *bodies]

    def _consume(self, worker: int) -> None:
        """GETJOB from a random node; each job is acknowledged (on that node, or on
        another one: the ack then travels as a dummy ack), or NACKed, or abandoned
        as by a consumer that died (queued again after RETRY)."""
        config = self.config
        rng = random.Random(config.seed * 1000 + 500 + worker)
        nodes = self.cluster.nodes
        clients: dict[int, redis.Redis] = {}
        while not self.stop_consuming.is_set():
            i = rng.randrange(len(nodes))
            try:
                client = clients.get(i) or clients.setdefault(i, _client(nodes[i]))
                reply = client.execute_command("GETJOB", "TIMEOUT", 100, "COUNT", 16,
                                               "FROM", QUEUE)
                if not reply:
                    continue
                acks, nacks = [], []
                with self.lock:
                    for _queue, job_id, body in reply:
                        self.deliveries += 1
                        draw = rng.random()
                        if draw < config.nack:
                            nacks.append(job_id)
                        elif draw < config.nack + config.abandon:
                            pass
                        else:
                            acks.append(job_id)
                            self.delivered[body.decode()] += 1
                        self.job_ids[body.decode()].add(job_id.decode())
                if nacks:
                    client.execute_command("NACK", *nacks)
                if acks:
                    if rng.random() < config.ack_elsewhere:
                        i = rng.randrange(len(nodes))
                        client = clients.get(i) or clients.setdefault(i, _client(nodes[i]))
                    client.execute_command("ACKJOB", *acks)
            except redis.exceptions.ResponseError:
                self.stop_consuming.wait(0.05)  # LOADING after a restart...
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                clients.pop(i).close()
                self.stop_consuming.wait(0.05)
        for client in clients.values():
            client.close()


class Nemesis(threading.Thread):
    """Faults on a seeded schedule; heals and restarts everything when stopped."""

    def __init__(self, cluster: FaultCluster, config: Config) -> None:
        super().__init__(daemon=True, name="nemesis")
        self.cluster = cluster
        self.config = config
        self.rng = random.Random(config.seed)
        self.stopping = threading.Event()
        self.faults: collections.Counter[str] = collections.Counter()
        self.down: list[int] = []
        self.error: BaseException | None = None
        n = config.nodes
        self.victims = (list(range(n)) if config.aof or config.any_victim
                        else self.rng.sample(range(n), config.max_down))

    def note(self, text: str) -> None:
        if self.config.log:
            print(f"{time.strftime('%H:%M:%S')} nemesis: {text}", flush=True)

    def run(self) -> None:
        steps = {"kill": [self._kill_step], "partition": [self._partition_step],
                 "mixed": [self._kill_step, self._partition_step]}.get(self.config.nemesis)
        try:
            if not steps:
                self.stopping.wait()
            while not self.stopping.wait(self.rng.uniform(0.5, 2.5)):
                self.rng.choice(steps)()
        except BaseException as exc:  # reported by the run, not lost in the thread
            self.error = exc

    def _kill_step(self) -> None:
        """kill -9 a node (at most max_down down), or restart one."""
        rng = self.rng
        up = [i for i in self.victims if i not in self.down]
        if up and len(self.down) < self.config.max_down and (
                not self.down or rng.random() < 0.5):
            victim = rng.choice(up)
            self.cluster.kill(victim)
            self.down.append(victim)
            self.faults["kill"] += 1
            self.note(f"kill -9 node{victim}")
        elif self.down:
            back = self.down.pop(rng.randrange(len(self.down)))
            self.cluster.restart(back)
            self.faults["restart"] += 1
            self.note(f"restart node{back}")

    def _partition_step(self) -> None:
        """Cut a minority of 1 or 2 nodes from the rest for 1-4 s, then heal."""
        rng = self.rng
        ids = self.cluster.ids
        minority = rng.sample(ids, rng.choice((1, 2)))
        majority = [i for i in ids if i not in minority]
        mode = rng.choice((DROP, STUCK))
        self.cluster.net.cut(minority, majority, mode)
        self.faults[f"partition-{mode}"] += 1
        self.note(f"cut {[ids.index(i) for i in minority]} from the rest ({mode})")
        self.stopping.wait(rng.uniform(1.0, 4.0))
        self.cluster.net.heal()
        self.note("heal")

    def heal(self) -> None:
        self.stopping.set()
        self.join(30)
        self.cluster.net.heal()
        for i in self.down:
            self.cluster.restart(i)
            self.faults["restart"] += 1
        self.down = []


def _leftover(node: DisqProcess) -> int | None:
    """Jobs still to deliver on `node` (queued, active or waiting for replication),
    None if it cannot tell yet (down, loading)."""
    try:
        cursor, count = b"0", 0
        while True:
            cursor, ids = _call(node, "JSCAN", cursor, "COUNT", 1000, "STATE", "queued",  # type: ignore[misc]
                                "STATE", "active", "STATE", "wait-repl")
            count += len(ids)
            if cursor == b"0":
                return count
    except redis.exceptions.RedisError:
        return None


def drain(cluster: FaultCluster, timeout: float) -> tuple[bool, dict[str, int]]:
    """Wait until no node holds a job to deliver, twice in a row more than a requeue
    period apart (a job active on a node is queued again by its RETRY timer)."""
    deadline = time.monotonic() + timeout
    empty_since: float | None = None
    left: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = [_leftover(node) for node in cluster.nodes]
        left = {str(node.port): c if c is not None else -1
                for node, c in zip(cluster.nodes, counts, strict=True)}
        if all(c == 0 for c in counts):
            if empty_since is None:
                empty_since = time.monotonic()
            elif time.monotonic() - empty_since > RETRY_S + 2:
                return True, {}
        else:
            empty_since = None
        time.sleep(0.25)
    return False, left


def gc_pending(cluster: FaultCluster, timeout: float) -> int:
    """Jobs the nodes still hold once drained: acknowledged jobs whose garbage
    collection (SETACK/GOTACK/DELJOB) has not finished, given `timeout` to finish."""
    deadline = time.monotonic() + timeout
    while True:
        held = 0
        for node in cluster.nodes:
            info = _call(node, "INFO", "jobs").decode()  # type: ignore[union-attr]
            held += int(info.split("registered_jobs:")[1].split()[0])
        if held == 0 or time.monotonic() > deadline:
            return held
        time.sleep(0.25)


def run(config: Config, workdir: Path) -> Result:
    """One run: start, load, faults, heal, drain, check. Every process is stopped."""
    started = time.monotonic()
    result = Result(config)
    cluster = FaultCluster(workdir, config)
    workload = Workload(cluster, config)
    nemesis = Nemesis(cluster, config)
    try:
        workload.start()
        nemesis.start()
        time.sleep(config.duration)  # the traffic runs meanwhile: nothing to wait for
        nemesis.heal()
        if nemesis.error is not None:
            raise nemesis.error
        workload.stop_producing.set()
        cluster.wait_formed(60)
        result.drained, result.leftover = drain(cluster, config.drain_timeout)
        workload.join()
        if result.drained:
            result.gc_pending = gc_pending(cluster, 10.0)
    finally:
        workload.stop_producing.set()
        workload.stop_consuming.set()
        nemesis.stopping.set()
        cluster.close()
    result.faults = nemesis.faults
    result.faults["link-resets"] = cluster.net.resets
    with workload.lock:
        result.attempted = len(workload.attempted)
        result.added = len(workload.added)
        result.uncertain = len(workload.uncertain)
        result.delivered = len(workload.delivered)
        result.completions = sum(workload.delivered.values())
        result.deliveries = workload.deliveries
        result.lost = sorted(b for b in workload.added if not workload.delivered[b])
        result.unexpected = sorted(b for b in workload.delivered if b not in workload.attempted)
        if config.dedup:
            result.two_jobs = sorted(b for b, ids in workload.job_ids.items() if len(ids) > 1)
            result.retried = workload.retried
    result.elapsed = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nemesis", choices=("kill", "partition", "mixed", "none"),
                        default="kill")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=60.0, help="s of traffic")
    parser.add_argument("--aof", choices=("yes", "no"), default="yes")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--max-down", type=int, default=2)
    parser.add_argument("--any-victim", action="store_true",
                        help="with --aof no, kill any node (jobs can then be lost: a "
                             "restarted node comes back empty)")
    parser.add_argument("--dedup", action="store_true",
                        help="ADDJOB ... DEDUP <body>, sent again until it gets an ID; "
                             "check that no body has two jobs")
    parser.add_argument("--batch", type=int, default=0,
                        help="ADDJOBS of this many bodies (DEDUP-JOBS with --dedup; "
                             "the bodies that failed are sent again together)")
    parser.add_argument("--quiet", action="store_true", help="no nemesis log")
    args = parser.parse_args(argv)
    config = Config(nemesis=args.nemesis, seed=args.seed, duration=args.duration,
                    aof=args.aof == "yes", nodes=args.nodes, max_down=args.max_down,
                    any_victim=args.any_victim, dedup=args.dedup, batch=args.batch,
                    log=not args.quiet, drain_timeout=max(60.0, args.duration / 2))
    with tempfile.TemporaryDirectory(prefix="disq-jepsen-") as tmp:
        result = run(config, Path(tmp))
    print(result.summary())
    if result.lost:
        print("lost:", " ".join(result.lost[:50]))
    if result.unexpected:
        print("unexpected:", " ".join(result.unexpected[:50]))
    if result.two_jobs:
        print("two jobs:", " ".join(result.two_jobs[:50]))
    if not result.drained:
        print("not drained, jobs left per node:", result.leftover)
    ok = not (result.lost or result.unexpected or result.two_jobs) and result.drained
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
