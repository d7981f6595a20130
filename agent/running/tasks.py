"""The playbook tasks whose results the controller reads, in one place.

FleetRun.results and FleetRun.items are keyed by task name, so renaming a task in playbooks/ silently empties what
the controller sees. Every name the controller reads is here, with the playbook that runs it and the module it
calls; tests/test_playbook_contract.py parses playbooks/ and proves each one is there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskRef:
    playbook: str  # the playbook the controller runs (playbooks/<playbook>.yml); the task may sit in tasks/
    name: str  # the task's name: the key in FleetRun.results / FleetRun.items
    module: str  # the module the task calls, so a renamed module is caught too
    loop: bool = False  # results arrive per item (FleetRun.items), not in FleetRun.results
    tag: str = ""  # the controller runs only this tag of the playbook


FACTS = TaskRef("provision", "Gather host facts", "spark_facts", tag="facts")
# The seed runs in the background (async); this task waits for it and carries spark_image's result.
MIRROR = TaskRef("provision", "Seed the image mirror", "ansible.builtin.async_status")
IMAGE = TaskRef("provision", "Pull the image by digest", "spark_image")  # read by the tests (changed or not)
CHECKPOINTS = TaskRef("provision", "Inspect the checkpoints on the host", "spark_inspect", loop=True, tag="checkpoints")
SHARE = TaskRef("copy_checkpoint", "Serve the checkpoint", "spark_share")
COPY = TaskRef("copy_checkpoint", "Fetch the checkpoint", "spark_fetch")
SERVE = TaskRef("cell", "Serve", "spark_server")
BENCH = TaskRef("cell", "Bench", "spark_bench", loop=True)
FETCH = TaskRef("cell", "Fetch the run folder", "ansible.builtin.fetch")  # failed: a partial archive, never read
STATUS = TaskRef("status", "Server status", "spark_server")
RESOLVE = TaskRef("pin", "Resolve the tag", "spark_image")
INSPECT = TaskRef("inspect", "Inspect checkpoint", "spark_inspect")
CACHE = TaskRef("cache", "Cache folders", "spark_cache")
RUNNER_START = TaskRef("fleet", "Start the runner", "spark_runner")
RUNNER_STATUS = TaskRef("fleet_status", "Runner progress", "spark_runner")
FETCH_SEALED = TaskRef("fleet_status", "Fetch sealed cells", "ansible.builtin.fetch", loop=True)  # in the same look
RUNNER_STOP = TaskRef("fleet_stop", "Stop the runner", "spark_runner")
HUB = TaskRef("hub_checkpoint", "Download the checkpoint from the hub", "spark_hub")

ALL = (
    FACTS,
    MIRROR,
    IMAGE,
    CHECKPOINTS,
    SHARE,
    COPY,
    SERVE,
    BENCH,
    FETCH,
    STATUS,
    RESOLVE,
    INSPECT,
    RUNNER_START,
    RUNNER_STATUS,
    FETCH_SEALED,
    CACHE,
    RUNNER_STOP,
    HUB,
)
