"""The fleet's plan as a blocked design: which host of a fingerprint group measures which cell.

Hosts of one group are blocks: equal machines, up to a small measured host effect (judging/hosteffect.py). The plan
keeps each comparison set on one host where it can, so most comparisons never cross hosts, and spreads whole sets over
the hosts so that they finish together. A set is the cells that share the values of the axes kept together: spread
on the checkpoint, each host measures one checkpoint's backends (and its other axes) on its own, and only the checkpoint
question crosses hosts. Every host but one then also measures a reference cell: the group's reference configuration
at one concurrency level (the highest: the most tokens, the least relative noise), so that each host's effect against
the others is measured in this sweep, and the ranking divides it out (stats.rank_hosts).

Among the ways to split (no split, each subset of the axes other than the backend: the backend question is never
split), the planner takes the one with the least estimated wall time (windows, loading the weights and a server
start per cell), reference cells included, preferring the coarser split unless a finer one uses more hosts and saves
more than TIE (fewer comparisons cross hosts). Pure: plans from the cells and the hosts, nothing else, so a re-run
with the same hosts plans the same.

Hosts that a split plan leaves idle (fewer comparison sets than hosts) measure whole blocks again instead: a replicate
host runs every cell of one block, with the same cell ids in its own host folder (as `--replicas` does), so it
compares that block's configs side by side on one machine too (independent server starts of every config), and it
shares every point of the block with the block's first host (its host effect is measured there: no reference cell).
Replicates come in whole rounds, one per block, longest block first, so that every comparison set is measured on as
many hosts as every other. They never lengthen the plan: a replicate host measures one block, and that block's first
host measures the same block (and perhaps a reference) while it does.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.judging.stats import axes_of, axis_value, value_label
from agent.planning.matrix import Cell, cell_id

TIE = 0.10  # a finer split must save more than 10% to be worth its extra hosts and comparisons across them
START_S = 60.0  # what a server start costs a cell, for planning: a warm vLLM start on a Spark (cold: minutes)
MAX_SUBSET_AXES = 6  # beyond this many varying axes only the whole set and each axis alone are tried
# MoE backends that run on every CUDA architecture (generic kernels, not arch-specific ones): the reference cell is
# taken from these first, because a reference that fails to start measures nothing.
PORTABLE_BACKENDS = ("marlin", "triton", "")


@dataclass(frozen=True)
class Plan:
    """One group's plan."""

    hosts: tuple[str, ...]
    assignment: dict[str, list[str]]  # host -> cell ids still to measure, reference first
    spread: tuple[str, ...]  # the axes whose values go to different hosts; () = one host
    base: str  # the reference configuration's full cell id ("" = every cell on one host: no reference needed)
    references: dict[str, str]  # host -> the reference cell it measures (the base itself on the base's host)
    wall_s: float  # the busiest host's estimated seconds
    one_host_s: float  # every cell on one host
    calibration_age: float | None = None  # days: the host effects come from `spark-agent calibrate`, this old
    # hosts idle otherwise: host -> (the block's first host, the block's full cell ids, in order): it measures them too
    replicates: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    idle: tuple[str, ...] = ()  # hosts the plan leaves without work (too few for one replicate of every block)

    def words(self, cells: Mapping[str, Cell]) -> list[str]:
        """The plan in lines a person reads before the sweep starts."""
        used = [h for h in self.hosts if self.assignment.get(h) and h not in self.replicates]
        if len(self.hosts) == 1:
            return []
        if not used:  # a resume: every planned cell is measured already (or its host calibrated)
            return ["plan: nothing left to measure: every planned cell is in the results tree"]
        if not self.spread:
            return [f"plan: every cell on {used[0]}: no split saves time here"]
        lines = [
            f"plan: {', '.join(self.spread)} spread over {len(used)} hosts, the other axes compared on one host; "
            f"about {self.wall_s / max(self.one_host_s, 1e-9):.2f}x the time of one host"
        ]
        if self.calibration_age is not None:
            lines.append(
                f"plan: host effects from `spark-agent calibrate` ({self.calibration_age:.1f} days old, same image): "
                "no reference cell"
            )
        if self.base:
            ref = cells[self.base]
            others = [h for h, cid in sorted(self.references.items()) if cid != self.base or h != self.home]
            lines.append(
                f"plan: reference {ref.label} at c={max(ref.config.concurrency)} on {', '.join(others)} "
                f"(and in full on {self.home}): each host's effect is measured and divided out of every comparison "
                "that crosses hosts"
            )
        return lines + self._replicate_words(cells)

    def _replicate_words(self, cells: Mapping[str, Cell]) -> list[str]:
        """What the hosts a split would leave idle measure instead, and any left idle all the same."""
        lines = []
        if self.replicates:
            parts = []
            copies: dict[str, int] = {}
            for host, (first, ids) in self.replicates.items():
                copies[first] = copies.get(first, 1) + 1  # the first host's is copy 1
                config = cells[ids[0]].config.to_dict()
                values = [(a, value_label(config, a)) for a in self.spread]
                name = values[0][1] if len(values) == 1 else " ".join(f"{a}={v}" for a, v in values)
                starts = max(cells[cid].config.server_start for cid in ids)
                again = f"a {_ordinal(copies[first])} start" if starts == 1 else f"{starts} more starts"
                parts.append(f"{host}: {again} of block {name} ({len(ids)} cells, as on {first})")
            lines.append(
                f"plan: {', '.join(self.replicates)}: idle otherwise: {'; '.join(parts)}; each compares its block's "
                "configs side by side on its own host (independent replicates, its host effect measured on the "
                f"block's shared points); the wall stays about {self.wall_s / max(self.one_host_s, 1e-9):.2f}x "
                "the time of one host"
            )
        if self.idle:
            lines.append(
                f"plan: {', '.join(self.idle)}: idle: too few for one more start of every block (a replicate of "
                "some blocks only would measure some comparison sets on more hosts than others)"
            )
        return lines

    @property
    def home(self) -> str:
        """The host that measures the reference configuration in full (never a replicate host: it measures none)."""
        return next(
            (h for h, ids in self.assignment.items() if self.base in ids and h not in self.replicates), ""
        ) or next((h for h, cid in self.references.items() if cid == self.base), "")


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third", 4: "fourth", 5: "fifth"}.get(n, f"{n}th")


def reference_cell(cells: Sequence[Cell], minimum: int = 2) -> Cell | None:
    """The group's reference: a cell likely to start anywhere (a portable MoE backend, no speculative decoding, the
    default env), at its highest concurrency alone. None when there is nothing to compare (fewer than `minimum`
    cells)."""
    full = [c for c in cells if not c.reference_of]
    if not full or len(full) < minimum:
        return None

    def rank(c: Cell) -> tuple[int, int, int]:
        moe = c.config.moe_backend
        portable = PORTABLE_BACKENDS.index(moe) if moe in PORTABLE_BACKENDS else len(PORTABLE_BACKENDS)
        return portable, bool(c.config.server.speculative), bool(c.config.env_variant)

    base = min(full, key=rank)  # min keeps the first of equals: the plan's order
    level = max(base.config.concurrency)
    if list(base.config.concurrency) == [level]:
        return base  # one level already: the reference is the cell itself, measured again
    config = dataclasses.replace(base.config, concurrency=[level])
    return dataclasses.replace(
        base, id=cell_id(config, base.env), config=config, reference_of=base.id, notes=list(base.notes)
    )


def with_reference(cells: list[Cell]) -> list[Cell]:
    """A host's planned cells and its group's reference cell (planned on every host; handed out where needed)."""
    ref = reference_cell(cells)
    return cells + [ref] if ref is not None and ref.id not in {c.id for c in cells} else cells


def plan_group(
    hosts: Sequence[str],
    cells: Sequence[Cell],
    done: Mapping[str, set[str]],
    estimate: Mapping[str, float],
    calibrated: Mapping[str, float] | None = None,
    replicate: bool = True,
) -> Plan:
    """The plan of one group: `cells` its planned cells (the same on every host, reference included), `done` cell id
    -> hosts that finished it (resume), `estimate` cell id -> seconds, `calibrated` host -> age in days of its
    recent calibration (running/calibration.py): when it covers every host, no reference cell is needed.
    `replicate`: hosts a split leaves idle measure whole blocks again (False: they stay idle, as before)."""
    full = [c for c in cells if not c.reference_of]
    ref = next((c for c in cells if c.reference_of), None) or reference_cell(full)
    estimate = {cid: s + START_S for cid, s in estimate.items()}  # every cell, a reference too, starts a server
    calibrated = calibrated or {}
    if ref is not None and all(h in calibrated for h in hosts):
        ref = None  # every host's effect is known from its calibration: nothing to measure again
    one_host = sum(estimate[c.id] for c in full)
    best: tuple[float, list[list[Cell]], tuple[str, ...], dict[str, list[Cell]]] | None = None
    for spread, blocks in _splits(full):
        load = _place(blocks, hosts, estimate)
        wall = _wall(load, ref, full, estimate)
        busy = sum(bool(cs) for cs in load.values())
        # a finer split only where the coarser one leaves hosts idle: an axis it adds crosses hosts (noisier)
        if best is None or (busy > sum(bool(cs) for cs in best[3].values()) and wall < best[0] * (1 - TIE)):
            best = (wall, blocks, spread, load)
    assert best is not None
    wall, _, spread, load = best
    used = [h for h in hosts if load[h]]
    spare = [h for h in hosts if not load[h]] if len(used) > 1 else []
    # _place fills every host before any gets a second block: with a host to spare, each used host has one block,
    # and the used hosts come in placement order (longest block first)
    rounds = len(spare) // len(used) if replicate and spare else 0
    replicates = {h: used[i % len(used)] for i, h in enumerate(spare[: rounds * len(used)])}
    idle = tuple(h for h in spare if h not in replicates)
    base = ""
    references: dict[str, str] = {}
    home = ""
    if len(used) > 1 and ref is not None:
        base = ref.reference_of or ref.id
        home = next((h for h in used if any(c.id == base for c in load[h])), used[0])
        references = {h: (base if h == home else ref.id) for h in used}
    # start k of every cell before any start k+1 (A1 B1 A2 B2); within a start, the base first, longest first
    order = {
        h: [c.id for c in sorted(load[h], key=lambda c: (c.config.server_start, c.id != base, -estimate[c.id]))]
        for h in used
    }
    order.update({h: list(order[first]) for h, first in replicates.items()})  # a replicate: its first host's order
    copies: dict[str, list[str]] = {}  # cell id -> the hosts that measure it, its first host first
    for h in hosts:
        for cid in order.get(h, []):
            copies.setdefault(cid, []).append(h)
    assignment: dict[str, list[str]] = {}
    for h in hosts:
        mine = references.get(h, "")
        ids = ([mine] if mine and h != home else []) + order.get(h, [])  # the reference first (a one-level base:
        assignment[h] = [  # the base measured again there)
            cid for cid in ids if h not in done.get(cid, set()) and (cid == mine or _owed(cid, h, copies, done))
        ]
    wall = max([wall] + [sum(estimate[cid] for cid in order[h]) for h in replicates])  # (never more: one block)
    age = max((calibrated[h] for h in used), default=0.0) if ref is None and len(used) > 1 and calibrated else None
    return Plan(
        tuple(hosts),
        assignment,
        spread if len(used) > 1 else (),
        base,
        references,
        wall,
        one_host,
        age,
        {h: (first, tuple(order[first])) for h, first in replicates.items()},
        idle,
    )


def _owed(cid: str, host: str, copies: Mapping[str, list[str]], done: Mapping[str, set[str]]) -> bool:
    """Whether `host` still measures a full cell the plan gives to `copies[cid]` (its first host and its replicates):
    the cell owes as many copies as the plan gives it less those finished on any host of the group (resume, a lost
    host's cells measured by another), and they go to the plan's hosts that have not finished it, in order. One
    copy (no replicate): a cell finished on another host is measured (once per group)."""
    finished = done.get(cid, set())
    planned = copies.get(cid, [host])
    owed = len(planned) - len(finished)
    return host in [h for h in planned if h not in finished][: max(owed, 0)]


def _splits(cells: Sequence[Cell]) -> list[tuple[tuple[str, ...], list[list[Cell]]]]:
    """Every way to cut the cells into blocks, coarsest first: one block; blocks by the values of each subset of
    the varying axes other than the backend. Never every cell alone: the backend question (the one a sweep exists
    for) is never split over hosts, since one host can always measure it whole."""
    configs = [c.config.to_dict() for c in cells]
    axes: list[str] = []
    for config in configs:
        axes += [a for a in axes_of(config) if a not in axes and a != "backend"]
    varying = [a for a in axes if len({axis_value(cfg, a) for cfg in configs}) > 1]
    if len(varying) <= MAX_SUBSET_AXES:
        subsets = [s for n in range(len(varying) + 1) for s in itertools.combinations(varying, n)]
    else:
        subsets = [(), *((a,) for a in varying), tuple(varying)]
    out = []
    for subset in subsets:
        blocks: dict[tuple[str, ...], list[Cell]] = {}
        for c, cfg in zip(cells, configs, strict=True):
            blocks.setdefault(tuple(axis_value(cfg, a) for a in subset), []).append(c)
        out.append((tuple(subset), list(blocks.values())))
    return out


def _place(blocks: list[list[Cell]], hosts: Sequence[str], estimate: Mapping[str, float]) -> dict[str, list[Cell]]:
    """Longest block first, to the least-loaded host (ties: the first host): equal hosts end together."""
    size = {id(b): sum(estimate[c.id] for c in b) for b in blocks}
    load: dict[str, list[Cell]] = {h: [] for h in hosts}
    total = dict.fromkeys(hosts, 0.0)
    for _i, block in sorted(enumerate(blocks), key=lambda ib: (-size[id(ib[1])], ib[0])):
        host = min(hosts, key=lambda h: (total[h], hosts.index(h)))
        load[host] += block
        total[host] += size[id(block)]
    return load


def _wall(
    load: Mapping[str, list[Cell]], ref: Cell | None, full: Sequence[Cell], estimate: Mapping[str, float]
) -> float:
    """The busiest host's seconds, with a reference cell on every host in use but the one that has the base."""
    used = [h for h in load if load[h]]
    base = (ref.reference_of or ref.id) if ref is not None else ""
    extra = estimate.get(ref.id, 0.0) if ref is not None and len(used) > 1 else 0.0
    return max(
        (sum(estimate[c.id] for c in load[h]) + (0.0 if any(c.id == base for c in load[h]) else extra) for h in used),
        default=0.0,
    )
