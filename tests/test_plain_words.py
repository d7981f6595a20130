"""Words a user reads must not undercut the numbers: ranges of gaps, legends, host effects inside the noise, the
command's host, lost cells measured elsewhere, lint's hints and --fix's summary, console log lines, the env tables
of equal hosts, init's per-host users and known_hosts, and examples named as the README names them."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
import structlog
import yaml

from agent import logs
from agent.errors import UserError
from agent.judging import hosteffect, stats, summary
from agent.planning.spec import load_spec, packaged_example
from agent.reporting import markdown
from agent.results import tree as results

from .test_host_effects import _cell

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "lo, hi, words",
    [
        (0.95, 1.16, "5% faster to 14% slower"),  # never "-5% slower"
        (1.09, 1.16, "8% to 14% slower"),
        (2.1, 3.0, "2.1× to 3.0× slower"),
        (1.2, 1.2, "17% slower"),
    ],
)
def test_a_gap_range_reads_as_words(lo, hi, words):
    assert markdown.gap_range_text(lo, hi) == words


def test_a_host_effect_inside_its_noise_names_no_direction():
    inside = hosteffect.HostEffect("spark-3", "spark-1", 1.004, 0.991, 1.017, 1)
    outside = hosteffect.HostEffect("spark-2", "spark-1", 0.982, 0.971, 0.993, 3)
    assert inside.words() == "spark-3 ran as fast as spark-1 within the noise: +0.4% ± 1.3% (1 shared point)"
    assert outside.words() == "spark-2 ran 1.8% ± 1.1% slower than spark-1 (3 shared points)"
    flipped = hosteffect.HostEffect("spark-3", "spark-1", 0.996, 0.983, 1.009, 2)  # the next estimate, other sign
    assert "faster" not in flipped.words() and "slower" not in flipped.words()


def test_legends_say_off_for_no_speculative_decoding():
    rng = random.Random(3)
    off, mtp = _cell("h1", "marlin", [1, 4], 1.0, rng), _cell("h1", "marlin", [1, 4], 1.0, rng)
    off["config"]["speculative"], mtp["config"]["speculative"] = "", '{"method": "mtp"}'
    mtp["cell_id"] = "x-marlin-mtp"
    labels = sorted(markdown._lines(summary.summarize_cells([off, mtp])))
    assert labels == ["marlin speculative=mtp", "marlin speculative=off"], labels


def test_the_command_comes_from_a_host_not_excluded():
    rng = random.Random(5)
    slow_ref = _cell("h3", "marlin", [16], 0.7, rng)  # 30% slow: excluded from ranking across hosts
    cells = [slow_ref, _cell("h2", "marlin", [16], 1.0, rng)]
    cells += [
        _cell("h1", "marlin", [1, 4, 16], 1.0, rng),
        _cell("h1", "b12x", [1, 4, 16], 0.5, rng),
    ]  # 2x: over the 25% margin
    cells += [_cell("h2", "slow", [1, 4, 16], 1.0, rng, ckpt="y"), _cell("h2", "marlin", [1, 4, 16], 1.0, rng, "y")]
    for i, c in enumerate(cells):
        c["cell_id"] = f"{c['cell_id']}-{i}"
    [rec] = stats.recommend(summary.summarize_cells(cells))
    assert rec.hosts is not None and rec.hosts.effects["h3"].outlier
    assert rec.winner_cells and all(s.cell["host"] != "h3" for s in rec.winner_cells)
    assert all(len(s.points) == 3 for s in rec.winner_cells)  # the cell in full, not a reference's one level


def test_a_lost_cell_measured_on_another_host_is_not_promised_again(tmp_path):
    sweep = tmp_path / "sw"
    for host, name in (("spark-a", results.LOST_FILE), ("spark-b", results.CELL_FILE)):
        (sweep / host / "abcdef012345").mkdir(parents=True)
        (sweep / host / "abcdef012345" / name).write_text("")
    (sweep / "spark-a" / "0123456789ab").mkdir()
    (sweep / "spark-a" / "0123456789ab" / results.LOST_FILE).write_text("")
    lost = [markdown._lost_text(sweep, p) for p in sorted(sweep.rglob(results.LOST_FILE))]
    assert lost == ["spark-a/0123456789ab", "spark-a/abcdef012345: measured on spark-b instead"]
    assert sum(markdown.MEASURED_ON in x for x in lost) == 1  # counted apart from the cells measured on resume


def test_console_log_lines_are_plain_and_plan_notes_are_said_once(capsys):
    logs.configure("console")
    log = structlog.get_logger("t")
    log.warning("budget_exhausted", budget_s=300.0, next_step_s=51)
    for _ in range(3):
        log.warning("plan_note", hosts="spark-a", note="a note said once")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "warning: budget_exhausted (budget_s=300.0 next_step_s=51)"
    assert sum("a note said once" in line for line in err) == 1
    assert not any("[warning" in line or line[:4].isdigit() for line in err)


def test_env_shows_one_table_for_equal_hosts():
    from agent.commands.env import _same_on_hosts
    from agent.hostside.contracts import Facts
    from agent.planning import envrules
    from agent.planning.matrix import plan_cells

    spec = load_spec(Path(__file__).resolve().parent.parent / "examples" / "quick.toml")
    facts = envrules.with_arch(Facts(gpu_name="NVIDIA GB10", compute_capability="12.1", arch="gb10", simulated=True))
    cells = [c for h in ("spark-1", "spark-2", "spark-3") for c in plan_cells(spec, h, facts, {})]
    grouped = _same_on_hosts(cells)
    assert len(grouped) == 2 and all(hosts == ["spark-1", "spark-2", "spark-3"] for hosts, _ in grouped)


def test_init_names_per_host_users_and_the_fleets_known_hosts(tmp_path):
    from agent.commands.init import inventory_text
    from agent.planning.inventory import load_inventory

    text = inventory_text(["ops@192.0.2.10", "192.0.2.11:2222"], "nvidia", "~/.ssh/k", "x.yml", "~/fleet/known_hosts")
    inv = tmp_path / "x.yml"
    inv.write_text(text)
    hosts = {h.name: h.vars for h in load_inventory(inv)}
    assert hosts["spark-1"]["ansible_user"] == "ops" and hosts["spark-2"]["ansible_user"] == "nvidia"
    assert hosts["spark-2"]["ansible_port"] == 2222
    group = yaml.safe_load(text)["all"]["children"]["sparks"]["vars"]
    assert group["ansible_ssh_common_args"] == "-o UserKnownHostsFile=~/fleet/known_hosts"
    with pytest.raises(UserError):
        inventory_text(["bad;user@192.0.2.1"], "nvidia", "k", "x.yml")
    with pytest.raises(UserError):
        inventory_text(["192.0.2.1"], "nvidia", "k", "x.yml", "a file with spaces")


def test_readme_examples_resolve_to_the_packaged_copy_outside_a_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    found = packaged_example(Path("examples/quick.toml"))
    assert found.is_file() and found.is_absolute() and "packaged example" in capsys.readouterr().err
    assert load_spec("examples/quick.toml").name == "quick"
    assert packaged_example(Path("examples/none.toml")) == Path("examples/none.toml")  # still the user's error
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "quick.toml").write_text("x")
    assert packaged_example(Path("examples/quick.toml")) == Path("examples/quick.toml")  # the user's own wins


def test_lint_hint_keeps_the_backend_the_launch_chose(tmp_path, capsys):
    from agent.commands import lint

    launch = tmp_path / "l.sh"
    launch.write_text("VLLM_USE_FLASHINFER_MOE_FP4=1 vllm serve m --moe-backend flashinfer_b12x\n")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    lint.register(sub)
    args = parser.parse_args(["lint", str(launch), "--vllm-version", "0.24.0", "--fix"])
    rc = args.func(args)
    out = capsys.readouterr().out
    assert "flashinfer_cutlass" not in out and "(--moe-backend flashinfer_b12x already chooses)" in out
    assert launch.read_text().startswith("VLLM_USE_FLASHINFER_MOE_FP4=1")  # --fix prints, never writes
    said = next(line for line in out.splitlines() if line.startswith("--- fixed text"))
    assert f"{launch} is unchanged" in said
    assert ("lints clean" in said) == ("still:" not in out), out  # clean only when nothing at all is left
    assert rc in (0, 1)


def test_check_shows_what_each_groups_hosts_last_ran():
    from agent.commands.check import last_seen
    from agent.running.hostmemory import Known

    known = {
        "spark-1": Known(
            image="nvcr.io/nvidia/vllm:25.11-py3", image_digest="sha256:" + "ab" * 32, vllm_version="0.24.0"
        ),
        "spark-2": Known(
            image="nvcr.io/nvidia/vllm:25.11-py3", image_digest="sha256:" + "ab" * 32, vllm_version="0.24.0"
        ),
    }
    lines = last_seen(["spark-1", "spark-2", "spark-3"], known)
    assert lines[0].startswith("last ran image nvcr.io/nvidia/vllm:25.11-py3 (sha256:abababababab")
    assert "vLLM 0.24.0 — spark-1, spark-2" in lines[0]
    assert lines[1] == "no sweep seen in this results folder — spark-3"


def test_a_slow_host_is_a_variable_of_its_own_that_adds_to_the_serve_env():
    from agent.planning import matrix

    assert matrix.simulator_clock("spark-c", {"spark_sim_speed": 0.95}) == {"SPARK_SIM_SPEED": "0.95"}
    for bad in ("0", "-1", "fast", "11"):
        with pytest.raises(UserError, match="host spark-c: spark_sim_speed must be a number in"):
            matrix.simulator_clock("spark-c", {"spark_sim_speed": bad})


def test_a_hosts_simulated_vllm_version_is_a_variable_of_its_own_and_the_specs_wins():
    import dataclasses

    from agent.hostside.contracts import Facts
    from agent.planning import envrules, matrix

    spec = load_spec(Path(__file__).resolve().parent.parent / "examples" / "quick.toml")
    facts = envrules.with_arch(Facts(gpu_name="NVIDIA GB10", compute_capability="12.1", arch="gb10", simulated=True))
    own = {"spark_sim_vllm_version": "0.21.0", "spark_serve_env": {"PYTHONPATH": "/opt/x"}}
    unset = matrix.plan_cells(dataclasses.replace(spec, vllm_version=""), "spark-c", facts, own)
    assert {c.host_env["SPARK_SIM_VLLM_VERSION"] for c in unset} == {"0.21.0"}
    stated = matrix.plan_cells(spec, "spark-c", facts, own)  # the spec's [image] vllm_version sets every host
    assert {c.host_env["SPARK_SIM_VLLM_VERSION"] for c in stated} == {spec.vllm_version}
    for bad in (0.2, "0.21; rm -rf", "latest"):
        with pytest.raises(UserError, match="spark_sim_vllm_version must be a version in quotes"):
            matrix.simulator_clock("spark-c", {"spark_sim_vllm_version": bad})
