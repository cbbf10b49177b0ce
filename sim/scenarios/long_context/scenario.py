"""scenario=long_context as a Scenario: the study (sim/scenarios/long_context/study.py), then
its outputs (sim/scenarios/long_context/report.py)."""

from __future__ import annotations

from pathlib import Path

from sim.config import SimConfig
from sim.report.console import ProgressBar, outputs_line
from sim.scenarios.fanout import say_if_capped
from sim.scenarios.long_context.context_limit import check_context
from sim.scenarios.long_context.report import write_long_context_outputs
from sim.scenarios.long_context.runs import Context
from sim.scenarios.long_context.study import Study, run_long_context
from sim.scenarios.long_context.text import (
    cotenant_sentence,
    decode_sentence,
    memory_sentence,
    ttft_sentence,
)
from sim.scenarios.long_context.tp_choice import choose_tp


class LongContext:
    counts = "runs"

    def check(self, cfg: SimConfig) -> None:
        check_context(Context.of(cfg))  # first: a nonsense length is refused at once
        cfg, _ = choose_tp(cfg)
        Context.of(cfg).settings(cfg.parallel.tp)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> Study:
        say_if_capped(cfg.long_context.jobs, "long_context.jobs")
        return run_long_context(cfg, progress=bar.update_count)

    def write(self, result: Study, out_dir: Path) -> None:
        write_long_context_outputs(result, out_dir)

    def brief(self, result: Study, out_dir: Path, sweeping: bool) -> None:
        print(
            f"long_context: {result.model}, {result.prompt_tokens:,} prompt tokens on "
            f"{result.hardware}"
        )
        if result.tp_choice.why:
            print(f"  Parallelism: {result.tp_choice.why}.")
        for title, sentence in (
            ("Memory", memory_sentence),
            ("TTFT", ttft_sentence),
            ("Decode", decode_sentence),
            ("Everyone else", cotenant_sentence),
        ):
            print(f"  {title}: {sentence(result)}")
        print(f"{result.wall_time_s:.1f} s. {outputs_line(out_dir)}")
