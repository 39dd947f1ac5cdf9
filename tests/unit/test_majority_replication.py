"""The copies of a job one node adds for the cluster (a CRON tick, a batch's callback):
replication/targets.py `majority_replication`, which both use."""

from __future__ import annotations

import pytest

from disq.replication.targets import majority_replication


@pytest.mark.parametrize(("wanted", "size", "reached", "copies"), [
    (None, 1, 1, 1),  # a lone node: its own copy
    (None, 3, 3, 3),  # the default, 3
    (None, 7, 7, 4),  # 3 raised to a majority of 7
    (None, 7, 5, 4),
    (None, 5, 3, 3),  # a majority, every node reached
    (2, 5, 5, 3),  # a REPLICATE under a majority is raised
    (5, 7, 4, 4),  # and lowered to the nodes reached
    (1, 3, 3, 2),
    (None, 4, 2, 0),  # half the nodes: no majority, nothing added here
    (5, 5, 2, 0),
])
def test_raised_to_a_majority_and_lowered_to_the_nodes_reached(
        wanted: int | None, size: int, reached: int, copies: int) -> None:
    assert majority_replication(wanted, size, reached) == copies
