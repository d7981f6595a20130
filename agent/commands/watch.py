"""spark-agent watch SPEC -i INV --track IMAGE:TAG [--track ...] [--budget 30m]

Each tracked tag is resolved to its digest on the first host of the fleet (as `pin` does), checked on the controller
and confirmed by the registry asked from here or by a second host; a disagreement is exit 2, nothing measured. A digest the store has
not measured for this spec is measured as `tune` measures the spec (within --budget), ingested, compared with the
last image measured for the spec, and said on one "what changed" page (Markdown and HTML, under
<results>/watch/<spec>/; `site` links it). No new digest: one line, nothing run.

Exit: 0 nothing regressed or newly failed (or nothing new); 1 a configuration regressed beyond the noise, a cell that
ran before fails now, or the measurement did not finish; 2 bad input (a tag that does not resolve, a registry that
refuses, a digest where a tag was expected), before any sweep; 75 not now: another watch is running, or a host
serves a model the agent did not start (never evicted): the next tick tries again; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agent.commands import flags
from agent.commands.sweep import _sigterm_as_interrupt
from agent.commands.tune import duration
from agent.errors import UserError
from agent.escape import plain
from agent.hostside import redact
from agent.judging import sequential as seq
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.planning.spec import Spec, load_spec, packaged_example
from agent.reporting import whatchanged
from agent.running import imageref, timer
from agent.running import watch as watching
from agent.running.progress import Progress
from agent.running.tune import check_budget, run_tune
from agent.store import db, ingest


def register(sub) -> None:
    p = sub.add_parser(
        "watch", help="measure every new digest of the tracked image tags; say what changed on one page",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("spec", help="sweep spec (TOML): what to measure on each new image")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="Ansible inventory (as for sweep)")
    p.add_argument("--track", action="append", default=[], metavar="IMAGE:TAG", help="a tag to follow (repeatable)")
    p.add_argument("--limit", help="only these hosts or groups (comma-separated), as ansible --limit")
    p.add_argument(
        "--results", type=flags.writable_folder, default="results", help="results folder (default: ./results)"
    )
    p.add_argument("--budget", type=duration, help="wall-time budget per new image, e.g. 2h (as tune's)")
    p.add_argument("--min-repeats", type=int, default=2, help="windows per point at first (as tune's; default 2)")
    p.add_argument("--max-repeats", type=int, help="windows per point at most (default: the spec's repeats)")
    p.add_argument("--store", default=None, metavar="URL", help="the results store (default: as `store`)")
    p.add_argument("--install-timer", type=duration, metavar="EVERY", help="schedule this watch, e.g. 6h, and exit")
    p.add_argument("--remove-timer", action="store_true",
                   help="remove this spec's scheduled watch (either kind) and exit")  # fmt: skip
    p.add_argument("--timer-kind", choices=["auto", "systemd", "cron"], default="auto",
                   help="--install-timer writes a systemd user timer or a crontab line (default: systemd where it runs)")  # fmt: skip
    p.set_defaults(func=run)


def run(args) -> int:
    if args.install_timer:  # before anything reads them: a newline in one would be a crontab job or a unit directive
        timer.check_argv([*_scheduled_argv(args), *(["--store", args.store] if args.store else [])], Path.cwd())
    spec = load_spec(args.spec)
    watching.check_spec(spec)
    if args.remove_timer:  # whichever kind was installed: the unit files, the crontab line, the store's file
        for line in timer.remove(spec.name):
            print(line)
        return 0
    if not args.track:
        raise UserError("watch: give at least one --track IMAGE:TAG to follow")
    watching.check_tracks(args.track)
    most = args.max_repeats if args.max_repeats is not None else max(spec.repeats, args.min_repeats)
    settings = seq.TuneSettings(min_repeats=args.min_repeats, max_repeats=most)
    bad = seq.problems(settings)
    if bad:
        raise UserError(bad[0])
    check_budget(spec, settings, args.budget)
    hosts = load_inventory(args.inventory, args.limit)
    url = watching.webhook_url(hosts[0].vars)
    if args.install_timer:
        kind = args.timer_kind if args.timer_kind != "auto" else ("systemd" if timer.has_systemd() else "cron")
        store = args.store or os.environ.get(db.ENV_URL, "")
        if store:
            db.resolve_url(store)  # remembers its password: nothing printed shows it
        for line in timer.install(spec.name, _scheduled_argv(args), Path.cwd(), args.install_timer, kind, store):
            print(redact.redact_text(line))
        return 0
    results = Path(args.results)
    store_url = db.resolve_url(args.store, results)
    if store_url == db.OFF:
        raise UserError(f"${db.ENV_URL}=off: watch needs the results store to know which images it measured")
    try:
        with watching.lock(results):
            return _watch(args, spec, hosts, results, db.open_store(store_url), settings, url)
    except watching.Busy as exc:
        print(f"spark-agent: watch {spec.name}: {plain(exc)}; waiting for the next tick (nothing stopped)",
              file=sys.stderr)  # fmt: skip
        return timer.BUSY_EXIT


def _watch(args, spec: Spec, hosts, results: Path, engine, settings: seq.TuneSettings, url: str) -> int:
    # every tag is resolved, checked and confirmed before anything is measured: a bad one is exit 2, nothing swept
    names = [h.name for h in hosts]
    tracked = [watching.Tracked(tag, imageref.resolve(tag, names[0], names[1:], args.inventory)) for tag in args.track]
    known = {digest for digest, _, _ in watching.measured_images(engine, spec)}
    new = list({t.digest: t for t in tracked if t.digest not in known}.values())
    if not new:
        seen = ", ".join(f"{t.tag} = {t.short}" for t in tracked)
        print(f"watch {spec.name}: no new digest ({seen}); nothing run")
        return 0
    result = watching.Result()
    pairs = []
    show = sys.stderr.isatty()
    for t in new:
        before = watching.measured_images(engine, spec)
        print(f"watch {spec.name}: {t.tag} is new ({t.short}); measuring it", file=sys.stderr)
        with _sigterm_as_interrupt():
            outcome = run_tune(
                watching.spec_for(spec, t), Path(args.inventory), hosts, results, settings, args.budget, False,
                Progress(enabled=show),
            )  # fmt: skip
        if outcome.interrupted:
            print("spark-agent: interrupted (the next watch resumes)", file=sys.stderr)
            return 130
        busy = watching.busy_hosts({h: o.error for rnd in outcome.rounds for h, o in rnd.hosts.items()})
        if busy:
            host_, why = next(iter(busy.items()))
            raise watching.Busy(f"{host_} is busy: {why}")
        if outcome.fatal or outcome.budget_left:  # an open point ("cannot rank") is an answer, not a failure
            result.incomplete.append(f"{t.tag}: {outcome.fatal or 'the budget ran out before the plan did'}")
        ingest.ingest_tree(engine, outcome.sweep_dir)
        after = watching.cells_of(engine, t.digest, [watching.sweep_name(spec, t)])
        last = before[-1] if before else None
        prior = watching.cells_of(engine, last[0], last[2]) if last else []
        pairs.append((t, whatchanged.build(prior, after, last[1] if last else "", t.pinned)))
        result.measured.append(t)
    result.changes = [w for _, w in pairs]
    result.page_md = watching.write_page(results, spec, pairs)
    result.page_html = result.page_md.with_suffix(".html")
    print(result.page_md)
    print(result.page_html)
    for w in result.changes:
        for item in w.headlines:
            print("  " + watching.unmarked(item.text))
    for why in result.incomplete:
        print(f"  not finished: {plain(why)}", file=sys.stderr)
    if url:
        failed = watching.post(url, watching.summary(spec, result))
        if failed:
            print(f"spark-agent: warning: the webhook did not take the summary ({plain(failed)})", file=sys.stderr)
    return 1 if result.regressed or result.incomplete else 0


def _scheduled_argv(args) -> list[str]:
    """The same watch, with absolute paths, as the timer runs it: never the store URL (timer.write_credentials)."""
    import shutil

    exe = shutil.which("spark-agent")
    argv = [exe] if exe else [sys.executable, "-m", "agent.cli"]
    spec = packaged_example(Path(args.spec))  # the file used (a packaged example too), not the path as typed
    argv += ["watch", str(spec.resolve()), "-i", str(Path(args.inventory).resolve())]
    for tag in args.track:
        argv += ["--track", tag]
    argv += ["--results", str(Path(args.results).resolve())]
    if args.limit:
        argv += ["--limit", args.limit]
    if args.budget:
        argv += ["--budget", f"{args.budget:.0f}s"]
    argv += ["--min-repeats", str(args.min_repeats)]
    if args.max_repeats is not None:
        argv += ["--max-repeats", str(args.max_repeats)]
    from agent.planning import vault

    if vault.password_file():
        argv += ["--vault-password-file", str(vault.password_file())]
    return argv
