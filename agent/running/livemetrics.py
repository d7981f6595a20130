"""A sweep's live view, the ecosystem's way: the controller serves OpenMetrics (prometheus-client) while it follows
the hosts' runners (an attached sweep, `collect --wait`), for Prometheus to scrape and Grafana to draw
(docs/live-metrics.md, grafana/spark-agent.json).

Per host: cells planned, done, measured, failed, invalid, WRONG OUTPUT, lost; the running cell's latest window
(output tok/s, median TTFT and TPOT, its concurrency); the ETA. It binds loopback or one of this machine's own
addresses (never 0.0.0.0), and asks for a bearer token whenever the address is not loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

import psutil

from agent.errors import UserError, missing_extra
from agent.judging.summary import WRONG_OUTPUT, cell_verdict
from agent.planning.matrix import Cell
from agent.results import tree as results
from agent.running import detach
from agent.running.progress import _cell_seconds

TOKEN_ENV = "SPARK_AGENT_METRICS_TOKEN"  # or --metrics-token-file; never on a command line
LINGER_S = 20.0  # after the sweep, how long the endpoint waits for a scrape of its end state (scrape_interval <= 15s)
BUCKETS = ("measured", "wrong_output", "invalid", "failed", "lost")
_BUCKET = {"valid": "measured", WRONG_OUTPUT: "wrong_output", "invalid": "invalid", "failed": "failed"}


def parse_address(text: str) -> tuple[str, int]:
    """ADDRESS:PORT ([v6]:PORT): loopback or an address of this machine's interfaces; UserError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise UserError(f"--metrics {text[:60]!r}: give ADDRESS:PORT, e.g. 127.0.0.1:9464") from None
    if not sep or not 0 < number < 65536:
        raise UserError(f"--metrics {text[:60]!r}: the port must be 1-65535")
    if address.is_unspecified:
        raise UserError(f"--metrics {text[:60]!r}: not every interface; give loopback or this machine's link address")
    if not address.is_loopback and str(address) not in _own_addresses():
        raise UserError(f"--metrics {text[:60]!r}: {address} is not an address of this machine; give loopback or one")
    return str(address), number


def _own_addresses() -> set[str]:
    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}


def read_token(path: str | None) -> str:
    """The scrape token: --metrics-token-file (first line) or $SPARK_AGENT_METRICS_TOKEN; "" when neither."""
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").splitlines()[0].strip() if Path(path).stat().st_size else ""
        except (OSError, IndexError, UnicodeDecodeError) as exc:
            raise UserError(f"--metrics-token-file {path}: cannot read it ({exc})") from None
    return os.environ.get(TOKEN_ENV, "").strip()


class LiveMetrics:
    """The gauges, updated at each look at the runners (look()); serve() starts the endpoint."""

    def __init__(self, sweep: str) -> None:
        try:
            from prometheus_client import CollectorRegistry, Gauge
        except ImportError:
            raise missing_extra("live", "--metrics") from None
        self.sweep = sweep
        self.registry = CollectorRegistry()
        host = ["sweep", "host"]

        def gauge(name: str, doc: str, labels: list[str] = host) -> Any:
            return Gauge(f"spark_agent_{name}", doc, labels, registry=self.registry)

        self.planned = gauge("cells_planned", "Cells handed to the host in this sweep.")
        self.done = gauge("cells_done", "Cells of the host that came back (any verdict).")
        self.by_verdict = gauge("cells", "Cells of the host by outcome.", [*host, "outcome"])
        self.tok_s = gauge("window_output_tokens_per_second", "Output tok/s of the running cell's latest window.")
        self.ttft = gauge("window_ttft_seconds", "Median TTFT of the running cell's latest window.")
        self.tpot = gauge("window_tpot_seconds", "Median TPOT of the running cell's latest window.")
        self.level = gauge("window_concurrency", "Concurrency of the running cell's latest window.")
        self.eta = gauge("eta_seconds", "Planned seconds of the host's cells still to run.")
        self.lost = gauge("host_lost", "1 when the host was declared lost.")
        self.sweep_eta = gauge("sweep_eta_seconds", "Planned seconds until the sweep's last host is done.", ["sweep"])
        self._verdicts: dict[tuple[str, str], str] = {}
        self.server: WSGIServer | None = None
        self.changed = threading.Event()  # set by look(), cleared by a scrape that saw it: stop() waits for one

    def look(self, state: detach.FleetState, got: detach.Collected, by_id: Mapping[str, Cell], root: Path) -> None:
        """One look's news: what each host's runner said, and the verdicts of the cells in the results tree."""
        etas = []
        for host, assigned in state.assignment.items():
            counts = dict.fromkeys(BUCKETS, 0)
            done = 0
            for cid in assigned:
                verdict = self._verdict(root, state.sweep, host, cid)
                if verdict:
                    done += 1
                    counts[_BUCKET.get(verdict, "failed")] += 1
            p = got.progress.get(host)
            if p is not None and p.answered:
                for cid, rec in p.done.items():
                    if (
                        cid in assigned
                        and rec.get("outcome") == "host_error"
                        and not self._verdict(root, state.sweep, host, cid)
                    ):
                        counts["lost"] += 1
            labels = (state.sweep, host)
            self.planned.labels(*labels).set(len(assigned))
            self.done.labels(*labels).set(done)
            for bucket, n in counts.items():
                self.by_verdict.labels(*labels, bucket).set(n)
            self.lost.labels(*labels).set(1 if host in state.lost else 0)
            window = p.window if p is not None and p.answered else {}
            running = p is not None and p.answered and bool(p.current)
            for g, key, scale in (
                (self.tok_s, "tok_s", 1.0),
                (self.ttft, "ttft_ms", 1e-3),
                (self.tpot, "tpot_ms", 1e-3),
            ):
                g.labels(*labels).set(float(window.get(key, 0.0)) * scale if running and window else 0.0)
            self.level.labels(*labels).set(float(window.get("concurrency", 0)) if running and window else 0.0)
            left = sum(
                _cell_seconds(by_id[c])
                for c in assigned
                if c in by_id and not self._verdict(root, state.sweep, host, c)
            )
            left = 0.0 if host in state.lost else left
            self.eta.labels(*labels).set(left)
            etas.append(left)
        self.sweep_eta.labels(state.sweep).set(max(etas, default=0.0))
        self.changed.set()

    def _verdict(self, root: Path, sweep: str, host: str, cid: str) -> str:
        """The stored cell's verdict (valid | invalid | failed | wrong output), read once; "" while not stored."""
        key = (host, cid)
        if key not in self._verdicts:
            path = results.cell_dir(root, sweep, host, cid) / results.CELL_FILE
            if not path.is_file():
                return ""
            try:
                self._verdicts[key] = cell_verdict(dict(results.read_toml(path)))
            except (OSError, ValueError):
                self._verdicts[key] = "failed"
        return self._verdicts[key]

    def serve(self, address: str, port: int, token: str) -> str:
        """Serve /metrics on address:port in a daemon thread; off loopback only with a token. Returns the URL."""
        from wsgiref.simple_server import make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

        if not ipaddress.ip_address(address).is_loopback and not token:
            raise UserError(
                f"--metrics {address}:{port} is not loopback: a scrape token is required "
                f"(--metrics-token-file FILE or ${TOKEN_ENV})"
            )
        app = _guarded(make_wsgi_app(self.registry), token, self.changed.clear)
        try:
            self.server = make_server(address, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
        except OSError as exc:
            raise UserError(f"--metrics {address}:{port}: cannot listen there ({exc.strerror or exc})") from None
        threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True).start()
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{self.server.server_port}/metrics"

    def stop(self, linger_s: float = LINGER_S) -> None:
        """Stop serving once a scrape has seen the last look (the sweep's end state reaches Prometheus), at most
        `linger_s` later."""
        if self.server is not None:
            deadline = time.monotonic() + linger_s
            while self.changed.is_set() and time.monotonic() < deadline:
                time.sleep(0.2)
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def _guarded(
    app: Callable[..., Iterable[bytes]], token: str, scraped: Callable[[], None]
) -> Callable[..., Iterable[bytes]]:
    """The metrics app behind `Authorization: Bearer TOKEN` (compared in constant time); no token: open."""
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if token and not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
            return [b"a bearer token is required\n"]
        scraped()
        return app(environ, start_response)

    return guarded


def add_options(p: Any) -> None:
    """--metrics and --metrics-token-file, for the commands that follow runners (sweep, collect --wait)."""
    p.add_argument(
        "--metrics",
        metavar="ADDRESS:PORT",
        help="serve the sweep's live OpenMetrics there (loopback, or this machine's link address with a token); "
        "needs the [live] extra",
    )
    p.add_argument(
        "--metrics-token-file",
        metavar="FILE",
        help=f"the bearer token Prometheus must send (first line; or ${TOKEN_ENV}); required off loopback",
    )


def from_args(args: Any, sweep: str) -> LiveMetrics | None:
    """The live view the flags ask for, listening already (a taken port is exit 2 before any host is touched)."""
    if not getattr(args, "metrics", None):
        if getattr(args, "metrics_token_file", None):
            raise UserError("--metrics-token-file needs --metrics ADDRESS:PORT")
        return None
    address, port = parse_address(args.metrics)
    live = LiveMetrics(sweep)
    url = live.serve(address, port, read_token(args.metrics_token_file))
    print(f"live metrics: {url}", file=sys.stderr)
    return live
