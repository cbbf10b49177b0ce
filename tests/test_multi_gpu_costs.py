"""Multi-GPU steps: all-reduce by GPU generation and fabric, pipeline sends inside a server and
across servers, the logits gather, and the executor's per-step cost by release and TP degree."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from sim.cost.comm import Topology, logits_gather_s, stage_send_s
from sim.cost.kernels import KernelPricer
from sim.cost.prior import CostProfile
from sim.cost.profiles import choose_pricer
from sim.cost.step import CostModel
from sim.engines.overheads import executor_s
from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.run.setup import Setup
from sim.scenarios.validate.cases import load_cases
from sim.schedulers.base import StepPlan
from sim.specs.hardware import load_hardware
from sim.specs.links import load_link
from sim.specs.model_config import load_model
from tests.conftest import config, shared_data, unit_profile

PRIOR = CostProfile.load("prior")
LLAMA = load_model("llama-3.1-8b")
DECODE_BYTES = [b * 8192 * 2 for b in (1, 16, 64, 256)]  # a 70B's hidden states per decode


def _pricer(gpu: str, version: str = "0.8.3") -> KernelPricer:
    return choose_pricer(load_hardware(gpu), "auto", PRIOR, "vllm", version).pricer


def _decode(n: int, context: int = 100) -> StepPlan:
    return StepPlan([None] * n, [1] * n, [context] * n, 0, n, 0)


def test_a100_40gb_all_reduce_is_priced_from_a100_nvlink3_measurements():
    a40, a80, h100 = _pricer("a100-40gb"), _pricer("a100-80gb"), _pricer("h100-sxm")
    for tp in (2, 4, 8):
        for n in DECODE_BYTES:
            assert a40.allreduce_s(n, tp) == a80.allreduce_s(n, tp)
    assert a40.used["allreduce"] == "allreduce/2"  # a measured table (first used), not the prior
    # NVLink 3 is slower than H100's NVLink 4 at decode sizes
    assert a40.allreduce_s(DECODE_BYTES[-1], 8) > 1.3 * h100.allreduce_s(DECODE_BYTES[-1], 8)
    choice = choose_pricer(load_hardware("a100-40gb"), "auto", PRIOR, "vllm", "0.8.3")
    assert "allreduce, sendrecv measured on a100-80gb" in choice.source


def test_h200_takes_only_the_tables_its_profile_lacks_from_the_h100():
    h200, h100 = _pricer("h200", "0.12.0"), _pricer("h100-sxm", "0.12.0")
    n = 16 * 8192 * 2
    assert h200.sendrecv_s(n) == h100.sendrecv_s(n)  # none measured on the H200
    assert h200.allreduce_s(n, 8) != h100.allreduce_s(n, 8)  # its own
    choice = choose_pricer(load_hardware("h200"), "auto", PRIOR, "vllm", "0.12.0")
    assert "sendrecv measured on h100-sxm (vllm@0.14.0), the same peer fabric" in choice.source


def test_pcie_cards_reduce_over_pcie():
    for gpu in ("l40s", "rtx-pro-6000"):
        hw = load_hardware(gpu)
        pr = _pricer(gpu, "0.11.0")
        assert hw.nvlink_bytes_per_s == 0 and hw.peer_bytes_per_s == hw.pcie_bytes_per_s
        n, tp = 64 * 8192 * 2, 4
        link = hw.pcie_bytes_per_s * PRIOR.allreduce_bandwidth_efficiency
        expected = PRIOR.allreduce_latency_s + 2 * (tp - 1) / tp * n / link
        assert pr.allreduce_s(n, tp) == pytest.approx(expected)
        assert pr.used["allreduce"] == "prior"


def test_collectives_from_must_name_a_calibrated_gpu(tmp_path):
    text = (load_hardware.__globals__["HARDWARE_DIR"] / "a100-40gb.yaml").read_text()
    bad = tmp_path / "x.yaml"
    bad.write_text(text.replace("collectives_from: a100-80gb", "collectives_from: 7"))
    with pytest.raises(UserError, match="collectives_from must name a calibrated GPU"):
        load_hardware(str(bad))
    bad.write_text(text.replace("collectives_from: a100-80gb", "collectives_from: nosuch"))
    with pytest.raises(UserError, match="collectives_from='nosuch' has no calibrated profile"):
        choose_pricer(load_hardware(str(bad)), "auto", PRIOR, "vllm", "0.8.3")


def test_stage_boundaries_cross_servers_only_where_the_ranks_do():
    eight = Topology(8)
    assert not eight.crosses_servers(4, 0)  # TP4 x PP2 on one 8-GPU server
    assert eight.crosses_servers(8, 0)  # TP8 x PP2: two servers
    four = Topology(4)
    assert four.crosses_servers(4, 0)  # TP4 x PP2 on 4-GPU servers
    assert [four.crosses_servers(2, b) for b in range(3)] == [False, True, False]  # TP2 x PP4


def test_a_pipeline_send_across_servers_goes_over_the_server_link():
    h100 = load_hardware("h100-sxm")
    pricer = KernelPricer(h100, unit_profile())
    ib = load_link("infiniband", h100, h100)
    tokens, hidden = 64, 8192
    nbytes = 2 * tokens * hidden * 2  # hidden states and residual, bf16
    inside = stage_send_s(pricer, tokens, hidden, 4, 2, Topology(8, ib))
    across = stage_send_s(pricer, tokens, hidden, 4, 2, Topology(4, ib))
    assert inside == pytest.approx(float(pricer.sendrecv_s(nbytes)))
    assert across == pytest.approx(ib.latency_s + nbytes / ib.bytes_per_s)
    assert across > inside
    # TP2 x PP4 on 4-GPU servers: one of three boundaries crosses; the mean is priced
    mixed = stage_send_s(pricer, tokens, hidden, 2, 4, Topology(4, ib))
    assert mixed == pytest.approx((2 * float(pricer.sendrecv_s(nbytes)) + across) / 3)
    shared = load_link("ethernet-25g", h100, h100)
    one_nic = stage_send_s(pricer, tokens, hidden, 4, 2, Topology(4, shared))
    assert one_nic == pytest.approx(shared.latency_s + 4 * nbytes / shared.bytes_per_s)


def _setup(**parallel) -> Setup:
    cfg = config(model="llama-3.1-70b", hardware="a100-40gb", engine="vllm@0.8.3",
                 parallel=parallel)  # fmt: skip
    return Setup.from_config(cfg)


def test_a_replica_on_two_servers_pays_the_server_link_per_stage():
    one = _setup(tp=4, pp=2).cost_model().step_cost(_decode(32))
    two = _setup(tp=4, pp=2, gpus_per_node=4).cost_model().step_cost(_decode(32))
    hdr = _setup(tp=4, pp=2, gpus_per_node=4, node_link="infiniband-hdr")
    slower = hdr.cost_model().step_cost(_decode(32))
    assert one.p2p_s < two.p2p_s < slower.p2p_s
    assert two.latency_s - one.latency_s == pytest.approx(two.p2p_s - one.p2p_s)
    with pytest.raises(UserError, match=r"parallel.node_link='carrier-pigeon' is not in"):
        _setup(tp=4, node_link="carrier-pigeon")


def _model(spec: str, tp: int) -> CostModel:
    h100 = load_hardware("h100-sxm")
    s = resolve(spec, h100, LLAMA, tp)
    prof = unit_profile()
    return CostModel(LLAMA, s, tp, "auto", KernelPricer(h100, prof), prof)


@pytest.mark.parametrize(
    ("spec", "fixed", "per_rank", "serial"),
    [
        ("vllm@0.5.5", 6e-4, 3e-5, True),  # V0: broadcast_object_list, then the tensors
        ("vllm@0.6.6", 2e-4, 1e-5, True),  # V0: shared-memory metadata, NCCL tensor broadcasts
        ("vllm@0.8.3", 5e-5, 2e-5, True),  # V1 MultiprocExecutor: a reply from every worker
        ("vllm@0.14.0", 5e-5, 2e-5, False),  # async scheduling hides it behind the GPU
        ("sglang", 0.0, 0.0, False),
    ],
)
def test_the_executor_costs_by_release_and_tp_degree(spec, fixed, per_rank, serial):
    family, _, version = spec.partition("@")
    version = version or "0.5.9"
    assert executor_s(family, version, 1) == 0.0
    assert executor_s(family, version, 2) == pytest.approx(fixed + per_rank)
    assert executor_s(family, version, 8) == pytest.approx(fixed + 7 * per_rank)
    one = _model(spec, 1).step_cost(_decode(32))
    eight = _model(spec, 8).step_cost(_decode(32))
    grown = fixed + 7 * per_rank
    if serial:
        assert eight.cpu_serial_s - one.cpu_serial_s == pytest.approx(grown)
        assert eight.cpu_hidden_s == pytest.approx(one.cpu_hidden_s)
    else:
        assert eight.cpu_serial_s == pytest.approx(one.cpu_serial_s)
        assert eight.cpu_hidden_s - one.cpu_hidden_s == pytest.approx(grown)


def test_pipeline_stages_are_workers_too():
    """The executor's cost is resolved for the replica's tp x pp GPUs (a setting of its own,
    cpu_executor_s, so that an upgrade study sees it change with the release)."""
    h100, prof = load_hardware("h100-sxm"), unit_profile()
    s = resolve("vllm@0.8.3", h100, LLAMA, 4, workers=8)
    tp4pp2 = CostModel(LLAMA, s, 4, "auto", KernelPricer(h100, prof), prof, pp=2)
    assert tp4pp2.executor_s == s.cpu_executor_s == pytest.approx(5e-5 + 7 * 2e-5)
    assert resolve("vllm@0.8.3", h100, LLAMA, 4).cpu_executor_s == pytest.approx(5e-5 + 3 * 2e-5)
    assert executor_s("orca", "1", 8) == 0.0  # a teaching engine


def test_logits_are_gathered_over_the_tp_group():
    pricer = _pricer("h100-sxm", "0.11.0")
    vocab = LLAMA.vocab_size
    assert logits_gather_s(pricer, 32, vocab, 1) == 0.0
    gather = logits_gather_s(pricer, 32, vocab, 8)
    assert gather == pytest.approx(0.5 * float(pricer.allreduce_s(32 * vocab * 2, 8)))
    m1, m8 = _model("vllm@0.11.0", 1), _model("vllm@0.11.0", 8)
    part = float(m8.pricer.gemm_s(32, vocab / 8, LLAMA.hidden_size, "bf16").sum())
    sampler = float(m8.pricer.elementwise_s(32 * vocab * 4 * 3, "sampler"))
    expected = part + logits_gather_s(m8.pricer, 32, vocab, 8) + sampler
    assert m8.lm_head_s(32) == pytest.approx(expected)
    assert m1.lm_head_s(32) == pytest.approx(
        float(m1.pricer.gemm_s(32, vocab, LLAMA.hidden_size, "bf16").sum()) + sampler
    )


def test_a_case_file_can_place_the_stages_on_servers(tmp_path):
    data = {
        "id": "tp4-pp2-ib",
        "engine": "vllm@0.8.3",
        "hardware": "a100-40gb",
        "model": "llama-3.1-70b",
        "parallel": {"tp": 4, "pp": 2, "gpus_per_node": 4, "node_link": "infiniband-hdr"},
        "workload": {
            "closed_loop": {"concurrency": 2, "num_requests": 4, "input_len": 64, "output_len": 8}
        },
        "measured": {"mean_tpot_ms": 40.0},
    }
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [data]}))
    (case,) = load_cases([path], config())
    assert case.error is None
    assert case.config.parallel.gpus_per_node == 4
    assert case.config.parallel.node_link == "infiniband-hdr"


@pytest.mark.parametrize("cluster", ["h100_dgx", "a100_dgx"])
def test_the_measured_server_links_are_vidurs_cross_server_send_recv(cluster):
    rows = pd.read_csv(shared_data(f"vidur/profiling/network/{cluster}/send_recv.csv"))
    across = rows[rows["devices_per_node"] == 1].groupby("size")["time_stats.send_recv.median"]
    ms = across.median()
    h100 = load_hardware("h100-sxm")
    link = load_link(f"vidur-{cluster.replace('_', '-')}", h100, h100)
    assert link.bytes_per_s == pytest.approx(64 * 2**20 / (ms[64 * 2**20] * 1e-3), rel=0.02)
    assert link.latency_s == pytest.approx(ms.iloc[0] * 1e-3, rel=0.05)
