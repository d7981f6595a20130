"""A work queue per fingerprint group: free hosts take the next cell, longest first, each cell on K hosts.

Cells of one group have the same id on every host of it (the id hashes config + env, and env depends only on what
the fingerprint holds), so "cell X on spark-1" and "cell X on spark-2" are replicas of one measurement. The queue
hands a cell to at most `replicas` different hosts; a host that is lost gives its cell back and another host of
the group measures it. Thread-safe: every host worker of the sweep takes from its group's queue.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.planning.matrix import Cell


def estimated_seconds(cell: Cell) -> float:
    """How long a cell keeps a host busy: every level's warmup + repeats windows, plus loading the weights (a
    checkpoint folder's size when the host told us, read at ~2 GiB/s; a hub id counts as nothing)."""
    c = cell.config
    measure = len(c.concurrency) * (c.warmup + c.repeats) * c.duration_s
    load = float(cell.checkpoint_info.get("total_gib", 0.0) or 0.0) / 2.0
    return measure + load


def longest_first(cells: Iterable[Cell]) -> list[str]:
    """Cell ids, the longest first; equal estimates keep the plan's order (a stable sort)."""
    ordered = list(cells)
    index = {c.id: i for i, c in enumerate(ordered)}
    return [c.id for c in sorted(ordered, key=lambda c: (-estimated_seconds(c), index[c.id]))]


@dataclass
class _Entry:
    need: int  # replicas still to measure
    hosts: set[str] = field(default_factory=set)  # hosts that have it (done, or running it now)


class GroupQueue:
    """The cells of one group still to measure, in the order they are handed out."""

    def __init__(
        self, order: list[str], need: Mapping[str, int], have: Mapping[str, set[str]], hosts: Iterable[str] = ()
    ):
        self._lock = threading.Lock()
        self.hosts = tuple(hosts)  # the group's hosts
        self._order = list(order)
        self._entries = {cid: _Entry(need=max(0, need.get(cid, 0)), hosts=set(have.get(cid, set()))) for cid in order}
        self._gone: set[str] = set()  # hosts that stopped taking cells (lost, busy)
        self._running: set[tuple[str, str]] = set()  # (host, cell id) handed out and not yet finished

    def take(self, host: str) -> str | None:
        """The next cell this host has not measured and that still needs a replica; None when there is none."""
        with self._lock:
            if host in self._gone:
                return None
            for cid in self._order:
                entry = self._entries[cid]
                if entry.need > 0 and host not in entry.hosts:
                    entry.need -= 1
                    entry.hosts.add(host)
                    self._running.add((host, cid))
                    return cid
            return None

    def finish(self, host: str, cell_id: str) -> None:
        """The host is done with the cell (measured, failed or invalid: a result is stored either way)."""
        with self._lock:
            self._running.discard((host, cell_id))

    def may_get_more(self, host: str) -> bool:
        """Whether a cell this host could take may still come back (another host is on it and may be lost):
        a free host waits rather than leaves while that is so."""
        with self._lock:
            if host in self._gone:
                return False
            return any(h != host and host not in self._entries[cid].hosts for h, cid in self._running)

    def give_back(self, host: str, cell_id: str) -> None:
        """The host will not finish this cell (it was lost): it goes back to the front of the queue for the others.
        The host keeps its mark, so it never takes that cell again (a returning host's sealed copy is a replica)."""
        with self._lock:
            self._running.discard((host, cell_id))
            self._entries[cell_id].need += 1
            self._order.remove(cell_id)
            self._order.insert(0, cell_id)

    def retire(self, host: str) -> None:
        """The host takes no more cells."""
        with self._lock:
            self._gone.add(host)

    def unserved(self) -> dict[str, int]:
        """Cells with replicas still owed that no host can take any more: id -> how many."""
        with self._lock:
            return {cid: e.need for cid, e in self._entries.items() if e.need > 0}

    def can_still_run(self, cell_id: str) -> bool:
        """Whether some live host of the group could still take this cell."""
        with self._lock:
            entry = self._entries[cell_id]
            return any(h not in self._gone and h not in entry.hosts for h in self.hosts)
