"""scenario=long_context's outputs: summary.json, report.md (the four breaks first), plots of the
TTFT split by prompt length (log-log), the timeline of the traffic run, the architectures."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from sim.kv.memory import GIB
from sim.report.escape import md_text
from sim.report.figures import plot_text, plt, save_png
from sim.report.html import write_report
from sim.run.outputs import write_json, write_parquet, write_text
from sim.scenarios.long_context.architectures import Architecture, ArchitectureError
from sim.scenarios.long_context.caveats import how_section, unmodelled
from sim.scenarios.long_context.remedy_text import remedy_section
from sim.scenarios.long_context.sections import architecture_section, cotenant_section
from sim.scenarios.long_context.study import Study
from sim.scenarios.long_context.text import (
    PARTS,
    cotenant_sentence,
    decode_section,
    decode_sentence,
    memory_section,
    memory_sentence,
    prefill_section,
    ttft_sentence,
)

COLORS = {"linear": "#1f77b4", "attention": "#d62728", "communication": "#9467bd"}
COLORS["overhead"] = "#7f7f7f"


# ---- plots ---------------------------------------------------------------------------------
def plot_scaling(study: Study, path: Path) -> str:
    df = study.scaling
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    n = df["prompt_tokens"].to_numpy()
    ax.loglog(n, df["ttft_s"], "k-o", lw=2, ms=4, label="TTFT (alone)")
    for part in PARTS:
        values = df[part].to_numpy()
        if (values > 0).any():
            ax.loglog(n, np.where(values > 0, values, np.nan), "-", color=COLORS[part], label=part)
    ref = df["linear"].iloc[0] * n / n[0]
    ax.loglog(n, ref, ":", color=COLORS["linear"], lw=1, label="∝ n")
    ref2 = df["attention"].iloc[-1] * (n / n[-1]) ** 2
    ax.loglog(n, ref2, ":", color=COLORS["attention"], lw=1, label="∝ n²")
    x = study.flops_crossover_tokens
    if x and n[0] <= x <= n[-1]:
        ax.axvline(x, color="#d62728", ls="--", lw=0.8)
        ax.annotate(f"attention FLOPs\n= linear at {x:,}", (x, ax.get_ylim()[0]), fontsize=8,
                    xytext=(4, 8), textcoords="offset points")  # fmt: skip
    trained = study.trained_context_tokens
    if n[0] <= trained <= n[-1]:
        ax.axvline(trained, color="black", ls=":", lw=0.8)
        ax.annotate("trained context", (trained, ax.get_ylim()[1]), fontsize=8,
                    xytext=(4, -14), textcoords="offset points")  # fmt: skip
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("seconds")
    ax.set_title(plot_text(f"Time to first token by part, {study.model} on "
                           f"{study.at.num_gpus} × {study.hardware} ({study.at.parallel})"),
                 fontsize=10)  # fmt: skip
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return save_png(fig, path)


def plot_timeline(study: Study, path: Path) -> str | None:
    steps, req, k = study.steps, study.requests, study.long_index
    if steps is None or req is None:
        return None
    long = req.set_index("request_id").loc[k]
    others = req[(req["request_id"] != k) & (req["status"] == "finished")]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    a1.semilogy(steps["start_s"], steps["duration_s"] * 1e3, ".", ms=2, color="#444444")
    a1.set_ylabel("step time (ms)")
    a1.set_title(
        f"Traffic with one {study.prompt_tokens:,}-token request (budget "
        f"{study.prefill.budget:,} "
        f"tokens): every step while it prefills carries a chunk whose attention reads the "
        f"whole prefix",
        fontsize=9,
    )
    a2.semilogy(others["arrival_s"], others["ttft_s"] * 1e3, ".", ms=3, label="co-tenant TTFT")
    a2.semilogy(others["arrival_s"], others["tpot_s"] * 1e3, ".", ms=3, label="co-tenant TPOT")
    a2.set_ylabel("ms")
    a2.set_xlabel("simulated time (s)")
    for ax in (a1, a2):
        ax.axvspan(long["arrival_s"], long["first_token_s"], color="#d62728", alpha=0.10)
        ax.axvspan(long["first_token_s"], long["finish_s"], color="#1f77b4", alpha=0.10)
        ax.grid(alpha=0.25)
    a2.legend(fontsize=8, loc="upper right", title="red: long prefill, blue: its decode",
              title_fontsize=8)  # fmt: skip
    fig.tight_layout()
    return save_png(fig, path)


def plot_architectures(
    answers: tuple[Architecture | ArchitectureError, ...], path: Path
) -> str | None:
    rows = [r for r in answers if isinstance(r, Architecture)]
    if not rows:
        return None
    names = [plot_text(f"{r.model}\n({r.attention})") for r in rows]
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.45 * len(rows) + 1.6), sharey=True)
    values = (
        ([r.kv_bytes_sequence / GIB for r in rows], "KV for the sequence (GiB)"),
        ([r.ttft_s for r in rows], "TTFT alone (s)"),
        ([r.decode_ms_per_token for r in rows], "decode (ms / token)"),
    )
    for ax, (v, label) in zip(axes, values, strict=True):
        colors = ["#2ca02c" if r.fits else "#d62728" for r in rows]
        ax.barh(y, v, color=colors)
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, names, fontsize=7)
    axes[0].invert_yaxis()
    axes[1].set_title("green: fits the GPUs given, red: does not", fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)


def report_text(study: Study, plots: dict) -> str:
    traffic = study.traffic
    # the model and the GPU may be a user's files, by name; the four sentences are the
    # console's too, plain text: escaped whole
    model, gpu = md_text(study.model), md_text(study.hardware)
    background = traffic.background if traffic is not None else "no background traffic"
    lines = [
        f"# Long context: {model}, a {study.prompt_tokens:,}-token prompt on "
        f"{gpu} ({study.memory.given_parallel})",
        "",
        f"Engine {md_text(study.engine)}; {study.output_tokens} output tokens; "
        f"{md_text(background)}.",
        "",
        *([f"Parallelism: {md_text(study.tp_choice.why)}.", ""] if study.tp_choice.why else []),
        "## What breaks, in the order you meet it",
        "",
        f"1. **Memory.** {md_text(memory_sentence(study))}",
        f"2. **Time to first token.** {md_text(ttft_sentence(study))}",
        f"3. **Decode.** {md_text(decode_sentence(study))}",
        f"4. **Everyone else.** {md_text(cotenant_sentence(study))}",
        "",
    ]
    if study.prompt_tokens + study.output_tokens > study.trained_context_tokens:
        lines += [
            f"Note: {model} is trained to {study.trained_context_tokens:,} positions. "
            "Engines refuse a longer max_model_len unless told otherwise (vLLM: "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, with RoPE scaling); what the model's answers are "
            "worth beyond its trained length is not something a simulator can say.",
            "",
        ]
    lines += memory_section(study) + prefill_section(study, plots) + decode_section(study)
    lines += cotenant_section(study, plots) + architecture_section(study, plots)
    lines += remedy_section(study) + how_section(study) + unmodelled(study)
    return "\n".join(lines) + "\n"


# ---- outputs -------------------------------------------------------------------------------
def write_long_context_outputs(study: Study, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    # written as every output is (atomic, noted in the run dir's record: sim/run/outputs.py)
    write_text(out_dir / "ttft_scaling.csv", study.scaling.to_csv(index=False))
    rows = [asdict(a) for a in study.architectures]
    write_text(out_dir / "architectures.csv", pd.DataFrame(rows).to_csv(index=False))
    if study.steps is not None:
        write_parquet(out_dir / "steps.parquet", study.steps)
        write_parquet(out_dir / "requests.parquet", study.requests)
    plots = {"scaling": plot_scaling(study, out_dir / "ttft_scaling.png")}
    plots["timeline"] = plot_timeline(study, out_dir / "timeline.png")
    plots["architectures"] = plot_architectures(study.architectures, out_dir / "architectures.png")
    write_report(out_dir, report_text(study, plots))
    write_json(out_dir / "summary.json", study.summary)
