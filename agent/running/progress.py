"""Live progress of a sweep (rich): one bar per host showing its cell, concurrency and ETA.

An attached sweep feeds it from each look at the hosts' runners (cells done of the share, the cell running now and
since when); a node-set sweep (one playbook per cell) from ansible-runner events (a finished bench loop item = one
concurrency level done). Thread-safe: each host's worker thread reports into the same display.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from agent.escape import rich
from agent.hostside import loadpoints
from agent.planning.matrix import Cell, shape_vars
from agent.results.records import CellRecord
from agent.running import tasks

SPEED_PERIOD_S = 7 * 86_400.0


def _cell_seconds(cell: Cell) -> float:
    """Planned measuring time of a cell: every load point (rate x depth x concurrency) runs warmup + repeats
    windows."""
    c = cell.config
    points = loadpoints.cell_points(c.concurrency, shape_vars(c.load))
    return len(points) * (c.warmup + c.repeats) * c.duration_s


class Progress:
    """Progress display; with enabled=False it only counts (for --log-format json and non-terminals)."""

    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self.lock = threading.Lock()
        self.bars: dict[str, Any] = {}
        self.current: dict[str, Cell] = {}
        self.advanced: dict[str, float] = {}  # seconds of the current cell already shown
        self.display: RichProgress | None = None

    def start(self, todo: dict[str, list[Cell]]) -> None:
        if not self.enabled:
            return
        self.display = RichProgress(
            TextColumn("[bold]{task.fields[host]}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
            # the ETA from the rate over the whole run so far (server starts included), not the last 30 s: a bar
            # moves in bursts (a start moves it not at all, a level's windows at once)
            speed_estimate_period=SPEED_PERIOD_S,
        )
        self.display.start()
        for host, cells in todo.items():
            total = sum(_cell_seconds(c) for c in cells) or 1.0
            # fields and descriptions are rich markup: names are escaped (escape.rich), our own tags are not
            self.bars[host] = self.display.add_task(f"{len(cells)} cells to run", total=total, host=rich(host))

    def stop(self) -> None:
        if self.display:
            self.display.stop()
            self.display = None

    def _update(self, host: str, advance: float = 0.0, description: str | None = None) -> None:
        if not self.display or host not in self.bars:
            return
        with self.lock:
            self.display.update(self.bars[host], advance=advance, description=description)

    def cell_started(self, host: str, cell: Cell) -> None:
        self.current[host] = cell
        self._update(host, description=f"{rich(cell.label)} [dim]{cell.id}[/] starting server")

    def cell_finished(self, host: str, cell: Cell, record: CellRecord | None) -> None:
        self.cell_done(host, cell, record.verdict if record else "lost")

    def cell_done(self, host: str, cell: Cell, verdict: str) -> None:
        """Whatever the cell did not measure (a failed start skips its windows) is skipped on the bar too."""
        remaining = _cell_seconds(cell) - self.advanced.pop(host, 0.0)
        self._update(
            host, advance=max(remaining, 0.0), description=f"{rich(cell.label)} [dim]{cell.id}[/] {rich(verdict)}"
        )

    def runner_state(self, host: str, done: int, assigned: int, cell: Cell | None, since: str) -> None:
        """What the host's runner said at the last look (attached sweep): cells done of its share, and the one it
        is on since when (the host's clock, ISO UTC: host data, escaped). The bar moves with the running cell's
        time at each look, not only when it ends, so the ETA is the sweep's real one."""
        now = f"{rich(cell.label)} [dim]{cell.id}[/] since {rich(since[11:19])}" if cell else "between cells"
        step = self._running_step(host, cell, since) if cell else 0.0
        self._update(host, advance=step, description=f"{done}/{assigned} · {now}")

    def _running_step(self, host: str, cell: Cell, since: str, now: float | None = None) -> float:
        """How far the bar moves for the cell running since `since`: its time so far, bounded by its planned
        windows (cell_done adds the rest). A bad or skewed host clock only moves it less or at once."""
        try:
            started = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
        ran = min(max((now if now is not None else time.time()) - started, 0.0), 0.99 * _cell_seconds(cell))
        step = ran - self.advanced.get(host, 0.0)
        if step <= 0:
            return 0.0
        self.advanced[host] = ran
        return step

    def host_failed(self, host: str, message: str) -> None:
        self._update(host, description=f"[red]stopped: {rich(message[:80])}")

    def event_hook(self, host: str) -> Callable[[dict[str, Any]], None]:
        def hook(event: dict[str, Any]) -> None:
            data = event.get("event_data", {})
            kind, task = event.get("event"), data.get("task", "")
            cell = self.current.get(host)
            if cell is None:
                return
            if kind == "runner_on_ok" and task == tasks.SERVE.name:
                self._update(host, description=f"{rich(cell.label)} [dim]{cell.id}[/] c={cell.config.concurrency[0]}")
            elif kind == "runner_item_on_ok" and task == tasks.BENCH.name:
                level = data.get("res", {}).get("level")
                windows = cell.config.warmup + cell.config.repeats
                levels = cell.config.concurrency
                nxt = (
                    levels[levels.index(level) + 1]
                    if level in levels and levels.index(level) + 1 < len(levels)
                    else None
                )
                step = windows * cell.config.duration_s
                self.advanced[host] = self.advanced.get(host, 0.0) + step
                self._update(
                    host,
                    advance=step,
                    description=f"{rich(cell.label)} [dim]{cell.id}[/] " + (f"c={nxt}" if nxt else "collecting"),
                )

        return hook
