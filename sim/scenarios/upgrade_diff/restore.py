"""The engine flags that set changed settings back on the after version: one per change
(restore_flag), and the after version's launch command with them (restore_command)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.engines.settings import INVERTED, EngineSettings
from sim.scenarios.upgrade_diff.attribute import Attribution
from sim.scenarios.upgrade_diff.changes import KERNELS, Change
from sim.scenarios.upgrade_diff.plan import Plan

NO_FLAG = {
    "cpu_step_overhead_s": "the release's engine-loop CPU time, not a setting",
    "cpu_per_seq_overhead_s": "the release's per-sequence CPU time, not a setting",
    "cpu_output_per_seq_s": "the release's output processing, not a setting",
    "cpu_exposed_s": "the release's CPU time left serial, not a setting",
    "prefix_hash_s_per_token": "the release's prefix hashing cost (vLLM 0.10+: "
    "--prefix-caching-hash-algo chooses the hash)",
    "block_watermark": "vLLM V0's admission watermark, not a flag",
    "cudagraph_memory_bytes": "how the release sizes the KV pool, not a flag",
    "non_torch_memory_bytes": "how the release sizes the KV pool, not a flag",
    KERNELS: "the kernels the release ships: to test, pin the older torch / FlashAttention / "
    "FlashInfer builds",
    "cpu_executor_s": "the release's multi-GPU executor, not a setting",
    "sampler_bytes_per_logit": "how the release profiles its sampler before sizing the KV pool, "
    "not a flag",
    "windows_bounded": "how the release's KV allocator sizes windowed layers (vLLM: "
    "--disable-hybrid-kv-cache-manager keeps them at full length)",
    "multi_step_streams": "vLLM 0.6.2's multi-step output streaming, not a flag before it",
    "retract_decode_steps": "SGLang's retraction rule of the release, not a flag",
    "retract_ratio_offset": "SGLang's retraction rule of the release, not a flag",
    "new_token_ratio_decay": "set through --schedule-conservativeness",
    "min_new_token_ratio": "set through --schedule-conservativeness",
}
LAUNCH = {
    "vllm": "vllm serve {model}",
    "sglang": "python -m sglang.launch_server --model-path {model}",
    "trtllm": "trtllm-serve {model}",
}
GIB = 1 << 30
SGLANG_BACKENDS = {  # the simulator's backend names -> SGLang's --attention-backend values
    "FLASH_ATTN_FA3": "fa3",
    "FLASHINFER": "flashinfer",
    "FLASHINFER_MLA": "flashinfer",
    "TRITON_ATTN": "triton",
    "TRITON_MLA": "triton",
}


def _sglang_gemm(name: str, old) -> tuple[str | None, str]:
    """SGLang's block-FP8 GEMM kernel and its JIT (sim/engines/sglang_fp8.py): environment
    variables of the release, not flags."""
    if name == "jit_first_use":
        if old:
            return None, "DeepGEMM's JIT is the release's; SGL_ENABLE_JIT_DEEPGEMM=1 turns it on"
        return "SGL_ENABLE_JIT_DEEPGEMM=0", (
            "environment: DeepGEMM off (Triton's block kernel, nothing compiled while serving); "
            "or keep it and send warm-up requests of the benchmark's lengths first"
        )
    if old == "cutlass":
        return "SUPPORT_CUTLASS_BLOCK_FP8=1", "environment: sgl-kernel's CUTLASS block kernel"
    if old == "triton":
        return "SGL_ENABLE_JIT_DEEPGEMM=0", "environment: Triton's block kernel"
    return "SGL_ENABLE_JIT_DEEPGEMM=1", "environment: DeepGEMM"


def restore_flag(after: EngineSettings, change: Change) -> tuple[str | None, str]:
    """(the flag or environment variable that sets the before value on the after version, or
    None; why not / what it does)."""
    name, old = change.name, change.before
    if name in NO_FLAG:
        return None, NO_FLAG[name]
    engine = after.engine
    own = after.display_name(name)
    shown = (not old) if own in INVERTED else old
    if engine == "vllm" and (special := _vllm_flag(after, name, old)) is not None:
        return special
    if engine == "sglang" and name in ("fp8_gemm_backend", "jit_first_use"):
        return _sglang_gemm(name, old)
    if engine == "sglang" and name == "attention_backend":
        flag = SGLANG_BACKENDS.get(str(old), str(old).lower())
        return f"--attention-backend {flag}", ""
    if engine == "trtllm" and name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        return f"--{own} {old}", ""
    if engine == "trtllm":
        return None, f"{own}: {shown} in the file given to --extra_llm_api_options"
    flag = "--" + own.replace("_", "-")
    if isinstance(shown, bool):
        if engine == "vllm":
            return (flag if shown else f"--no-{own.replace('_', '-')}"), ""
        return (flag, "") if shown else (None, f"drop {flag}")
    if isinstance(shown, tuple):
        if name == "cudagraph_capture_sizes" and engine == "sglang":
            return (
                (f"--cuda-graph-max-bs {max(shown)}", "") if shown else ("--disable-cuda-graph", "")
            )
        shown = ",".join(map(str, shown))
    return f"{flag} {shown}", ""


def _vllm_flag(after: EngineSettings, name: str, old) -> tuple[str | None, str] | None:
    """vLLM's settings not set by a flag of their own name (None: the others)."""
    major_minor = tuple(int(x) for x in after.version.split(".")[:2])
    match name:
        case "attention_backend":
            if str(old).startswith("FLASH_ATTN_FA"):
                return (
                    f"VLLM_ATTENTION_BACKEND=FLASH_ATTN VLLM_FLASH_ATTN_VERSION={old[-1]}",
                    "environment",
                )
            return f"VLLM_ATTENTION_BACKEND={old}", "environment"
        case "cudagraph_mode":
            return ("--enforce-eager", "") if old == "NONE" else (f"-O.cudagraph_mode={old}", "")
        case "cudagraph_capture_sizes":
            if not old:
                return "--enforce-eager", ""
            return f"-O.cudagraph_capture_sizes=[{','.join(map(str, old))}]", ""
        case "compile":
            return ("-O3" if old else "-O0"), "torch.compile level"
        case "scheduler":
            if old == "vllm_v0" and major_minor < (0, 11):
                return "VLLM_USE_V1=0", "environment: the V0 engine"
            return None, "the V0 engine is gone from vLLM 0.11 on"
        case "policy":
            return f"--scheduling-policy {old}", ""
        case "swap_space_bytes":
            return f"--swap-space {old / GIB:g}", "GiB"
        case "async_output_proc":
            return ("--disable-async-output-proc" if not old else None), (
                "" if not old else "on by default"
            )
    return None


@dataclass(frozen=True, slots=True)
class Unrestorable:
    """A change no flag sets back, and why."""

    setting: str
    why: str

    @property
    def summary(self) -> dict:
        return {"setting": self.setting, "why": self.why}


@dataclass(frozen=True, slots=True)
class RestoreCommand:
    command: str  # the after version with every changed setting set back (those that matter
    # first)
    minimal_command: str | None  # the minimal set's flags alone (None: no flag sets any back)
    not_restorable: tuple[Unrestorable, ...]

    @property
    def summary(self) -> dict:
        return {
            "command": self.command,
            "minimal_command": self.minimal_command,
            "not_restorable": [x.summary for x in self.not_restorable],
        }


def restore_command(plan: Plan, r: Attribution) -> RestoreCommand:
    """The after version launched with the flags that set every changed setting back (the
    changes that matter first), the minimal set's flags alone, and what no flag restores."""
    head = LAUNCH.get(plan.after.engine, "{model}").format(model=plan.cfg.model)
    effect = {i: abs(r.shapley_pct[r.headline][i]) for i in range(len(plan.changes))}
    chosen = list(r.minimal) + sorted(
        (i for i in range(len(plan.changes)) if i not in r.minimal),
        key=lambda i: (i in r.inert, -effect[i], i),
    )

    def command(indices) -> tuple[str, list[Unrestorable]]:
        env, flags, unflagged = [], [], []
        for i in indices:
            flag, why = restore_flag(plan.after, plan.changes[i])
            if flag is None:
                unflagged.append(Unrestorable(plan.changes[i].setting, why))
            elif why.startswith("environment"):
                env.append(flag)
            else:
                flags.append(flag)
        return " ".join([*env, head, *flags]), unflagged

    full, unflagged = command(chosen)
    minimal, missing = command(r.minimal)
    return RestoreCommand(
        full, minimal if len(missing) < len(r.minimal) else None, tuple(unflagged)
    )
