"""scenario=long_context's longest context: a prompt + output beyond the model's own maximum
context (max_position_embeddings), or beyond long_context.extend_context_to where that allows
more, is refused before anything runs, in one line saying how to study it anyway."""

from __future__ import annotations

from sim.errors import UserError
from sim.scenarios.long_context.runs import Context
from sim.specs.model_config import load_model, model_names


def check_context(ctx: Context) -> None:
    """Refuse a prompt + output beyond the longest context the study accepts: the model's own
    maximum (max_position_embeddings), or long_context.extend_context_to where that is longer.
    One line, before anything runs: a 20M-token prompt would otherwise simulate for hours."""
    lc, model = ctx.cfg.long_context, ctx.model.name
    allowed = max(ctx.trained_tokens, lc.extend_context_to or 0)
    if ctx.total_tokens <= allowed:
        return
    asked = (
        f"long_context.prompt_tokens={lc.prompt_tokens:,} + output_tokens="
        f"{lc.output_tokens:,} = {ctx.total_tokens:,} tokens exceed {model}'s maximum context, "
        f"{ctx.trained_tokens:,} tokens (max_position_embeddings)"
    )
    if lc.extend_context_to:
        asked += f", and the {lc.extend_context_to:,} that long_context.extend_context_to allows"
    how = (
        f"; to study a longer context as an engine serves one past the model's maximum (RoPE "
        f"scaling with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), set long_context.extend_context_to="
        f"{ctx.total_tokens}, or choose a model trained for it"
    )
    raise UserError(asked + how + longer_models(ctx.total_tokens))


def longer_models(tokens: int) -> str:
    """The catalogue models trained for `tokens`, with their maximum contexts, else the longest
    one, as the refusal ends: " (a: N, b: M)"."""
    contexts = {name: load_model(name).max_position_embeddings for name in model_names()}
    fit = sorted((n for n, c in contexts.items() if c >= tokens), key=lambda n: (contexts[n], n))
    if fit:
        return " (" + ", ".join(f"{n}: {contexts[n]:,}" for n in fit) + ")"
    name = max(contexts, key=lambda n: (contexts[n], n))
    return f" (none in the catalogue is: the longest, {name}, {contexts[name]:,})"
