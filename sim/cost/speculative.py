"""Speculative decoding's cost: the target's verify pass over each decoding request's 1 + d
tokens and the proposer's own passes (sim/engines/speculative.py has the knobs and acceptance).
`cost` below is the step's sim.cost.step.CostModel, passed in: this module is below it."""

from __future__ import annotations

from dataclasses import replace


def verify_cost(cost, plan):
    """A step whose decoding rows verify drafts: their 1 + d tokens go through every linear
    layer (a prefill-like pass), their attention reads each context's KV once (a decode: the
    kernels batch a few queries over one read), the LM head scores every position, and the
    proposer's passes come first. `cost` is the step's sim.cost.step.CostModel."""
    pre_q, pre_c, dec_c = [], [], []
    rows = zip(plan.num_new_tokens, plan.num_context_tokens, plan.spec_drafts, strict=True)
    for q, c, d in rows:
        if q == 1 + d:  # a decode, verifying d drafts
            dec_c.append(c)
        else:
            pre_q.append(q)
            pre_c.append(c)
    drafts = sum(plan.spec_drafts)
    step = cost.cost(pre_q, pre_c, dec_c, cpu_batch=plan.batch_size, extra_tokens=drafts)
    more = cost.lm_head_s(plan.batch_size + drafts) - cost.lm_head_s(plan.batch_size)
    return replace(step, lm_head_s=step.lm_head_s + more, draft_s=draft_s(cost, plan))


def draft_s(cost, plan) -> float:
    """GPU seconds the proposer spends drafting for a step's verify rows: one pass per draft
    position, over the rows still drafting (n-gram lookup runs on the CPU: not priced)."""
    rows = [(c, d) for c, d in zip(plan.num_context_tokens, plan.spec_drafts, strict=True) if d]
    method = cost.settings.speculative_method
    if not rows or method == "ngram":
        return 0.0
    total = 0.0
    for i in range(max(d for _, d in rows)):
        contexts = [c + i for c, d in rows if d > i]
        if method == "draft_model":
            total += cost.draft_model.cost([], [], contexts).gpu_s
        else:  # one decoder layer of the target and its LM head
            full = cost.cost([], [], contexts)
            layer = (full.gpu_s - full.lm_head_s - full.launch_s) / cost.model.num_layers
            total += layer + full.lm_head_s
    return total
