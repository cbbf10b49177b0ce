"""Communication of a multi-GPU step beyond the per-layer all-reduce: where the GPUs of a
replica sit (its topology) and what a pipeline-stage boundary and the logits gather cost.

Pipeline parallelism: consecutive stages hand over the step's activations. In vLLM the
intermediate tensors of a decoder layer stack are the hidden states and the residual (vLLM
0.8.x vllm/model_executor/models/llama.py, make_empty_intermediate_tensors_factory with
"hidden_states" and "residual"), both of the step's token count x hidden size; every rank of
the sending stage sends its copy to its peer in the next stage. A boundary whose ranks are on
the same server goes over the GPUs' peer link (the measured send/recv table, else the prior);
one that crosses servers (tp x pp > gpus_per_node) goes over the server link of
hardware/links.yaml, each GPU over its own NIC (or one after another when the servers share
one): its latency plus the bytes at its rate.

Tensor parallelism across servers (tp > gpus_per_node): a TP group's all-reduce is hierarchical,
as NCCL runs it over several servers: each server reduces inside itself (reduce-scatter, then
after the exchange an all-gather: the measured all-reduce of the GPUs a server holds), and in
between each GPU reduces its 1/g shard with its peers on the other servers over its own NIC (a
ring of N servers: 2(N - 1) transfers, each the server link's latency plus its bytes at the
link's rate). The server link's latency is paid twice per server crossed on every all-reduce,
which is what makes a TP group across servers slower per layer than one inside a server. (vLLM's
custom all-reduce needs every rank on one server, so such a group runs NCCL even inside each
server; the measured table of g GPUs, often the custom kernel's, is a lower estimate of it.)

The all-reduce inside a server is the kernel the engine dispatches to at that size, and the
measured tables are timed through the same dispatch: AIConfigurator's vLLM collector calls
tensor_model_parallel_all_reduce inside a CUDA graph (ai-dynamo/aiconfigurator
collector/collect_all_reduce.py), so a release's table carries its choice. vLLM's choice
(vllm/distributed/device_communicators/custom_all_reduce.py, should_custom_ar, and
cuda_communicator.py, all_reduce, in the 0.7.3, 0.8.3, 0.10.1, 0.11.0 and 0.14.0 wheels): the
custom all-reduce (its kernel picks one-shot for small messages, two-shot above) below 8 MiB
when every pair of GPUs is NVLink-connected, or at TP = 2 with P2P; on more than two
PCIe-only GPUs it is disabled and NCCL runs (the prior prices those). From 0.11.0 torch
symmetric memory is on by default (VLLM_ALLREDUCE_USE_SYMM_MEM=1, vllm PR #24111): on Hopper
the custom kernel keeps sizes below 256 KiB at TP 8 (all_reduce_utils.py,
CUSTOM_ALL_REDUCE_MAX_SIZES) and multimem all-reduce takes 256 KiB-64 MiB, NCCL beyond; 0.10.x
and earlier run the custom kernel up to 8 MiB. The all-reduce + RMSNorm fusion
(fuse_allreduce_rms) is off at every optimisation level through 0.14.0
(vllm/config/vllm.py), so a decode layer runs its two all-reduces unfused.

Tensor parallelism: the LM head is split over the vocabulary, so the logits of every sequence
are gathered across the TP group each step (vLLM V0: a gather to the driver rank; V1: an
all-gather, since every rank samples, vllm PR #9856). A ring gather moves the same bytes as
half of a ring all-reduce of the gathered tensor, so it is priced as half the measured
all-reduce of that size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.cost.kernels import KernelPricer
from sim.engines.versions import release_key
from sim.specs.hardware import Hardware
from sim.specs.links import Link, load_link

ACT_BYTES = 2
SYMM_MEM_FROM = release_key("0.11.0")  # VLLM_ALLREDUCE_USE_SYMM_MEM defaults to 1 (vllm PR #24111)
SYMM_MEM_MEASURED_FROM = release_key("0.18.0")  # the first measured table showing it
PP_TENSORS = 2  # hidden states and residual
LOGIT_BYTES = 2  # logits leave the LM head in the model's dtype


@dataclass(frozen=True, slots=True)
class Topology:
    """Where a replica's GPUs sit: `gpus_per_node` per server, `node_link` between servers
    (None: the replica fits on one server)."""

    gpus_per_node: int = 8
    node_link: Link | None = None

    def crosses_servers(self, tp: int, boundary: int) -> bool:
        """Whether the send from stage `boundary` to stage `boundary` + 1 leaves a server
        (ranks are numbered stage by stage, tp ranks a stage)."""
        g = self.gpus_per_node
        return any((boundary * tp + r) // g != ((boundary + 1) * tp + r) // g for r in range(tp))

    def servers(self, gpus: int) -> int:
        """Servers a group of `gpus` consecutive ranks spans (1 without a server link)."""
        if self.node_link is None:
            return 1
        return -(-gpus // self.gpus_per_node)

    def crossings(self, tp: int, pp: int) -> int:
        """How many of the pp - 1 stage boundaries leave a server (none without a server link)."""
        if self.node_link is None:
            return 0
        return sum(self.crosses_servers(tp, b) for b in range(pp - 1))


def topology(
    tp: int, pp: int, gpus_per_node: int, node_link: str, hw: Hardware, ep: int = 1
) -> Topology:
    """Where a replica of tp x pp GPUs sits: the server link (hardware/links.yaml) only when
    the replica spans more than one server (its TP group, its pipeline stages, or its expert
    group over the data-parallel ranks' GPUs)."""
    link = None
    if max(tp * pp, ep) > gpus_per_node:
        link = load_link(node_link, hw, hw)
    return Topology(gpus_per_node, link)


def allreduce_release(engine: str, version: str, hw: Hardware, measured: list[str]) -> str | None:
    """The measured family (`engine@release`, one of `measured`) whose all-reduce tables time
    the kernels `version` dispatches to on `hw`, or None where the kernel tables' own release
    serves (not vLLM, not a Hopper GPU, or no such family measured).

    vLLM from 0.11.0 on Hopper hands the sizes above the custom kernel's limit (256 KiB at
    TP 8, 8 MiB at TP 2-4) to torch symmetric memory (the module's note). AIConfigurator's
    vllm@0.14.0 tables do not show it: on the H100 they match its SGLang tables, timed with
    symmetric memory off (collect_all_reduce.py, setup_sglang_distributed), within 2% from
    128 KiB to 2 MiB at TP 8 (14.7 / 15.6 / 17.3 / 20.9 / 34.5 us against 15.0 / 15.8 / 17.3 /
    20.9 / 34.3), while its 0.18, 0.19 and 0.24 tables on both Hopper GPUs are 8-30% faster
    there (10.0-10.8 / 11.1-12.0 / 14.0-15.0 / 18.1-19.4 / 28.4-30.8 us); the H200's 0.14 TP 8
    rows at those sizes are 1.9-3.1x its own later ones. So a release with symmetric memory
    on takes the newest measured family from 0.18 not after it (else the oldest from 0.18),
    and one without it the newest measured family before 0.18 not after it (else the oldest)."""
    if engine != "vllm" or not hw.compute_capability.startswith("9."):
        return None
    v = release_key(version)
    symm = v >= SYMM_MEM_FROM
    keyed = ((release_key(f.split("@")[1]), f) for f in measured if f.startswith("vllm@"))
    mine = sorted((key, f) for key, f in keyed if (key >= SYMM_MEM_MEASURED_FROM) == symm)
    if not mine:
        return None
    earlier = [f for key, f in mine if key <= v]
    return earlier[-1] if earlier else mine[0][1]


def allreduce_s(pricer: KernelPricer, nbytes, gpus: int, topo: Topology) -> np.ndarray:
    """Seconds of an all-reduce of `nbytes` (each GPU's tensor) over `gpus` consecutive ranks:
    the measured table inside a server; across servers, hierarchical (the module's note)."""
    servers = topo.servers(gpus)
    if servers <= 1:
        return pricer.allreduce_s(nbytes, gpus)
    g = topo.gpus_per_node
    link = topo.node_link
    rate = link.bytes_per_s / (g if link.shared_by_gpus else 1)  # one GPU's share of its NIC
    chunk = np.asarray(nbytes, dtype=np.float64) / g / servers  # one transfer of a GPU's shard
    return pricer.allreduce_s(nbytes, g) + 2 * (servers - 1) * (link.latency_s + chunk / rate)


def stage_send_s(
    pricer: KernelPricer,
    tokens: int,
    hidden: int,
    tp: int,
    pp: int,
    topo: Topology,
    crossings: int | None = None,
) -> float:
    """Mean seconds of one activation send between consecutive stages (0 when pp = 1): the
    mean over the pp - 1 boundaries, so that (pp - 1) sends add up to the pipeline's total.
    `crossings`: topo.crossings(tp, pp), which a caller pricing every step works out once."""
    if pp <= 1:
        return 0.0
    nbytes = PP_TENSORS * tokens * hidden * ACT_BYTES
    across = topo.crossings(tp, pp) if crossings is None else crossings
    total = 0.0
    if across:
        link = topo.node_link
        per_gpu = nbytes * (tp if link.shared_by_gpus else 1)
        total += across * (link.latency_s + per_gpu / link.bytes_per_s)
    if across < pp - 1:
        total += (pp - 1 - across) * float(pricer.sendrecv_s(nbytes))
    return total / (pp - 1)


def logits_gather_s(
    pricer: KernelPricer, batch: int, vocab: int, tp: int, topo: Topology | None = None
) -> float:
    """Seconds to gather the step's logits (batch x vocab) over the TP group (0 when tp = 1)."""
    if tp <= 1 or batch <= 0:
        return 0.0
    return 0.5 * float(allreduce_s(pricer, batch * vocab * LOGIT_BYTES, tp, topo or Topology()))
