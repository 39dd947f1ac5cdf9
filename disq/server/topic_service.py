"""Topics' operations every front end runs (`Server.topic_service`): TOPIC SUBSCRIBE,
UNSUBSCRIBE, LIST and PUBLISH, typed arguments in, typed results out
(commands/topics.py). The table is `node.topics` (disq/topics.py); telling the other
nodes is `replication.topics` (disq/replication/topics.py). A publish adds one job to
each subscribed queue through the job service's ADDJOB: each is a plain job of its
queue, replicated as ADDJOB replicates it, answered once it has its copies.

Permissions: subscribing needs the topic and the queue; listing shows the subscriptions
whose topic and queue the user may use; publishing needs the topic only (the queues
chose to receive it: their subscriber was allowed both)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from ..errors import DisqError
from ..node import now_ms
from ..outcomes import Answer, Answers
from ..topics import Filter
from .guard import check_queue, user_may_see
from .later import Later

if TYPE_CHECKING:
    from ..acl import User
    from ..node import Node
    from ..topic_requests import TopicPublish
    from .app import Server

A = TypeVar("A", bound=Answer)


class TopicService:
    """The topics of one node."""

    __slots__ = ("server", "node")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node

    def change(self, user: User, topic: bytes, queue: bytes, unsubscribe: bool,
               where: Filter = ()) -> Later[list[str]] | None:
        """SUBSCRIBE (`where`: its filter) / UNSUBSCRIBE: None if it changes nothing
        here, else answered once every reachable node holds the change."""
        check_queue(self.server.acl, user, queue)
        subscription = self.node.topics.change(topic, queue, unsubscribe, self.node.id,
                                               now_ms(), where)
        if subscription is None:
            return None
        replication = self.server.replication
        if replication is None:
            return Later.now([])
        return Later.of(lambda held: replication.topics.changed(subscription, held))

    def listed(self, user: User, topic: bytes | None
               ) -> list[tuple[bytes, list[bytes], list[bytes]]]:
        """LIST: each topic (or the one asked), its queues the user may see, and each
        one's filter (b"": none) in the same order."""
        table = self.node.topics
        topics = table.topics()
        names = [topic] if topic is not None else sorted(topics)
        out = []
        for name in names:
            if not user_may_see(user, name):
                continue
            queues = [q for q in topics.get(name, []) if user_may_see(user, q)]
            if queues:
                filters = []
                for queue in queues:
                    subscription = table.subscription(name, queue)
                    filters.append(subscription.filter_text() if subscription else b"")
                out.append((name, queues, filters))
        return out

    def publish(self, user: User, request: TopicPublish, answers: Answers[A]
                ) -> list[tuple[bytes, bytes | DisqError | A]]:
        """PUBLISH: each subscribed queue whose filter the publish's attributes match,
        and its job's ADDJOB outcome (its ID, its error, or its answer that comes
        later), in subscription order. -NOTOPIC if no queue subscribes to the topic."""
        jobs = self.server.jobs
        table = self.node.topics
        out: list[tuple[bytes, bytes | DisqError | A]] = []
        attrs = request.attrs
        subscribers = table.subscribers(request.topic)
        if not subscribers:  # a typo in a topic's name must not lose publishes unseen
            name = request.topic.decode(errors="replace")[:200]
            raise DisqError("NOTOPIC", f"no queue subscribes to topic '{name}' (that this "
                                       "node knows of): nothing was added")
        for queue in list(subscribers):
            subscription = table.subscription(request.topic, queue)
            if subscription is not None and not subscription.matches(attrs):
                continue  # its filter leaves this publish out
            try:
                out.append((queue, jobs.add(user, request.job(queue), answers)))
            except DisqError as exc:
                out.append((queue, exc.with_traceback(None)))
        return out
