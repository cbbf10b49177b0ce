"""The physics audit: every figure a run priced, held against what the hardware can do.

It runs after the simulation, never inside it (sim/run/physics.py gives the least bytes and
FLOPs; this module compares them with the prices):

    steps     every step of the step log, vectorised (chunk by chunk when the steps stream):
              the HBM bytes and FLOPs it needs at the least (weights, touched experts, LM
              head) within its GPU time
    kernels   the cost model's prices at the run's own shapes, priced afresh: each token count
              of its steps (GEMMs, experts, all-reduces), each batch size (LM head), each
              decode batch (with or without a prefill beside it) and layer kind's decode
              attention on a grid of contexts up to its longest request, and prefill chunks on
              a grid of lengths and cached contexts; against their own bytes and FLOPs, and the
              all-reduces against the links they cross. A step's GPU time is a sum of these
              prices, so a step beats the GPU's peaks only where one of them does.
    memory    weights + activations + CUDA graphs + runtime + linear state + KV pool within
              the share of the GPU's memory the engine sizes against (and the whole GPU)

A ratio is what the price implies over the limit (bytes per second over the peak bandwidth,
FLOPs over the peak rate, bytes over the GPU's memory); above 1 + TOLERANCE is a violation.
summary.json's `audit` holds `checked_steps`, `violations` and the `worst` finding (the
highest ratio, a violation or not), with each check's own tally under `checks`
(sim/run/findings.py: the findings, merging several runs', strict mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.cost.comm import Topology
from sim.cost.step import CostModel
from sim.kv.memory import GIB, MemoryPlan
from sim.run.findings import TOLERANCE, Finding, Tally
from sim.run.physics import AttentionLayer, GpuShare, allreduce_floor_s
from sim.specs.hardware import Hardware
from sim.specs.model import Attention


@dataclass(slots=True)
class PhysicsAudit:
    """The audit of one pool of replicas (one Setup's cost model, memory plan and GPU)."""

    cost: CostModel
    memory: MemoryPlan
    hardware: Hardware
    label: str = ""  # "prefill pool: " in a disaggregated run
    tallies: dict[str, Tally] = field(default_factory=dict)
    steps_seen: int = 0  # steps checked before this chunk (their index in the run)
    # the run's shapes, gathered from its steps for check_prices: token counts, batch sizes,
    # (decodes, beside a prefill) pairs, the most prompt tokens of one step
    token_counts: set[int] = field(default_factory=set)
    batch_sizes: set[int] = field(default_factory=set)
    decode_batches: set[tuple[int, bool]] = field(default_factory=set)
    max_prefill: int = 0

    def tally(self, name: str) -> Tally:
        return self.tallies.setdefault(name, Tally())

    # ---- steps ---------------------------------------------------------------------------
    def check_steps(self, steps: pd.DataFrame) -> None:
        """Each step's least HBM bytes and FLOPs within its GPU time (a chunk of the log)."""
        offset, self.steps_seen = self.steps_seen, self.steps_seen + len(steps)
        self._gather_shapes(steps)
        tokens = (steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy(np.float64)
        rows = steps["batch_size"].to_numpy(np.float64)
        gpu_s = steps["gpu_s"].to_numpy(np.float64)
        busy = tokens > 0
        if not busy.any():
            return
        share, hw = self._share(), self.hardware
        tokens, rows, gpu_s = tokens[busy], rows[busy], gpu_s[busy]
        index = np.flatnonzero(busy) + offset
        replica = steps["replica"].to_numpy()[busy]
        nbytes = share.step_bytes(tokens, rows)
        flops_s = share.step_flops_s(tokens, rows)

        def step(i: int) -> str:
            return f"{self.label}step {index[i]:,} (replica {replica[i]}, {tokens[i]:,.0f} tokens)"

        self.tally("hbm_bandwidth").add(
            nbytes / hw.hbm_bytes_per_s / gpu_s,
            lambda i: Finding(
                "hbm_bandwidth", "a step's weights and touched experts", step(i),
                nbytes[i] / hw.hbm_bytes_per_s / gpu_s[i],
                f"at least {_gib(nbytes[i])} read in {_ms(gpu_s[i])} of GPU time: "
                f"{_rate(nbytes[i] / gpu_s[i])} against {hw.name}'s {_rate(hw.hbm_bytes_per_s)}",
            ),
        )  # fmt: skip
        self.tally("tensor_flops").add(
            flops_s / gpu_s,
            lambda i: Finding(
                "tensor_flops", "a step's GEMMs", step(i), flops_s[i] / gpu_s[i],
                f"at least {_ms(flops_s[i])} of tensor-core work at {hw.name}'s peaks in "
                f"{_ms(gpu_s[i])} of GPU time",
            ),
        )  # fmt: skip

    def _gather_shapes(self, steps: pd.DataFrame) -> None:
        prefill = steps["prefill_tokens"].to_numpy(np.int64)
        decode = steps["decode_tokens"].to_numpy(np.int64)
        tokens = prefill + decode
        self.token_counts.update(np.unique(tokens[tokens > 0]).tolist())
        rows = steps["batch_size"].to_numpy(np.int64)
        self.batch_sizes.update(np.unique(rows[rows > 0]).tolist())
        both = np.unique((2 * decode + (prefill > 0))[decode > 0])  # (decodes, mixed) as one int
        self.decode_batches.update((n // 2, bool(n % 2)) for n in both.tolist())
        if len(prefill):
            self.max_prefill = max(self.max_prefill, int(prefill.max()))

    def _share(self) -> GpuShare:
        c = self.cost
        return GpuShare.of(c.model, self.hardware, c.tp, c.ep, c.dense_dtype, c.expert_dtype)

    # ---- kernels -------------------------------------------------------------------------
    def check_prices(self, max_context: int) -> None:
        """The cost model's prices at the run's own shapes (its token counts, batch sizes and
        decode batches from the step log, contexts on a grid up to `max_context`, its longest
        request) against their least times. Priced afresh, not read from the process's shared
        price memos, which hold other runs' shapes too: the same run gives the same audit."""
        self._token_prices()
        self._attention_prices(max(int(max_context), 1))

    def _token_prices(self) -> None:
        c, hw, share = self.cost, self.hardware, self._share()
        if not self.token_counts:
            return
        t = np.array(sorted(self.token_counts), dtype=np.float64)
        linear, moe, _, allreduce = c._per_token_count(t.astype(np.int64))
        flops_s = t * share.dense_flops_per_token / share.dense_peak
        least = np.maximum(share.dense_bytes / hw.hbm_bytes_per_s, flops_s)
        tokens = _named(t, "tokens")
        self._priced("linear layers", linear, least, tokens)
        if share.local_experts:
            flops_s = t * share.expert_flops_per_token / share.expert_peak
            least = np.maximum(share.experts_read(t) / hw.hbm_bytes_per_s, flops_s)
            self._priced("routed experts", moe, least, tokens)
        if c.tp > 1:
            m = c.model
            least = 2 * m.num_layers * allreduce_floor_s(t * m.hidden_size * 2, c.tp,
                                                         c.topology, hw)  # fmt: skip
            self._priced("TP all-reduces", allreduce, least, tokens, _link(c.topology))
        b = np.array(sorted(self.batch_sizes), dtype=np.float64)
        lm_head = c.pricer.gemm_s(b, c.model.vocab_size / c.tp, c.model.hidden_size, "bf16")
        least = np.maximum(share.lm_head_bytes / hw.hbm_bytes_per_s,
                           b * share.lm_head_flops_per_row / share.bf16_peak)  # fmt: skip
        self._priced("LM head", lm_head, least, _named(b, "rows"))

    def _attention_prices(self, max_context: int) -> None:
        att, hw, pr = self.cost.attention, self.hardware, self.cost.pricer
        contexts = _grid(max_context)
        decodes = sorted(self.decode_batches)
        for index, (layer, _) in enumerate(att.layers):
            if layer.attention is Attention.LINEAR:
                continue
            shape = att.shapes[id(layer)]
            kind = AttentionLayer.of(att.model, layer, att.tp, att.kv_cache_dtype, hw,
                                     shape.density)  # fmt: skip
            least = kind.decode_s(contexts, hw)
            for mixed in (False, True):
                batches = [n for n, m in decodes if m == mixed]
                if layer.attention is Attention.MLA:  # one price per context, any batch
                    batches = batches[:1]
                for n in batches:
                    seconds = att._table(index, n, mixed).per_sequence(contexts)
                    what = f"decode attention ({_kind(kind)}, batch {n}" + (
                        ", beside a prefill)" if mixed else ")"
                    )
                    self._priced(what, seconds, least, _named(contexts, "context"))
            if layer.attention is Attention.MLA or not self.max_prefill:
                continue  # (MLA's prefill: the roofline prior, under its peaks by its efficiencies)
            q, c = (a.ravel() for a in np.meshgrid(_grid(self.max_prefill, 1), contexts))
            seconds = pr.prefill_s(q, c, 1.0, shape)
            least = kind.prefill_s(q, c, hw)
            self._priced(
                f"prefill attention ({_kind(kind)})",
                seconds,
                least,
                lambda i, q=q, c=c: f"{q[i]:,.0f} new tokens after {c[i]:,.0f}",
            )

    def _priced(self, what: str, seconds, least, where, link: str = "") -> None:
        """A kind of price against its least time, entry by entry (`where(i)`: entry i)."""
        seconds = np.asarray(seconds, dtype=np.float64)
        ratios = np.divide(least, seconds, out=np.full(len(seconds), np.inf), where=seconds > 0)
        check = "link_bandwidth" if link else "kernel_prices"
        on = f"on {self.hardware.name}" + (f" over {link}" if link else "")
        self.tally(check).add(ratios, lambda i: Finding(
            check, f"{self.label}{what}", where(i), ratios[i],
            f"priced {_ms(seconds[i])}, physics allows no less than {_ms(least[i])} {on}",
        ))  # fmt: skip

    # ---- memory --------------------------------------------------------------------------
    def check_memory(self, scheduler: str) -> None:
        """The memory plan within the share of the GPU the engine sizes against (vLLM: all of
        it within gpu_memory_utilization; SGLang: weights, runtime, state and KV pool within
        mem_fraction_static, activations and graphs beside them; TensorRT-LLM: a fraction of
        what is free, so the GPU itself), and within the GPU."""
        m = self.memory
        parts = {
            "weights": m.weight_bytes,
            "runtime": m.non_torch_bytes,
            "linear-attention state": m.linear_state_bytes,
            "KV pool": (m.num_blocks - 1) * m.bytes_per_block,  # the null block holds nothing
            "activations": m.activation_bytes,
            "CUDA graphs": m.cudagraph_bytes,
        }
        total = float(m.total_bytes)
        share = {"sglang": 4, "trtllm": 0}.get(scheduler, len(parts))  # parts in the share
        limits = [(total, "the GPU's memory", len(parts))]
        if share:
            frac = m.gpu_memory_utilization
            limits.append((total * frac, f"{frac:.3g} of it, the engine's share", share))
        for limit, name, count in limits:
            counted = dict(list(parts.items())[:count])
            used = float(sum(counted.values()))
            listed = ", ".join(f"{k} {_gib(v)}" for k, v in counted.items() if v)
            self.tally("memory").add(np.array([used / limit]), lambda i, u=used, lim=limit,
                                     n=name, what=listed: Finding(
                "memory", f"{self.label}memory plan", f"one GPU of {self.hardware.name}",
                u / lim, f"{_gib(u)} planned ({what}) within {n}, {_gib(lim)}",
            ))  # fmt: skip

    def check_transfers(self, columns: dict, pair) -> None:
        """Each KV transfer between a disaggregated run's pools within its link: the busiest
        GPU's share of the bytes at the link's rate, after its latency (sim/kv/transfer.py)."""
        nbytes = np.asarray(columns["kv_transfer_bytes"], dtype=np.float64)
        took = columns["transfer_end_s"] - columns["transfer_start_s"]
        sent = (nbytes > 0) & np.isfinite(took)
        if not sent.any():
            return
        nbytes, took = nbytes[sent], took[sent]
        link = pair.link
        busiest = nbytes if link.shared_by_gpus else nbytes / min(pair.prefill_tp, pair.decode_tp)
        least = link.latency_s + busiest / link.bytes_per_s
        ratios = np.divide(least, took, out=np.full(len(took), np.inf), where=took > 0)
        self.tally("link_bandwidth").add(ratios, lambda i: Finding(
            "link_bandwidth", f"KV transfer over {link.display_name}",
            f"request {np.flatnonzero(sent)[i]:,}", ratios[i],
            f"{_gib(nbytes[i])} in {_ms(took[i])}; the link needs at least {_ms(least[i])}",
        ))  # fmt: skip

    def finish(self, scheduler: str, max_context: int) -> None:
        """The checks that need the whole run: its prices (up to `max_context`, its longest
        request's tokens) and its memory plan."""
        self.check_prices(max_context)
        self.check_memory(scheduler)

    # ---- the record ----------------------------------------------------------------------
    @property
    def violations(self) -> int:
        return sum(t.violations for t in self.tallies.values())

    @property
    def worst(self) -> Finding | None:
        found = [t.worst for t in self.tallies.values() if t.worst is not None]
        return max(found, key=lambda f: f.ratio, default=None)


def longest_request(workload) -> int:
    """Tokens of the workload's longest request (prompt and output): the contexts the audit
    checks prices up to."""
    if not len(workload.prompt_len):
        return 1
    return int(np.max(np.asarray(workload.prompt_len) + np.asarray(workload.output_len)))


def audit_record(audits: list[PhysicsAudit]) -> dict:
    """summary.json's `audit` for a run's pools (one, or a disaggregated run's two)."""
    checks: dict[str, Tally] = {}
    for audit in audits:
        for name, tally in audit.tallies.items():
            merged = checks.setdefault(name, Tally())
            merged.checked += tally.checked
            merged.violations += tally.violations
            if tally.worst and (merged.worst is None or tally.worst.ratio > merged.worst.ratio):
                merged.worst = tally.worst
    worst = max((a.worst for a in audits if a.worst), key=lambda f: f.ratio, default=None)
    return {
        "checked_steps": sum(a.steps_seen for a in audits),
        "violations": sum(a.violations for a in audits),
        "worst": None if worst is None else worst.record(),
        "checks": {name: t.record() for name, t in sorted(checks.items())},
        "tolerance": TOLERANCE,
    }


def _named(values: np.ndarray, unit: str):
    """where(i) of prices by one number: "tokens 2,048"."""
    return lambda i: f"{unit} {values[i]:,.0f}"


GRID_POINTS = 48  # contexts (and prefill lengths) the prices are checked at, geometric


def _grid(top: int, low: int = 0) -> np.ndarray:
    """`low` (0: an empty cache) and GRID_POINTS integers up to `top`, geometric, distinct."""
    points = np.geomspace(1, max(top, 1), GRID_POINTS).round().astype(np.int64)
    return np.unique(np.concatenate([[low], points, [top]])).astype(np.int64)


def _kind(layer: AttentionLayer) -> str:
    window = f" {layer.window:,}" if layer.window else ""
    return f"{layer.attention.value}{window}"


def _link(topo: Topology) -> str:
    return topo.node_link.display_name if topo.node_link else "the GPUs' peer link"


def _gib(nbytes: float) -> str:
    gib = nbytes / GIB
    return f"{gib:,.0f} GiB" if gib >= 100 else f"{gib:.3g} GiB"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e12:.3g} TB/s"
