"""The accelerated clock: the simulator's rates and the load driver's clock scale together; bad host vars are
refused before any host is touched."""

import random

import pytest

from agent.errors import UserError
from agent.hostside import loadgen
from agent.planning import matrix
from agent.sim import options
from agent.sim.plan import make_plan
from agent.sim.ratemodel import RateModel

pytestmark = pytest.mark.unit


def test_scaled_clock_runs_k_times_faster():
    assert loadgen.scaled_clock(1.0) is loadgen.time.monotonic
    fast = loadgen.scaled_clock(20.0)
    a, b = fast(), loadgen.time.monotonic() * 20.0
    assert abs(a - b) < 1.0
    with pytest.raises(ValueError):
        loadgen.scaled_clock(0.0)


def test_the_simulator_streams_k_times_faster():
    opts = options.parse(["nv", "--moe-backend", "marlin"], {})
    plan = make_plan(opts, {"CUTE_DSL_ARCH": "sm_121a"})
    slow, fast = RateModel(plan, False, random.Random(1)), RateModel(plan, False, random.Random(1), time_scale=10)
    assert fast.step_s(4) == pytest.approx(slow.step_s(4) / 10)
    assert fast.ttft_s(1024) == pytest.approx(slow.ttft_s(1024) / 10)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1e9", "nan"])
def test_a_bad_time_scale_is_one_line_naming_the_host(value):
    with pytest.raises(UserError, match="host spark-a: spark_sim_time_scale must be a number"):
        matrix.simulator_clock("spark-a", {"spark_sim_time_scale": value})


def test_host_vars_reach_the_simulator_and_the_driver():
    env = matrix.simulator_clock("spark-a", {"spark_sim_time_scale": 20, "spark_sim_startup": "calibrated"})
    assert env == {"SPARK_SIM_TIME_SCALE": "20.0", "SPARK_SIM_STARTUP": "calibrated"}
    with pytest.raises(UserError, match="spark_sim_startup must be fixed or calibrated"):
        matrix.simulator_clock("spark-a", {"spark_sim_startup": "fast"})
