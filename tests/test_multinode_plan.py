"""Multi-node planning and attestation without starting anything: node sets from facts, bad input (one line,
exit 2), each node's env from rules/multinode.toml, host interface facts, the Ray status parser, the simulated
NCCL transport choice, and real public multi-node logs (tests/data/multinode/SOURCES.md) parsed for the cluster."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import logparse, netfacts, raynode
from agent.hostside.contracts import Facts
from agent.hostside.logparse import cluster as clusterlog
from agent.judging import cluster as cluster_verdict
from agent.planning import envrules, multinode, nodesets
from agent.planning.matrix import cell_id, plan_cells
from agent.planning.spec import load_spec
from agent.sim import cluster as simcluster

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "multinode"
SPEC = """
[sweep]
name = "mn"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[server]
max_model_len = 8192
max_num_seqs = 8
nodes = {nodes}
tensor_parallel_size = {tp}
{extra}
[matrix]
moe_backend = ["marlin"]
concurrency = [1]
[load]
prompt_len = 64
output_len = 32
"""


def spec_file(tmp_path: Path, nodes: int = 2, tp: int = 2, extra: str = "") -> Path:
    path = tmp_path / "mn.toml"
    path.write_text(SPEC.format(digest="ab" * 32, nodes=nodes, tp=tp, extra=extra))
    return path


def nic(name: str, cidr: str, rdma: list[str] | None = None, speed: int = 200_000, simulated: bool = False) -> dict:
    return {
        "name": name,
        "state": "up",
        "addresses": [cidr],
        "speed_mbps": speed,
        "rdma": rdma or [],
        "simulated": simulated,
    }


def host(*nics: dict, fingerprint: str = "aaaa0000") -> Facts:
    return Facts(
        gpu_name="NVIDIA GB10", gpu_count=1, arch="gb10", sm="sm_121a", fingerprint=fingerprint, interfaces=list(nics)
    )  # type: ignore[typeddict-item]


def sim(address: str) -> Facts:
    return host(dict(netfacts.simulated_interface(address)))


# ---- node sets ------------------------------------------------------------------------------------------------


def test_two_simulated_hosts_make_one_set_over_their_loopback_link():
    choice = nodesets.pick(["a", "b"], {"a": sim("127.0.9.11"), "b": sim("127.0.9.12")}, 2)
    (s,) = choice.sets
    assert s.head == "a" and s.hosts == ["a", "b"] and s.rdma and s.subnet == "127.0.9.0/24"
    assert [lk.address for lk in s.links] == ["127.0.9.11", "127.0.9.12"] and all(lk.simulated for lk in s.links)


def test_management_ports_are_not_a_cluster_link():
    facts = {h: host(nic("eno1", f"10.0.0.{i}/24", speed=1000)) for i, h in enumerate("ab", 1)}
    with pytest.raises(nodesets.NodeSetError, match="largest group of hosts sharing a fast subnet has 0"):
        nodesets.pick(["a", "b"], facts, 2)


def test_two_nics_on_the_cluster_subnet_are_refused_with_the_reason():
    facts = {
        "a": host(nic("enp1s0f0np0", "192.168.100.10/24", ["rocep1s0f0"]), nic("enp1s0f1np1", "192.168.100.11/24")),
        "b": host(nic("enp1s0f0np0", "192.168.100.20/24", ["rocep1s0f0"])),
    }
    with pytest.raises(nodesets.NodeSetError, match=r"a: 2 interfaces on the cluster subnet 192\.168\.100\.0/24"):
        nodesets.pick(["a", "b"], facts, 2)


def test_a_set_never_spans_fingerprint_groups():
    facts = {
        "a": sim("127.0.9.11"),
        "b": host(dict(netfacts.simulated_interface("127.0.9.12")), fingerprint="bbbb0000"),
    }
    with pytest.raises(nodesets.NodeSetError, match="has 1"):
        nodesets.pick(["a", "b"], facts, 2)


def test_rdma_asked_on_a_link_without_it_is_refused():
    facts = {h: host(nic("enp1s0f0np0", f"192.168.100.{i}/24")) for i, h in enumerate("ab", 1)}
    assert not nodesets.pick(["a", "b"], facts, 2).sets[0].rdma
    with pytest.raises(nodesets.NodeSetError, match="transport = rdma but a, b has no RDMA device"):
        nodesets.pick(["a", "b"], facts, 2, "rdma")


# ---- bad input: one line, exit 2 -------------------------------------------------------------------------------


def test_tp_times_pp_that_does_not_split_over_nodes_names_the_line(tmp_path):
    with pytest.raises(UserError) as err:
        load_spec(spec_file(tmp_path, nodes=2, tp=3))
    assert err.value.message.startswith(f"{tmp_path / 'mn.toml'}:13:") and "\n" not in err.value.message


def test_unknown_transport_is_refused(tmp_path):
    with pytest.raises(UserError, match="transport"):
        load_spec(spec_file(tmp_path, extra='transport = "carrier-pigeon"'))


def test_nodes_larger_than_the_fleet_or_gpus_that_do_not_match_are_refused(tmp_path):
    facts = {"a": sim("127.0.9.11"), "b": sim("127.0.9.12")}
    with pytest.raises(UserError, match="nodes = 3 but the inventory selects 2"):
        multinode.choose(load_spec(spec_file(tmp_path, nodes=3, tp=3)), ["a", "b"], facts)
    with pytest.raises(UserError, match="= 4 but nodes a, b have 2 GPU"):
        multinode.choose(load_spec(spec_file(tmp_path, nodes=2, tp=4)), ["a", "b"], facts)
    with pytest.raises(UserError, match="transport = rdma but a, b"):
        plain = {h: host(nic("enp1s0f0np0", f"192.168.100.{i}/24")) for i, h in enumerate("ab", 1)}
        multinode.choose(load_spec(spec_file(tmp_path, extra='transport = "rdma"')), ["a", "b"], plain)


# ---- the plan: id, env per node ----------------------------------------------------------------------------------


def test_a_node_set_plans_its_cells_on_the_head_with_each_nodes_env(tmp_path):
    spec = load_spec(spec_file(tmp_path))
    facts = {"a": sim("127.0.9.11"), "b": sim("127.0.9.12")}
    host_vars = {"a": {"spark_runtime": "process", "spark_ray_port": 6380}, "b": {}}
    cells, warnings = multinode.plan_fleet(spec, ["a", "b"], facts, host_vars)
    assert cells["b"] == [] and warnings == []
    (cell,) = cells["a"]
    assert cell.hosts == ["a", "b"] and cell.cluster["head_address"] == "127.0.9.11:6380"
    assert cell.cluster["transport"] == "rdma" and cell.cluster["world_size"] == 2
    assert "--tensor-parallel-size" in cell.argv and "--distributed-executor-backend" in cell.argv
    worker = cell.cluster["nodes"][1]["env"]
    assert worker["VLLM_HOST_IP"] == "127.0.9.12" and worker["NCCL_IB_HCA"] == "rocep1s0f0"
    assert worker["NCCL_SOCKET_IFNAME"] == worker["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert "NCCL_IB_DISABLE" not in worker and worker["RAY_ADDRESS"] == "127.0.9.11:6380"
    assert {(p["name"], p["rule"]) for p in cell.provenance} >= {("NCCL_IB_HCA", "multinode-ib-hca")}
    # the id covers nodes and TP but not the node set's addresses: the same cell on another pair keeps its id
    other, _ = multinode.plan_fleet(spec, ["a", "b"], {"a": sim("127.0.7.11"), "b": sim("127.0.7.12")}, host_vars)
    assert other["a"][0].id == cell.id
    one_node = plan_cells(
        replace(spec, server=replace(spec.server, nodes=1, tensor_parallel_size=1)), "a", facts["a"], {}
    )
    assert one_node[0].id != cell.id and cell_id(one_node[0].config, one_node[0].env) == one_node[0].id


def test_socket_transport_rule_disables_ib():
    env = envrules.node_env(
        {"ifname": "eth1", "address": "10.0.0.2", "rdma": "", "head": "10.0.0.1:6379"}, "socket", "b"
    )
    assert env.env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env.env
    assert all(p["reason"].endswith("(node b)") for p in env.provenance)


# ---- host facts ---------------------------------------------------------------------------------------------------


def test_interfaces_read_from_sysfs_and_infiniband(tmp_path, monkeypatch):
    net, ib = tmp_path / "net", tmp_path / "ib"
    for name, speed, state in (("lo", "", "unknown"), ("enp1s0f0np0", "200000", "up"), ("eno1", "1000", "up")):
        (net / name).mkdir(parents=True)
        (net / name / "speed").write_text(speed + "\n")
        (net / name / "operstate").write_text(state + "\n")
    (ib / "rocep1s0f0" / "device" / "net" / "enp1s0f0np0").mkdir(parents=True)
    monkeypatch.setattr(netfacts, "ipv4_addresses", lambda names: {"enp1s0f0np0": ["192.168.100.10/24"]})
    found = {n["name"]: n for n in netfacts.interfaces(str(net), str(ib))}
    assert set(found) == {"enp1s0f0np0", "eno1"}
    assert found["enp1s0f0np0"]["rdma"] == ["rocep1s0f0"] and found["enp1s0f0np0"]["speed_mbps"] == 200_000
    assert found["eno1"]["addresses"] == [] and not found["eno1"]["simulated"]


def test_the_kernel_gives_an_interface_its_primary_address_without_iproute2():
    assert netfacts._primary_address("lo") == "127.0.0.1/8"
    assert netfacts._primary_address("no-such-nic0") == ""


def test_ip_json_gives_ipv4_addresses_only():
    rows = [
        {
            "ifname": "eth0",
            "addr_info": [
                {"family": "inet", "local": "10.1.2.3", "prefixlen": 16},
                {"family": "inet6", "local": "fe80::1"},
            ],
        }
    ]
    assert netfacts.parse_ip_json(rows) == {"eth0": ["10.1.2.3/16"]}
    assert netfacts.parse_ip_json("nonsense") == {}


def test_simulated_host_reports_a_simulated_connectx_on_its_loopback_address():
    nic_ = netfacts.simulated_interface("127.0.9.12")
    assert nic_["simulated"] and nic_["addresses"] == ["127.0.9.12/24"] and nic_["speed_mbps"] == 200_000
    assert netfacts.simulated_interface("localhost")["addresses"] == ["127.0.0.1/24"]


# ---- Ray ---------------------------------------------------------------------------------------------------------

RAY_STATUS = """======== Autoscaler status: 2026-12-01 10:58:41.581434 ========
Node status
---------------------------------------------------------------
Active:
 1 node_8f6e72ad2e40028eafbfb812f13f71339af92b3b4c946088f2367ee6
 1 node_7ee197771510a296895c41da24b643c7fe4a4f5dd261d9777870f00a
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Total Usage:
 0.0/2.0 CPU
 0.0/2.0 GPU
 0B/46.40GiB memory
"""


def test_ray_status_gives_nodes_and_gpus():
    assert raynode.parse_status(RAY_STATUS) == {"nodes": 2, "gpus": 2.0}
    assert raynode.parse_status("ConnectionError: could not connect") == {"nodes": 0, "gpus": 0.0}


def test_each_node_gets_its_own_ports_and_temp_dir():
    head = raynode.argv(["ray"], "head", "127.0.9.11", "127.0.9.11:6380", 46400, "/tmp/r1", 1, {"spark_sim_gpu": 1}, 80)
    worker = raynode.argv(["ray"], "worker", "127.0.9.12", "127.0.9.11:6380", 46500, "/tmp/r2", 0, {}, 0)
    assert head[:3] == ["ray", "start", "--block"] and "--head" in head and head[head.index("--port") + 1] == "6380"
    assert head[head.index("--node-manager-port") + 1] == "46400" and "--num-gpus" in head
    assert worker[worker.index("--address") + 1] == "127.0.9.11:6380" and "--num-gpus" not in worker
    assert worker[worker.index("--temp-dir") + 1] == "/tmp/r2" and "--head" not in worker


PINNED = "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32


def test_a_docker_node_runs_ray_in_the_pinned_image_with_its_env_file():
    name = raynode.container_name("3f9a1c0e7b2d", 46500)
    env_file = "/w/env/3f9a1c0e7b2d.env"
    run = raynode.container_argv(PINNED, name, "3f9a1c0e7b2d", env_file, "/tmp/r2", gpus=True, user=(1000, 1000))
    ray = raynode.argv(["ray"], "worker", "127.0.9.12", "127.0.9.11:6380", 46500, "/tmp/r2", 0, {}, 0)
    command = run + ray
    assert command[:2] == ["docker", "run"] and "--detach" not in command  # attached: its output is the node's log
    assert command[command.index("--network") + 1] == "host" and command[command.index("--ipc") + 1] == "host"
    assert command[command.index("--env-file") + 1] == env_file  # values never on a command line
    assert command[command.index("--volume") + 1] == "/tmp/r2:/tmp/r2" and "--gpus" in command
    assert command[command.index(PINNED) + 1 :][:3] == ["ray", "start", "--block"]
    assert "spark-agent.cell=3f9a1c0e7b2d" in command and "spark-agent.ray=1" in command
    assert name == "spark-agent-ray-3f9a1c0e7b2d-46500"  # the node's own ports: two test nodes on one daemon
    simulated = raynode.container_argv(PINNED, name, "3f9a1c0e7b2d", "", "/tmp/r2", gpus=False, user=(1000, 1000))
    assert "--gpus" not in simulated and "--env-file" not in simulated
    with pytest.raises(ValueError, match="not pinned by digest"):
        raynode.container_argv("nvcr.io/nvidia/vllm:25.09-py3", name, "3f9a1c0e7b2d", "", "/tmp/r2", True, (1000, 1000))


def test_the_cluster_check_runs_ray_inside_the_heads_container(tmp_path):
    workdir = str(tmp_path)
    assert raynode.status_cmd(workdir, ["ray"]) == ["ray"]  # no node: the host's own ray (process runtime)
    state = tmp_path / "state" / raynode.STATE_FILE
    state.parent.mkdir(exist_ok=True)
    state.write_text('{"pid": 4242, "cell_id": "3f9a1c0e7b2d", "container": "spark-agent-ray-3f9a1c0e7b2d-46400"}')
    assert raynode.status_cmd(workdir, ["ray"]) == ["docker", "exec", "spark-agent-ray-3f9a1c0e7b2d-46400", "ray"]
    state.write_text('{"pid": 4242, "container": "someone-elses"}')  # never a container that is not ours
    assert raynode.status_cmd(workdir, ["ray"]) == ["ray"]


def test_a_nodes_header_line_gives_its_report():
    line = clusterlog.node_header("worker", "3f9a1c0e7b2d", "dropped", "sha256:" + "ab" * 32)
    assert clusterlog.node_report("b", line) == {
        "host": "b",
        "role": "worker",
        "page_cache": "dropped",
        "image": "sha256:" + "ab" * 32,
    }
    why = "not dropped (Permission denied; needs root)"
    assert clusterlog.node_report("a", clusterlog.node_header("head", "3f9a1c0e7b2d", why))["page_cache"] == why
    assert clusterlog.node_report("a", "2026-12-01 ray start ...") is None  # no header: nothing recorded
    assert clusterlog.node_report("a", line.replace("sha256:", "sha256:zz")) is None  # never a loose digest


# ---- the simulated NCCL -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, transport",
    [
        ({"SPARK_SIM_RDMA": "rocep1s0f0", "NCCL_IB_HCA": "rocep1s0f0"}, "IB"),
        ({"SPARK_SIM_RDMA": "rocep1s0f0", "NCCL_IB_DISABLE": "1"}, "Socket"),
        ({"SPARK_SIM_RDMA": "rocep1s0f0", "NCCL_NET": "Socket"}, "Socket"),
        ({"NCCL_IB_HCA": "mlx5_0"}, "Socket"),  # the node has no RDMA device, whatever the env names
    ],
)
def test_simulated_nccl_picks_its_transport_as_nccl_would(env, transport):
    assert simcluster.nccl_transport(env)[0] == transport
    lines = simcluster.nccl_lines(dict(env, NCCL_DEBUG="INFO", NCCL_SOCKET_IFNAME="enp1s0f0np0"), "127.0.9.12", 1)
    follower = clusterlog.ClusterFollower()
    for line in lines:
        follower.feed(line)
    assert [link["transport"] for link in follower.result()["links"]] == [transport]


def test_the_link_cost_of_sockets_is_higher_than_rdma():
    ib = simcluster.Cluster(2, 1, {"a": "IB", "b": "IB"})
    sock = simcluster.Cluster(2, 1, {"a": "IB", "b": "Socket"})
    assert sock.transport == "Socket" and ib.transport == "IB"
    (scale, ib_cost), (_, sock_cost) = ib.step_cost(), sock.step_cost()
    assert scale < 1 and 0 < ib_cost(1) < sock_cost(1) and ib_cost(16) > ib_cost(1)


# ---- real logs ----------------------------------------------------------------------------------------------------


def test_a_real_socket_fallback_over_ray_is_found_and_makes_the_cell_invalid():
    facts = logparse.parse((DATA / "socket-vllm-11139.log").read_text())["cluster"]
    assert facts["ray_nodes"] == 2  # the head's worker and the one at ip=10.0.130.237
    (link,) = facts["links"]
    assert link["transport"] == "Socket" and link["device"] == "eth0:10.0.143.175<0>" and link["node"] == "vllm-0"
    reasons, evidence, _ = cluster_verdict.judge({"nodes": 2, "transport": "rdma"}, facts)
    assert reasons == [
        "transport: the rules expect RDMA on the link, NCCL used Socket on node vllm-0 (eth0:10.0.143.175<0>)"
    ]
    assert evidence == [link["line"]] and "Using network Socket" in evidence[0]
    assert cluster_verdict.judge({"nodes": 2, "transport": "socket"}, facts)[0] == []


def test_a_real_roce_log_is_ib_on_both_nodes():
    facts = logparse.parse((DATA / "ib-roce-nccl-tests-185.log").read_text())["cluster"]
    assert [(lk["transport"], lk["device"]) for lk in facts["links"]] == [("IB", "mlx5_10:1/RoCE")] * 2
    assert cluster_verdict.judge({"nodes": 2, "transport": "rdma"}, facts)[0] == []


def test_a_log_without_the_network_line_is_not_attested_but_not_invalid():
    facts = logparse.parse((DATA / "ray-roce-nccl-1297.log").read_text())["cluster"]
    assert facts["links"] == [] and facts["ray_nodes"] == 2
    reasons, _, notes = cluster_verdict.judge({"nodes": 2, "transport": "rdma"}, facts)
    assert reasons == [] and "not attested" in notes[0]


def test_world_size_and_parallel_sizes_from_vllm_lines():
    log = (
        "INFO 03-24 09:41:30 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.3) with config: "
        "tensor_parallel_size=2, pipeline_parallel_size=2, disable_custom_all_reduce=False\n"
        "(RayWorkerWrapper pid=9, ip=10.0.0.2) INFO 03-24 09:41:40 parallel_state.py:948] rank 3 in world size 4 is "
        "assigned as DP rank 0, PP rank 1, TP rank 1\n"
    )
    facts = logparse.parse(log)["cluster"]
    assert (facts["world_size"], facts["tensor_parallel_size"], facts["pipeline_parallel_size"]) == (4, 2, 2)
    reasons, _, _ = cluster_verdict.judge({"nodes": 2, "tensor_parallel_size": 2, "pipeline_parallel_size": 1}, facts)
    assert reasons == ["world size: requested 2 (TP x PP), the log says 4"]


def test_check_shows_each_hosts_link_candidates():
    from agent.commands.check import _links

    assert _links(sim("127.0.9.11")) == "enp1s0f0np0 127.0.9.11/24 200 Gb/s rdma rocep1s0f0 (simulated)"
    assert _links(host(nic("eno1", "10.0.0.1/24", speed=-1))) == "eno1 10.0.0.1/24 ? Gb/s"
    assert _links(Facts(gpu_name="x")) == "-"


# ---- `spark-agent env` for a multi-node spec: the planner's own sets and env, per node -----------------------------


def test_env_view_shows_each_nodes_env_with_its_rule_and_the_refused_host(tmp_path):
    from agent.commands import env as env_cmd

    spec = load_spec(spec_file(tmp_path))
    two_nics = host(nic("enp1s0f0np0", "127.0.9.13/24", ["rocep1s0f0"]), nic("enp1s0f1np1", "127.0.9.14/24"))
    hosts = [("a", sim("127.0.9.11"), {}), ("b", sim("127.0.9.12"), {}), ("c", two_nics, {})]
    view = env_cmd.multinode_view(spec, hosts)
    (node_set,) = view["node_sets"]
    assert node_set["hosts"] == ["a", "b"] and node_set["transport"] == "rdma"
    assert node_set["transport_reason"] == "every node has an RDMA device on the link"
    assert "c" in view["refused"] and "2 interfaces on the cluster subnet" in view["refused"]["c"]
    (cell,) = node_set["cells"]
    head, worker = cell["nodes"]
    assert worker["env"]["VLLM_HOST_IP"] == "127.0.9.12" and head["env"]["VLLM_HOST_IP"] == "127.0.9.11"
    rows = {r["name"]: r for r in worker["provenance"]}
    assert set(rows) >= {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "NCCL_IB_HCA", "VLLM_HOST_IP"}
    assert rows["NCCL_IB_HCA"]["rule"] == "multinode-ib-hca" and rows["NCCL_IB_HCA"]["reason"].endswith("(node b)")
    assert all(r["reason"].endswith("(node a)") for r in head["provenance"])
    assert not any(r["rule"].startswith("multinode-") for r in cell["provenance"])  # the cell's own rows only


def test_env_command_for_a_refused_node_set_is_one_line_exit_2(tmp_path):
    from agent.commands import env as env_cmd

    spec = load_spec(spec_file(tmp_path, extra='transport = "rdma"'))
    plain = [(h, host(nic("enp1s0f0np0", f"192.168.100.{i}/24")), {}) for i, h in enumerate("ab", 1)]
    with pytest.raises(UserError, match="transport = rdma but a, b has no RDMA device") as err:
        env_cmd.multinode_view(spec, plain)
    assert err.value.exit_code == 2 and "\n" not in err.value.message
    socket_spec = load_spec(spec_file(tmp_path))
    (node_set,) = env_cmd.multinode_view(socket_spec, plain)["node_sets"]
    assert node_set["transport"] == "socket" and node_set["transport_reason"] == "no RDMA device on the link of a, b"
    worker = node_set["cells"][0]["nodes"][1]
    assert worker["env"]["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in worker["env"]


def test_the_report_shows_each_nodes_page_cache_and_image():
    from agent.judging.summary import CellSummary
    from agent.reporting import multinode as report

    digest = "sha256:" + "ab" * 32
    cell = {
        "cell_id": "3f9a1c0e7b2d",
        "attestation": {"cluster": {"world_size": 2, "ray_nodes": 2, "links": [{"node": "b", "transport": "IB"}]}},
        "nodes": [
            {"host": "a", "role": "head", "page_cache": "simulated host: not dropped", "image": ""},
            {"host": "b|x", "role": "worker", "page_cache": "dropped", "image": digest},
        ],
    }
    lines = report.node_lines([CellSummary(cell=cell, points={}), CellSummary(cell={"cell_id": "one"}, points={})])
    assert lines[0] == "## Multi-node cells" and len([ln for ln in lines if ln.startswith("| ")]) == 3
    assert "simulated host: not dropped" in lines[4] and "process runtime" in lines[4] and "IB" in lines[4]
    assert "dropped" in lines[5] and digest in lines[5] and "b\\|x" in lines[5]  # host text escaped, never a column
    assert report.node_lines([CellSummary(cell={"cell_id": "one"}, points={})]) == []


def test_env_command_prints_each_node_set_and_the_refused_hosts(tmp_path, capsys, monkeypatch):
    from agent.commands import env as env_cmd

    monkeypatch.setenv("COLUMNS", "250")
    two_nics = host(nic("enp1s0f0np0", "127.0.9.13/24", ["rocep1s0f0"]), nic("enp1s0f1np1", "127.0.9.14/24"))
    hosts = [("a", sim("127.0.9.11"), {}), ("b", sim("127.0.9.12"), {}), ("c", two_nics, {})]
    assert env_cmd._show_multinode(env_cmd.multinode_view(load_spec(spec_file(tmp_path)), hosts), False) == 0
    out = capsys.readouterr().out
    assert "node set a, b (head a) on 127.0.9.0/24: transport rdma (every node has an RDMA device" in out
    for text in ("all nodes", "multinode-ib-hca", "(node b)", "VLLM_HOST_IP", "127.0.9.12"):
        assert text in out
    assert "refused: host c is in no node set: 2 interfaces on the cluster subnet" in out


@pytest.mark.attack("ray: a play runs the Ray node (or anything else) as root through become")
def test_no_play_becomes_another_user():
    """Ray and every server run as the SSH login user: no play, block or task of ours asks for `become`."""
    import yaml

    from agent.paths import PLAYBOOKS

    def keys(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield k
                yield from keys(v)
        elif isinstance(node, list):
            for v in node:
                yield from keys(v)

    files = sorted(PLAYBOOKS.glob("*.yml")) + sorted((PLAYBOOKS / "tasks").glob("*.yml"))
    files += sorted((PLAYBOOKS / "roles").rglob("*.yml"))
    assert len(files) > 10
    for f in files:
        assert not [k for k in keys(yaml.safe_load(f.read_text())) if str(k).startswith("become")], f
