"""Engine releases resolved: a version's defaults plus the rules that derive settings from GPU
and model.

`resolve()` turns (engine spec, hardware, model, TP, entry point, user overrides) into one
EngineSettings, recording for each setting the rule that set it. Each engine family has a
module with its releases and rules (sim/engines/vllm.py, sim/engines/sglang.py,
sim/engines/trtllm.py, sim/engines/teaching.py); this one parses specs, applies the user's
engine_args (by the engine's own names), derives what depends on them, and refuses what the
real engine refuses at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sim.engines import features, multistep, sglang, speculative, teaching, trtllm, vllm
from sim.engines.overheads import executor_s
from sim.engines.published import known_release
from sim.engines.settings import INVERTED, SETTING_NAMES, SETTING_TYPES, EngineSettings
from sim.engines.versions import version_tuple
from sim.engines.windows import window_rule
from sim.errors import UserError
from sim.specs.hardware import Hardware
from sim.specs.model import KV_DTYPES, ModelSpec
from sim.specs.model_config import model_names
from sim.specs.names import did_you_mean

GIB = 2**30


class Family(Protocol):
    """What resolve() asks of an engine family's module (sim/engines/vllm.py, sglang.py,
    trtllm.py, teaching.py); each also has capture_sizes and attention_backend, which _derive
    calls with the family's own arguments."""

    def releases(self, engine: str) -> tuple[str, ...]:
        """The releases whose rules are known, oldest first."""

    def unsupported_model(self, version: str, model: ModelSpec) -> str | None:
        """Why `version` cannot serve `model` (None: it can)."""

    def defaults(self, engine, release, hw, model, tp, entry_point, overrides) -> tuple:
        """(values, rules, applicable knobs, the engine's own names) before user arguments."""

    def after_memory(self, settings: EngineSettings, pool_tokens: int) -> EngineSettings:
        """Limits the engine sizes from its KV pool at start-up."""


ENGINES: dict[str, Family] = {
    "vllm": vllm,
    "sglang": sglang,
    "trtllm": trtllm,
    "orca": teaching,
    "static": teaching,
}
ENTRY_POINTS = ("server", "offline")
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
CUDAGRAPH_MODES = ("NONE", "FULL_DECODE_ONLY", "PIECEWISE", "FULL_AND_PIECEWISE")
POLICIES = {
    "vllm_v0": ("fcfs", "priority"),
    "vllm_v1": ("fcfs", "priority"),
    "sglang": ("fcfs", "lpm"),
    "trtllm": ("fcfs",),
    "orca": ("fcfs",),
    "static": ("fcfs",),
}
NON_TORCH_BYTES = int(0.5 * GIB)  # estimate: CUDA context and library workspaces, one GPU
NCCL_BYTES = int(0.4 * GIB)  # estimate: NCCL and custom all-reduce buffers with TP > 1
CUDAGRAPH_BYTES = {
    "NONE": 0,
    "FULL_DECODE_ONLY": int(0.25 * GIB),
    "PIECEWISE": int(0.5 * GIB),
    "FULL_AND_PIECEWISE": int(1.0 * GIB),
}  # estimates of the captured pools

# Engine arguments accepted as engine_args.NAME, beside every knob name: the engines' own names.
ENGINE_ARGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "long_prefill_token_threshold",
    "gpu_memory_utilization",
    "block_size",
    "kv_cache_dtype",
    "enforce_eager",
    "async_scheduling",
    "cudagraph_mode",
    "max_cudagraph_capture_size",
    "attention_backend",
    "scheduler_reserve_full_isl",
    "preemption_mode",
    "swap_space",
    "num_scheduler_steps",
    "scheduling_policy",
    "disable_async_output_proc",
    "num_gpu_blocks_override",
    # SGLang
    "chunked_prefill_size",
    "max_running_requests",
    "max_prefill_tokens",
    "mem_fraction_static",
    "page_size",
    "schedule_policy",
    "schedule_conservativeness",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "cuda_graph_max_bs",
    # TensorRT-LLM
    "max_batch_size",
    "max_num_tokens",
    "capacity_scheduler_policy",
    "free_gpu_memory_fraction",
    "tokens_per_block",
    "disable_overlap_scheduler",
)
SPECIAL = {
    "enforce_eager",
    "disable_cuda_graph",  # SGLang's name for it
    "max_cudagraph_capture_size",
    "cuda_graph_max_bs",
    "swap_space",
    "schedule_conservativeness",
    "spec_acceptance",
}
ONLY = {"disable_cuda_graph": "sglang"}  # special keys of one family alone


def parse_engine_spec(spec: str) -> tuple[str, str, str]:
    """`vllm@0.9.2` -> ("vllm", "0.9.2", rule set "0.9.2"); `vllm@0.9.0.1` -> rule set "0.9.0";
    a bare name means its newest rule set. Only releases the catalogue knows are taken: the
    published ones in the range of its rule sets (sim/engines/published.py), spelt as
    published (`trtllm@1.0` -> "1.0.0")."""
    name, _, version = str(spec).partition("@")
    name = name.strip().lower()
    if name not in ENGINES:
        raise UserError(
            f"engine={spec!r}: unknown engine {name!r}{did_you_mean(name, list(ENGINES))}; known: "
            f"{', '.join(ENGINES)} (as name@version, e.g. vllm@0.8.5)"
        )
    releases = ENGINES[name].releases(name)
    version, rule_set = known_release(spec, name, version.strip() or releases[-1], releases)
    return name, version, rule_set


def stand_in(spec: str) -> str | None:
    """What a run of `spec` says when the release has no rule set of its own: whose rules
    stand in for it (None when it has its own, or is a bare name)."""
    name, version, rule_set = parse_engine_spec(spec)
    if rule_set == version:
        return None
    return (
        f"{name}@{version} runs with the rules of {name} {rule_set}, the nearest earlier "
        "release the catalogue has rules for"
    )


def resolve(
    spec: str,
    hardware: Hardware,
    model: ModelSpec,
    tp: int,
    entry_point: str = "server",
    overrides: Mapping[str, object] | None = None,
    workers: int | None = None,
) -> EngineSettings:
    """`workers`: the replica's GPUs, tp x pp (default tp), for the executor's cost."""
    name, version, rule_set = parse_engine_spec(spec)
    if entry_point not in ENTRY_POINTS:
        raise UserError(f"entry_point={entry_point!r}: choose one of {', '.join(ENTRY_POINTS)}")
    module = ENGINES[name]
    why_not = module.unsupported_model(version, model)
    if why_not:
        raise UserError(why_not)
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    values, rules, applicable, names = module.defaults(
        name, rule_set, hardware, model, tp, entry_point, overrides
    )
    more = speculative.defaults(name, rule_set, model) | features.offload_defaults()
    more |= features.transfer_defaults()
    more |= _release_internals(name, version, values["scheduler"], model, workers or tp)
    for knob, (value, why) in more.items():
        values.setdefault(knob, value)
        rules.setdefault(knob, why)
    if name == "vllm":
        applicable = (
            *applicable,
            *speculative.KNOBS,
            *features.OFFLOAD_KNOBS,
            *features.TRANSFER_KNOBS,
        )
    by_name = {names.get(k, k): k for k in SETTING_NAMES} | {k: k for k in SETTING_NAMES}
    read = set(getattr(module, "BENCH_ARGS", ())) if entry_point == "offline" else set()
    for key, value in overrides.items():
        if key in read:  # the family's defaults() took it (trtllm-bench's dataset lengths)
            continue
        if key in SPECIAL and ONLY.get(key, name) == name:
            _special(name, rule_set, key, value, values, rules)
        elif key in by_name and (by_name[key] in applicable or key in SETTING_NAMES):
            knob = by_name[key]
            value = _coerce(key, value, SETTING_TYPES[knob])
            values[knob] = (not value) if key in INVERTED else value
            rules[knob] = f"user override (engine_args.{key})"
        else:
            mine = sorted(names.get(k, k) for k in applicable)
            raise UserError(
                f"engine_args.{key} is not a {name} argument; {name}'s: {', '.join(mine)}"
            )
    speculative.complete(values, rules, overrides)
    _derive(name, rule_set, values, rules, overrides, hardware, model, tp)
    if rule_set != version:
        for knob in rules:
            rules[knob] = rules[knob].replace(
                f"{name} {rule_set}", f"{name} {version} (rules of {rule_set})", 1
            )
    settings = EngineSettings(
        engine=name,
        version=version,
        rule_set=rule_set,
        entry_point=entry_point,
        rules=rules,
        applicable=applicable,
        names=names,
        **values,
    )
    _check(settings, model, tp)
    return settings


# What a release does by its own version rather than by an argument, as settings of their own:
# an upgrade study that diffs settings must see them change (sim/scenarios/upgrade_diff). Not
# among an engine's `applicable` settings (show_engine's table, summary.json's
# engine_settings): they are the release's, not arguments.
INTERNALS = ("cpu_executor_s", "sampler_bytes_per_logit", "windows_bounded", "multi_step_streams")


def _release_internals(engine: str, version: str, scheduler: str, model: ModelSpec, workers: int):
    """{knob: (value, rule)} of INTERNALS for `engine`@`version`."""
    at = f"{engine} {version}"
    executor = executor_s(engine, version, workers, scheduler)  # a V0 fallback: V0's line
    gpus = f"a replica of {workers} GPUs" if workers > 1 else "one GPU: none"
    windows = window_rule(engine, version, scheduler, model)
    executor_rule = f"{at}: the executor's cost per step, {gpus} (engine_overheads.yaml)"
    out = {
        "cpu_executor_s": (executor, executor_rule),
        "windows_bounded": (windows.bounded, windows.why or "no windowed layers"),
        "sampler_bytes_per_logit": (0, f"not a {engine} setting (its memory plan's prior)"),
        "multi_step_streams": (True, f"{at}: tokens reach the client step by step"),
    }
    if engine == "vllm":
        v1 = scheduler != "vllm_v0"
        per_logit = vllm.profile_sampler_bytes_per_logit(version, v1)
        out["sampler_bytes_per_logit"] = (per_logit, f"{at}: the profile run's sampler holds "
                                          f"{per_logit} bytes per logit at its peak")  # fmt: skip
        if not v1:
            streams = version_tuple(version) >= vllm.STREAM_EACH_STEP_FROM
            out["multi_step_streams"] = (streams, f"{at}: multi-step outputs " + (
                "stream each step (multi_step_stream_outputs, PR #8335)" if streams
                else "reach the client at the window's end (before 0.6.2)"))  # fmt: skip
    return out


def _special(engine: str, rule_set: str, key: str, value, values: dict, rules: dict) -> None:
    rule = f"user override (engine_args.{key})"
    match key:
        case "enforce_eager" | "disable_cuda_graph":
            if _coerce(key, value, bool):
                values["cudagraph_mode"], values["compile"] = "NONE", False
                rules["cudagraph_mode"] = rules["compile"] = rule
                if engine == "vllm" and values.get("scheduler") == "vllm_v0":
                    # V0 on CUDA: "enforce-eager is enabled, async output processor cannot be
                    # used" (ModelConfig.verify_async_output_proc, config.py, 0.6.0-0.10.x)
                    values["async_output_proc"] = False
                    rules["async_output_proc"] = f"{rule}: V0 turns async output off when eager"
        case "max_cudagraph_capture_size" | "cuda_graph_max_bs":
            values["max_capture"] = _coerce(key, value, int)
            rules["cudagraph_capture_sizes"] = rule
        case "swap_space":  # GiB, as the engine takes it
            values["swap_space_bytes"] = int(_coerce(key, value, float) * GIB)
            rules["swap_space_bytes"] = rule
        case "spec_acceptance":
            values["spec_acceptance"] = speculative.parse_acceptance(key, value)
            rules["spec_acceptance"] = rule
        case "schedule_conservativeness":  # SGLang: scales the admission ratios, by release
            c = _coerce(key, value, float)
            if c <= 0:
                raise UserError(f"engine_args.{key}={value!r}: must be > 0")
            init, low, decay = sglang.token_ratios(rule_set, c)
            values["new_token_ratio"], values["min_new_token_ratio"] = init, low
            values["new_token_ratio_decay"] = decay
            for knob in ("new_token_ratio", "min_new_token_ratio", "new_token_ratio_decay"):
                rules[knob] = rule


def _derive(engine, rule_set, values, rules, overrides, hw, model, tp) -> None:
    """Settings the engine derives from the others once the user's arguments are in."""
    at = f"{engine} {rule_set}"
    kv = str(values["kv_cache_dtype"])
    values["kv_cache_dtype"] = "fp8" if kv.startswith("fp8") else kv
    if values["kv_cache_dtype"] not in KV_DTYPES:
        raise UserError(
            f"kv_cache_dtype={kv!r}: choose one of {', '.join(KV_DTYPES)}, fp8_e4m3, fp8_e5m2"
        )
    v1 = values["scheduler"] != "vllm_v0"
    if "attention_backend" not in overrides:
        backend, _, why = attention_backend(
            engine, rule_set, hw, model, values["kv_cache_dtype"], v1
        )
        values["attention_backend"], rules["attention_backend"] = backend, why
    mode = values["cudagraph_mode"] = str(values["cudagraph_mode"]).upper()
    if mode not in CUDAGRAPH_MODES:
        raise UserError(f"cudagraph_mode={mode!r}: choose one of {', '.join(CUDAGRAPH_MODES)}")
    max_capture = values.pop("max_capture", None)
    graph_max_bs = values.pop("graph_max_bs", None)
    if "cudagraph_capture_sizes" not in overrides:
        if mode == "NONE":
            sizes, why = (), "no CUDA graphs"
        elif max_capture is not None:
            sizes = tuple(s for s in (1, 2, 4, *range(8, max_capture + 1, 8)) if s <= max_capture)
            why = f"1, 2, 4, 8..{max_capture} step 8"
        elif engine == "vllm":
            sizes, why = vllm.capture_sizes(
                version_tuple(rule_set),
                v1,
                values["max_num_seqs"],
                values["max_num_batched_tokens"],
                hw.compute_capability.startswith("10"),
            )
        elif engine == "sglang":
            sizes, why = sglang.capture_sizes(rule_set, graph_max_bs)
        else:
            sizes, why = ENGINES[engine].capture_sizes(rule_set, graph_max_bs)
        values["cudagraph_capture_sizes"] = sizes
        rules.setdefault("cudagraph_capture_sizes", f"{at}: {why}")
    if "cudagraph_memory_bytes" not in overrides:
        subtracted = engine != "vllm" or vllm.graph_memory_subtracted(rule_set)
        values["cudagraph_memory_bytes"] = CUDAGRAPH_BYTES[mode] if subtracted else 0
        rules["cudagraph_memory_bytes"] = (
            f"{at}: the {mode} graph pool is reserved before KV sizing (size: estimate)"
            if subtracted
            else f"{at}: graph memory comes out of the unused share, not the KV"
        )
    if "non_torch_memory_bytes" not in overrides:
        values["non_torch_memory_bytes"] = NON_TORCH_BYTES + (NCCL_BYTES if tp > 1 else 0)
        rules["non_torch_memory_bytes"] = "estimate: CUDA context and workspaces" + (
            ", plus NCCL buffers for TP > 1" if tp > 1 else ""
        )
    if engine == "vllm" and "max_prefill_tokens" not in overrides:
        values["max_prefill_tokens"] = values["max_num_batched_tokens"]


def attention_backend(
    engine: str, rule_set: str, hw: Hardware, model: ModelSpec, kv_dtype: str, v1: bool = True
) -> tuple[str, int, str]:
    """(backend, block size it needs, rule) for this engine release on this GPU and model."""
    if engine == "vllm":
        return vllm.attention_backend(engine, rule_set, hw, model, kv_dtype, v1)
    return ENGINES[engine].attention_backend(engine, rule_set, hw, model, kv_dtype)


def after_memory(settings: EngineSettings, pool_tokens: int) -> EngineSettings:
    """Limits an engine sizes from its KV pool at start-up (SGLang's max_running_requests),
    unless the user set them."""
    if "user override" in settings.rules.get("max_num_seqs", ""):
        return settings
    return ENGINES[settings.engine].after_memory(settings, pool_tokens)


def _coerce(key: str, value, kind: type):
    """Convert an override to the type of the setting it sets, or say what is expected."""
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is tuple:
            return tuple(int(x) for x in value)
        return str(value)
    except (TypeError, ValueError):
        raise UserError(f"engine_args.{key}={value!r}: expected {kind.__name__}") from None


def _check(s: EngineSettings, model: ModelSpec, tp: int) -> None:
    """Settings the real engine refuses at start-up, with its advice (by its own names)."""
    n = s.display_name

    def bad(msg: str):
        raise UserError(msg)

    speculative.check(s, model, lambda name: name in model_names())
    features.check_offload(s)
    if s.policy not in POLICIES[s.scheduler]:
        bad(f"{n('policy')}={s.policy!r}: {s.engine} supports {', '.join(POLICIES[s.scheduler])}")
    if s.preemption_mode not in ("recompute", "swap"):
        bad(f"preemption_mode={s.preemption_mode!r}: choose recompute or swap")
    if s.preemption_mode == "swap" and s.scheduler != "vllm_v0":
        bad("preemption_mode=swap exists only in vLLM's V0 engine (before 0.8)")
    if s.scheduler == "trtllm" and s.capacity_policy not in (
        "GUARANTEED_NO_EVICT",
        "MAX_UTILIZATION",
    ):
        bad(
            f"capacity_scheduler_policy={s.capacity_policy!r}: choose GUARANTEED_NO_EVICT "
            "or MAX_UTILIZATION"
        )
    if s.max_num_seqs < 1:
        bad(f"{n('max_num_seqs')}={s.max_num_seqs}: must be >= 1")
    if s.num_gpu_blocks_override < 0 or s.num_gpu_blocks_override == 1:
        bad(
            f"num_gpu_blocks_override={s.num_gpu_blocks_override}: give at least 2 blocks "
            "(one is vLLM's null block), or leave it unset to size the pool from memory"
        )
    if s.scheduler.startswith("vllm") and s.max_num_batched_tokens < s.max_num_seqs:
        bad(
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) must be >= max_num_seqs "
            f"({s.max_num_seqs}); raise engine_args.max_num_batched_tokens or lower max_num_seqs"
        )
    if s.block_size not in BLOCK_SIZES:
        bad(f"{n('block_size')}={s.block_size}: choose one of {', '.join(map(str, BLOCK_SIZES))}")
    if s.max_num_batched_tokens < s.block_size:
        bad(
            f"{n('max_num_batched_tokens')} ({s.max_num_batched_tokens}) is below "
            f"{n('block_size')} ({s.block_size}): a step could not fill one KV block; raise "
            f"engine_args.{n('max_num_batched_tokens')} to at least {s.block_size} or lower "
            f"engine_args.{n('block_size')}"
        )
    if not 0 < s.gpu_memory_utilization <= 1:
        bad(f"{n('gpu_memory_utilization')}={s.gpu_memory_utilization}: must be in (0, 1]")
    if s.max_model_len < 1:
        bad(f"max_model_len={s.max_model_len}: must be >= 1")
    if s.max_model_len > model.max_position_embeddings:
        bad(
            f"max_model_len ({s.max_model_len}) exceeds the model's max_position_embeddings "
            f"({model.max_position_embeddings}); lower engine_args.max_model_len"
        )
    if (
        s.scheduler.startswith("vllm")
        and not s.enable_chunked_prefill
        and s.max_num_batched_tokens < s.max_model_len
    ):
        bad(
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) is smaller than max_model_len "
            f"({s.max_model_len}) with chunked prefill off; raise max_num_batched_tokens or "
            "lower max_model_len"
        )
    if s.long_prefill_token_threshold < 0:
        bad("long_prefill_token_threshold must be >= 0 (0 = no cap)")
    if s.num_scheduler_steps < 1:
        bad("num_scheduler_steps must be >= 1")
    why = multistep.multi_step_error(  # which releases have multi-step, and with what
        s.engine, s.version, s.scheduler, s.num_scheduler_steps, s.enable_chunked_prefill
    )
    if why:
        bad(why)
    if s.cpu_step_overhead_s < 0 or s.cpu_per_seq_overhead_s < 0:
        bad("CPU overheads must be >= 0")
    if model.mla is not None and s.attention_backend == "FLASHMLA" and s.block_size != 64:
        bad(f"FlashMLA needs block_size 64, got {s.block_size}")
    why_tp = model.tp_error(tp)
    if why_tp:
        bad(why_tp)
