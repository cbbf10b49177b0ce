"""A step's time: every kernel of one forward pass priced by the KernelPricer, plus CPU time.

Per layer kind (identical layers are priced once and multiplied):

    GEMMs        QKV (or the MLA / linear-attention projections), O, dense MLP or shared
                 expert, router: one GEMM each at the step's token count
    MoE experts  the routed experts of the batch's tokens
    attention    per sequence: prefill chunks (q new tokens over c cached) and decodes (each
                 sequence's own KV read), plus one launch floor per step (sim/cost/attention.py)
    elementwise  fused add+norm twice, activation, rotary embedding
    all-reduce   twice per layer with TP > 1
plus the embedding, LM head and sampler once per step, the kernel launches CUDA graphs do not
hide (with GEMMs padded to the captured batch size), and the engine's CPU time:

    step = max(GPU, hidden CPU) + serial CPU + swap
with, per calibration/engine_overheads.yaml,
    async scheduling (V1 0.14+, SGLang and TensorRT-LLM overlap schedulers): all the engine's
        CPU work is hidden; only cpu_exposed_s stays serial;
    otherwise the engine loop (fixed + per sequence + prefix hashing) is serial, divided over
        the window with multi-step scheduling, and output processing is hidden when the release
        overlaps it (async_output_proc, a separate frontend process) and serial before 0.6.
Swapped KV (vLLM V0 preemption_mode=swap) crosses PCIe inside the step. With expert parallelism
(ep = tp) each GPU runs num_experts / ep whole experts instead of a 1/tp slice of every expert.
With pipeline parallelism a micro-batch occupies each of the pp stages for 1/pp of the GPU time
plus an activation send (over the server link where a stage boundary leaves a server). With
TP > 1 the LM head's logits are gathered over the TP group, and the engine loop pays the
executor's per-step cost of a multi-GPU replica (sim/cost/comm.py, engine_overheads.yaml).
Kernels are priced by the GPU's calibrated profile where one exists
(sim.cost.profiles), else by the roofline prior.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

import numpy as np

from sim.cost.attention import AttentionCost
from sim.cost.calibrated import DeploymentScales
from sim.cost.comm import Topology, allreduce_s, logits_gather_s, stage_send_s
from sim.cost.kernels import KernelPricer
from sim.cost.mxfp4 import marlin_floor_s, runs_marlin
from sim.cost.prior import CostProfile
from sim.cost.run_pricing import RunPricing
from sim.cost.speculative import verify_cost
from sim.engines.settings import EngineSettings
from sim.engines.sglang_03 import compiles_eager_steps, decode_ratios
from sim.kv.memory import kv_heads_per_gpu
from sim.schedulers.base import StepPlan
from sim.specs.model import Attention, Layer, ModelSpec
from sim.specs.model_config import load_model

ACT_BYTES = 2


@dataclass(slots=True)  # not frozen: built once per simulated step, and never changed
class StepCost:
    """Seconds per component of one step; `total_s` is what the clock advances by."""

    linear_s: float
    moe_s: float
    attention_prefill_s: float
    attention_decode_s: float
    elementwise_s: float
    allreduce_s: float
    lm_head_s: float
    launch_s: float
    cpu_serial_s: float  # CPU time on the critical path
    cpu_hidden_s: float  # CPU time overlapped with the GPU
    swap_s: float = 0.0  # KV swapped over PCIe (vLLM V0 swap preemption)
    p2p_s: float = 0.0  # one activation send between pipeline stages
    pp: int = 1
    draft_s: float = 0.0  # speculative decoding: the proposer's passes (sim/cost/speculative.py)

    @property
    def gpu_s(self) -> float:
        return (
            self.linear_s
            + self.moe_s
            + self.attention_prefill_s
            + self.attention_decode_s
            + self.elementwise_s
            + self.allreduce_s
            + self.lm_head_s
            + self.launch_s
            + self.draft_s
        )

    @property
    def cpu_s(self) -> float:
        return self.cpu_serial_s + self.cpu_hidden_s

    @property
    def total_s(self) -> float:
        """The step's latency without pipeline parallelism (what the clock advances by)."""
        return max(self.gpu_s, self.cpu_hidden_s) + self.cpu_serial_s + self.swap_s

    @property
    def stage_s(self) -> float:
        """How long the micro-batch holds the first pipeline stage (total_s when pp = 1)."""
        if self.pp == 1:
            return self.total_s
        return max(self.gpu_s / self.pp, self.cpu_hidden_s) + self.cpu_serial_s + self.p2p_s

    @property
    def latency_s(self) -> float:
        """From the micro-batch's start to its tokens (total_s when pp = 1)."""
        return self.total_s + (self.pp - 1) * self.p2p_s


@dataclass(frozen=True, slots=True)
class _LayerTerms:
    """What one layer kind runs, on one GPU, per token of the step."""

    layer: Layer
    count: int
    gemm_n: np.ndarray  # output width of each dense GEMM
    gemm_k: np.ndarray  # input width of each
    elementwise: tuple[tuple[str, float], ...]  # (kind, bytes per token)


class CostModel(RunPricing, DeploymentScales):
    def __init__(
        self,
        model: ModelSpec,
        settings: EngineSettings,
        tp: int,
        weight_dtype: str,
        pricer: KernelPricer,
        prior: CostProfile,
        pp: int = 1,
        ep: int = 1,
        topology: Topology | None = None,
        calibration: tuple[float, float, float] | None = None,
    ):
        self.model, self.settings, self.tp, self.pricer, self.prior = (
            model,
            settings,
            tp,
            pricer,
            prior,
        )
        self.pp, self.ep = pp, ep
        self.topology = topology or Topology()
        self.crossings = self.topology.crossings(tp, pp)  # stage boundaries leaving a server
        # the executor's per-step cost of the replica (resolved for its tp x pp GPUs)
        self.executor_s = settings.cpu_executor_s
        # a calibrated deployment's (decode scale, prefill scale, serial CPU s per step)
        # (sim/run/calibration.py); None: the uncalibrated sums, bit for bit
        self.calibration = calibration
        self.decode_scale, self.prefill_scale, self.cpu_step_s = calibration or (1.0, 1.0, 0.0)
        dtype = model.resolve_weight_dtype(weight_dtype)
        experts_only = dtype == model.checkpoint_dtype and model.quantized_experts_only
        self.dense_dtype = _gemm_dtype("bf16" if experts_only else dtype)
        self.expert_dtype = _gemm_dtype(dtype)
        # vLLM's Marlin MXFP4 experts: at least their FLOPs at Marlin's rate (sim/cost/mxfp4.py)
        self.marlin_moe = runs_marlin(
            settings.engine, settings.version, pricer.hardware, self.expert_dtype
        )
        self.kv_dtype = "fp8" if settings.kv_cache_dtype == "fp8" else "bf16"
        self.heads = model.num_q_heads // tp
        self.kv_heads = kv_heads_per_gpu(model, tp)
        self.capture_sizes = list(settings.cudagraph_capture_sizes)
        # {padded batch: factor} on a decode-only step's GPU time (SGLang's torch.compile)
        self.compiled_decode = decode_ratios(settings)
        self.terms = [self._terms(layer, count) for layer, count in model.layer_groups.items()]
        self.attention = AttentionCost(
            model,
            pricer,
            [(t.layer, t.count) for t in self.terms],
            tp,
            settings.kv_cache_dtype,
            settings.attention_backend,
        )
        self.shapes = self.attention.shapes
        # by token count, and by batch size: shared with every cost model of this process that
        # prices the same model alike (a sweep's points in one worker, upgrade_diff's runs)
        self._memo, self._lm_head, self._page_floors = _token_memos(
            pricer, model, tp, ep, self.dense_dtype,
            self.expert_dtype + ("+marlin" if self.marlin_moe else ""), self.topology,
        )  # fmt: skip
        self._priced_once = False
        self._decode_base: dict[int, StepCost] = {}  # see decode_run
        self._decode_floor: dict[int, float] = {}  # see decode_floor_s
        self._step_parts: dict[tuple, tuple] = {}  # see step_times
        self.draft_model = None  # speculative_method=draft_model: the draft's CostModel
        if settings.speculative_method == "draft_model":
            draft = load_model(settings.speculative_model)
            self.draft_model = CostModel(draft, replace(settings, speculative_method="none"),
                                         tp, weight_dtype, pricer, prior)  # fmt: skip

    def _terms(self, layer: Layer, count: int) -> _LayerTerms:
        m, tp, h = self.model, self.tp, self.model.hidden_size
        q_width = self.heads * m.head_dim
        shapes: list[tuple[float, float]] = []
        if layer.attention is Attention.MLA:
            a = m.mla
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            if a.q_lora_rank:
                shapes += [(a.q_lora_rank, h), (self.heads * qk, a.q_lora_rank)]
            else:
                shapes.append((self.heads * qk, h))
            shapes += [
                (a.latent_dim, h),
                (self.heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
                (h, self.heads * a.v_head_dim),
            ]
        elif layer.attention is Attention.LINEAR:
            lin = m.linear
            width = 2 * lin.num_key_heads * lin.key_head_dim + 2 * lin.num_value_heads * (
                lin.value_head_dim + 1
            )
            shapes += [(width / tp, h), (h, lin.num_value_heads * lin.value_head_dim / tp)]
        else:
            q_out = q_width * (2 if m.gated_attention_output else 1)
            shapes += [(q_out + 2 * self.kv_heads * m.head_dim, h), (h, q_width)]
        if layer.moe:
            e = m.moe
            if e.shared_intermediate_size:
                shapes += [
                    (2 * e.shared_intermediate_size / tp, h),
                    (h, e.shared_intermediate_size / tp),
                ]
            shapes.append((e.num_experts, h))  # router
            act_width = (
                e.experts_per_token * e.expert_intermediate_size + e.shared_intermediate_size
            ) / tp
        else:
            shapes += [(2 * m.intermediate_size / tp, h), (h, m.intermediate_size / tp)]
            act_width = m.intermediate_size / tp
        rope = (self.heads + self.kv_heads) * m.head_dim * 2 * ACT_BYTES
        elementwise = (
            ("norm", 2 * 4 * h * ACT_BYTES),
            ("act", 3 * act_width * ACT_BYTES),
            ("rope", rope if layer.attention is not Attention.LINEAR else 0.0),
        )
        n, k = (np.array(v, dtype=np.float64) for v in zip(*shapes, strict=True))
        return _LayerTerms(layer, count, n, k, elementwise)

    # ---- per-step pieces -------------------------------------------------------------------
    def _launch_s(self, num_tokens: int, decode_only: bool) -> tuple[float, int]:
        """(launch seconds, token count GEMMs run at after CUDA-graph padding)."""
        s, p = self.settings, self.prior
        layers = self.model.num_layers
        mode = s.cudagraph_mode
        if (
            mode != "NONE"
            and self.capture_sizes
            and num_tokens <= self.capture_sizes[-1]
            and (decode_only or mode != "FULL_DECODE_ONLY")
        ):
            padded = self.capture_sizes[bisect.bisect_left(self.capture_sizes, num_tokens)]
            if decode_only and mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
                return 0.0, padded
            return layers * p.piecewise_eager_kernels_per_layer * p.kernel_launch_s, padded
        compiled = compiles_eager_steps(s)  # (SGLang compiles its decode graphs only)
        per_layer = p.compiled_kernels_per_layer if compiled else p.eager_kernels_per_layer
        return layers * per_layer * p.kernel_launch_s, num_tokens

    def step_cost(self, plan: StepPlan) -> StepCost:
        if plan.spec_drafts:  # speculative decoding's verify pass
            cost = verify_cost(self, plan)
        elif plan.split is not None:  # batch_cost's split, made by vLLM V1's lane
            cost = self.cost(*plan.split, cpu_batch=plan.batch_size)
        else:
            cost = self.batch_cost(
                plan.num_new_tokens, plan.num_context_tokens, plan.batch_size, plan.padding_context
            )
        if plan.swap_bytes or plan.load_s:  # KV over PCIe: swapped, or loaded from offload
            swap_s = plan.swap_bytes / self.pricer.hardware.pcie_bytes_per_s + plan.load_s
            return replace(cost, swap_s=swap_s)
        return cost

    def batch_cost(self, new_tokens, contexts, cpu_batch: int, padding=()) -> StepCost:
        """Cost of a step that computes new_tokens[i] tokens after contexts[i] for each of its
        sequences (a single token is a decode) plus `padding` decode rows (static batching:
        finished rows still run)."""
        dec_c = [c for q, c in zip(new_tokens, contexts, strict=True) if q == 1]
        if len(dec_c) == len(contexts):
            pre_q, pre_c = [], []
        else:
            pre_q = [q for q in new_tokens if q != 1]
            pre_c = [c for q, c in zip(new_tokens, contexts, strict=True) if q != 1]
        dec_c.extend(padding)
        return self.cost(pre_q, pre_c, dec_c, cpu_batch=cpu_batch)

    def cpu_s(self, batch: int, prefill_tokens: int) -> tuple[float, float]:
        """(serial, hidden) CPU seconds of a step with `batch` sequences (the serial part with a
        calibrated deployment's host time per step, sim/run/calibration.py; else + 0.0)."""
        s = self.settings
        engine = s.cpu_step_overhead_s + s.cpu_per_seq_overhead_s * batch + self.executor_s
        if s.enable_prefix_caching:
            engine += s.prefix_hash_s_per_token * prefill_tokens
        output = s.cpu_output_per_seq_s * batch
        if s.async_scheduling:
            serial, hidden = s.cpu_exposed_s, engine + output
        else:
            if s.num_scheduler_steps > 1 and prefill_tokens == 0:
                engine /= s.num_scheduler_steps  # one schedule per multi-step window
            serial, hidden = (engine, output) if s.async_output_proc else (engine + output, 0.0)
        return serial + self.cpu_step_s, hidden

    def _token_costs(self, t: int, batch: int) -> tuple[float, float, float, float, float]:
        """(GEMMs, MoE, elementwise, LM head + sampler, all-reduce) seconds of a step that runs
        t tokens for `batch` sequences: the LM head depends on the batch alone, the rest on t
        alone, so both are memoised (the token counts a page at a time, _price_token_page)."""
        if not self._priced_once:  # this pricer's own record of the tables it priced with
            # (summary priced_with), in the order a fresh memo would have made it
            self._priced_once = True
            self._price_token_page(t)
            self._lm_head[batch] = self.lm_head_s(batch)
        costs = self._memo.get(t)
        if costs is None:
            self._price_token_page(t)
            costs = self._memo[t]
        linear, moe, elementwise, allreduce = costs
        lm_head = self._lm_head.get(batch)
        if lm_head is None:
            lm_head = self._lm_head[batch] = self.lm_head_s(batch)
        return linear, moe, elementwise, lm_head, allreduce

    def _price_token_page(self, t: int) -> None:
        """Memoise the TOKEN_PAGE token counts around t, priced in one call (a page costs
        little more than one count; _per_token_count's operations are elementwise, so every
        count gets the same bits as alone: tests/test_cost_tables.py checks count by count),
        each component held at its most over the counts below it: a step of more tokens is
        never cheaper. The fitted surfaces follow their measured tables' kernel choices and
        noise (vLLM 0.14's H100 table times a 16,384 x 4,096 GEMM at 51.8 us for m = 2 and
        46.4 us for m = 4), which would otherwise give a longer prompt a shorter TTFT. The
        pages below are priced first, once."""
        lo = t - t % TOKEN_PAGE
        below = self._floor_below(lo)
        counts = np.arange(max(lo, min(t, 1)), lo + TOKEN_PAGE, dtype=np.int64)  # 0 if asked
        held = [
            np.maximum.accumulate(np.maximum(raw, floor))
            for raw, floor in zip(self._per_token_count(counts), below, strict=True)
        ]
        self._page_floors[lo + TOKEN_PAGE] = tuple(float(c[-1]) for c in held)
        columns = zip(*(c.tolist() for c in held), strict=True)
        self._memo.update(zip(counts.tolist(), columns, strict=True))

    def _floor_below(self, lo: int) -> tuple[float, ...]:
        """Each component's most over the token counts below `lo` (a page start), pricing the
        pages below that are not yet priced, lowest first."""
        if lo == 0:
            return (0.0, 0.0, 0.0, 0.0)
        if lo not in self._page_floors:
            start = max((k for k in self._page_floors if k < lo), default=0)
            for page in range(start, lo, TOKEN_PAGE):
                self._price_token_page(max(page, 1))  # (count 0 only where asked)
        return self._page_floors[lo]

    def lm_head_s(self, batch: int) -> float:
        vocab, h = self.model.vocab_size, self.model.hidden_size
        lm_head = (
            float(self.pricer.gemm_s(batch, vocab / self.tp, h, "bf16").sum()) if batch else 0.0
        )
        # the vocabulary is split over TP
        lm_head += logits_gather_s(self.pricer, batch, vocab, self.tp, self.topology)
        return lm_head + float(self.pricer.elementwise_s(max(batch, 1) * vocab * 4 * 3, "sampler"))

    def _per_token_count(self, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """(GEMMs, MoE, elementwise, all-reduce) seconds of a step of t tokens, for each count
        of the int64 array t: the sums of pricing one count alone, in the same order."""
        m, pr, tp, h = self.model, self.pricer, self.tp, self.model.hidden_size
        zeros = np.zeros(len(t))
        linear, moe, elementwise = zeros, zeros, zeros
        for term in self.terms:
            g = len(term.gemm_n)  # the term's GEMMs, side by side for every count
            gemms = pr.gemm_s(
                np.repeat(t, g), np.tile(term.gemm_n, len(t)), np.tile(term.gemm_k, len(t)),
                self.dense_dtype,
            )  # fmt: skip
            linear = linear + term.count * gemms.reshape(len(t), g).sum(axis=1)
            if term.layer.moe:
                e = m.moe
                if self.ep > tp:  # experts over every data-parallel rank's GPUs: ranks in
                    # lockstep and evenly loaded, each GPU's num_experts / ep experts see this
                    # rank's share, 1/tp, of every rank's tokens
                    args = (t / tp, h, e.expert_intermediate_size, e.num_experts / self.ep)
                elif self.ep > 1:  # whole experts, num_experts / ep of them, 1/ep of the tokens
                    args = (t / self.ep, h, e.expert_intermediate_size, e.num_experts / self.ep)
                else:  # a 1/tp slice of every expert
                    args = (t, h, e.expert_intermediate_size / tp, e.num_experts)
                tokens, hidden, inter, experts = args
                experts_s = pr.moe_s(
                    tokens, hidden, inter, e.experts_per_token, experts, self.expert_dtype,
                    max(self.ep, 1),
                )  # fmt: skip
                if self.marlin_moe:
                    floor = marlin_floor_s(pr.hardware, tokens, hidden, inter, e.experts_per_token)
                    experts_s = np.maximum(experts_s, floor)
                moe = moe + term.count * experts_s
            for kind, per_token in term.elementwise:
                if per_token:
                    elementwise = elementwise + term.count * pr.elementwise_s(t * per_token, kind)
        elementwise = elementwise + pr.elementwise_s(t * 2 * h * ACT_BYTES, "embedding")
        allreduce = zeros
        if tp > 1:
            allreduce = 2 * m.num_layers * allreduce_s(pr, t * h * ACT_BYTES, tp, self.topology)
        if self.ep > tp:  # dispatch and combine: all-gather and reduce-scatter of every rank's
            # hidden states, the traffic of one all-reduce of them, per MoE layer
            moe_layers = sum(term.count for term in self.terms if term.layer.moe)
            ranks = self.ep // tp
            dispatch = allreduce_s(pr, t * ranks * h * ACT_BYTES, self.ep, self.topology)
            allreduce = allreduce + moe_layers * dispatch
        return linear, moe, elementwise, allreduce

    def cost(
        self, pre_q, pre_c, dec_c, cpu_batch: int | None = None, extra_tokens: int = 0
    ) -> StepCost:
        """Cost of a batch: prefill chunks (q new tokens over c cached) and decodes (c cached),
        each a list or int array; the CPU time counts `cpu_batch` sequences (default: all);
        `extra_tokens` more tokens through the linear layers (drafts verified by decodes)."""
        pre_q, pre_c = (
            x.tolist() if isinstance(x, np.ndarray) else list(x) for x in (pre_q, pre_c)
        )
        if not isinstance(dec_c, np.ndarray):  # (an int array is summed through numpy)
            dec_c = list(dec_c)
        batch = len(pre_q) + len(dec_c)
        prefill_tokens = sum(pre_q)
        launch, t = self._launch_s(
            prefill_tokens + len(dec_c) + extra_tokens, decode_only=not pre_q
        )
        linear, moe, elementwise, lm_head, allreduce = self._token_costs(t, batch)
        prefill = self.attention.prefill(pre_q, pre_c) if pre_q else 0.0
        decode = self.attention.decode_one(dec_c, bool(pre_q))
        r = self.compiled_decode.get(t, 1.0) if not pre_q and not extra_tokens else 1.0
        if r != 1.0:  # a compiled decode graph: every GPU part alike (see decode_ratio)
            linear, moe, elementwise, lm_head = linear * r, moe * r, elementwise * r, lm_head * r
            allreduce, launch, decode = allreduce * r, launch * r, decode * r
        if self.calibration:
            parts = (linear, moe, elementwise, lm_head, allreduce, launch)
            linear, moe, elementwise, lm_head, allreduce, launch = self.calibrated(
                parts, bool(pre_q), len(dec_c), batch
            )
            prefill, decode = prefill * self.prefill_scale, decode * self.decode_scale
        serial, hidden = self.cpu_s(batch if cpu_batch is None else cpu_batch, prefill_tokens)
        p2p = stage_send_s(
            self.pricer, t, self.model.hidden_size, self.tp, self.pp, self.topology, self.crossings
        )
        return StepCost(
            linear_s=linear,
            moe_s=moe,
            attention_prefill_s=prefill,
            attention_decode_s=decode,
            elementwise_s=elementwise,
            allreduce_s=allreduce,
            lm_head_s=lm_head,
            launch_s=launch,
            cpu_serial_s=serial,
            cpu_hidden_s=hidden,
            p2p_s=p2p,
            pp=self.pp,
        )

    def step_time_s(self, plan: StepPlan) -> float:
        return self.step_cost(plan).total_s

    def decode_ratio(self, batch: int) -> float:
        """The factor cost() applies to every GPU part of a decode-only step of `batch`
        sequences (SGLang's compiled decode graphs, sim/engines/sglang_03.py; 1.0 otherwise):
        what the fast-forward's pricing (sim/cost/run_pricing.py) applies to the attention it
        adds apart, so that a run's steps keep cost()'s bits."""
        if not self.compiled_decode:
            return 1.0
        return self.compiled_decode.get(self._launch_s(batch, decode_only=True)[1], 1.0)


TOKEN_PAGE = 256  # token counts priced together (_price_token_page)
# _per_token_count and lm_head_s depend on the pricer (its fingerprint), the model, tp, ep, the
# weight formats and the topology alone: cost models that share them share the memos (no bit
# changes)
TOKEN_MEMOS_MAX = 64  # kept; beyond, the oldest are forgotten (not a live cost model's own)
_TOKEN_MEMOS: dict[tuple, tuple[dict, dict, dict]] = {}


def _token_memos(pricer, model: ModelSpec, tp: int, ep: int, dense: str, expert: str, topo):
    """The per-token-count and per-batch memos of a cost model, with the token pages' floors
    (shared when the pricer has a fingerprint; fresh otherwise)."""
    if pricer.fingerprint is None:
        return {}, {}, {}
    key = (pricer.fingerprint, model, tp, ep, dense, expert, topo)
    memos = _TOKEN_MEMOS.get(key)
    if memos is None:
        if len(_TOKEN_MEMOS) >= TOKEN_MEMOS_MAX:
            del _TOKEN_MEMOS[next(iter(_TOKEN_MEMOS))]
        memos = _TOKEN_MEMOS[key] = ({}, {}, {})
    return memos


def _gemm_dtype(dtype: str) -> str:
    """The GEMM table a weight format is priced from (fp16 runs like bf16)."""
    return "bf16" if dtype in ("bf16", "fp16") else dtype
