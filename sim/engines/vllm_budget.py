"""vLLM's batch limits by release: max_num_seqs, the token budget (max_num_batched_tokens) and
the CUDA-graph capture sizes, by GPU memory tier, device name and entry point.

Read from each release's `engine/arg_utils.py` (_set_default_args, from 0.12.0
_set_default_max_num_seqs_and_batched_tokens_args) and `config.py` / `config/vllm.py`
(_set_cudagraph_sizes); each rule's text names its source. Used by sim/engines/vllm.py.
"""

from __future__ import annotations

from sim.specs.hardware import Hardware

CAPTURE_MAX = 512
SRC_AU = "engine/arg_utils.py"


def budgets(v, v1: bool, at: str, hw: Hardware, entry_point: str):
    """(max_num_seqs, token budget with chunked prefill, rule) by release (without chunked
    prefill, V0 uses max(max_model_len, 2048))."""
    gib = hw.hbm_gib
    name = hw.display_name.lower()
    offline = entry_point == "offline"
    where = f"{SRC_AU} _set_default_args"
    if not v1:  # config.py SchedulerConfig: 768 in 0.4.1, 512 from 0.4.2, 2048 from 0.6.5
        chunk = 2048 if v >= (0, 6, 5) else 512 if v >= (0, 4, 2) else 768
        return 256, chunk, f"{at}: V0 default (max_num_seqs 256; chunked-prefill budget {chunk})"
    if v < (0, 8, 4):  # max_num_seqs 1024 everywhere; budget keyed on the device name
        big = "h100" in name or "h200" in name
        why = f"{at}: device name {'contains' if big else 'lacks'} h100/h200 ({where})"
        return 1024, (16384 if offline else 8192) if big else (8192 if offline else 2048), why
    if v < (0, 8, 5):  # both keyed on the device name
        big = "h100" in name or "h200" in name
        why = f"{at}: device name {'contains' if big else 'lacks'} h100/h200 ({where})"
    elif v < (0, 9, 0):  # PR #17073: by memory
        big = gib >= 70
        why = f"{at}: GPU memory {gib:.0f} GiB {'>=' if big else '<'} 70 (PR #17073; {where})"
    else:  # PR #17885: A100 back to the small tier; 0.33.0 also GB10
        if v >= (0, 28, 0) and gib >= 160:
            return 1024, 16384, f"{at}: GPU memory {gib:.0f} GiB >= 160 ({where})"
        big = gib >= 70 and "a100" not in name and "gb10" not in name
        why = (
            f"{at}: GPU memory {gib:.0f} GiB, "
            f"{'>= 70 and not A100' if big else '< 70 or A100'} (PR #17885; {where})"
        )
    why += f", {'offline LLM class' if offline else 'OpenAI server'}"
    if big:
        return 1024, 16384 if offline else 8192, why
    return 256, 8192 if offline else 2048, why


def capture_sizes(
    v: tuple, v1: bool, max_num_seqs: int, budget: int, blackwell: bool = False
) -> tuple[tuple[int, ...], str]:
    """The batch sizes vLLM captures, by release."""
    if not v1:
        top = min(-(-max_num_seqs // 8) * 8, 256 if v < (0, 6, 0) else 8192)
        sizes = [1, 2, 4, *range(8, top + 1, 8)]
        return tuple(s for s in sizes if s <= top), f"1, 2, 4, 8..{top} step 8 (V0)"
    if v < (0, 10, 0):
        sizes, why = [1, 2, 4, *range(8, 513, 8)], "1, 2, 4, 8..512 step 8"
    else:
        cap = 1024 if blackwell and v >= (0, 28, 0) else 512
        top = min(2 * max_num_seqs, cap)
        if v >= (0, 11, 1):
            top = min(top, budget)
            sizes = [1, 2, 4, *range(8, min(top, 248) + 1, 8), *range(256, top + 1, 16)]
            why = f"1, 2, 4, 8..248 step 8, 256..{top} step 16"
        else:
            sizes, why = [1, 2, 4, *range(8, top + 1, 8)], f"1, 2, 4, 8..{top} step 8"
    kept = tuple(sorted({s for s in sizes if s <= budget}))
    return kept, why + ", up to the token budget"
