"""`python -m sim [scenario=NAME] [KEY=VALUE ...]`: one simulation, its outputs in the run dir.

Hydra composes scenarios/; `hydra.run.dir=DIR` chooses where everything goes; `-m` sweeps.
User errors (a wrong key, a bad value, a model that does not fit) print one line and exit 2;
--debug (or SIM_DEBUG=1) shows the traceback instead. A run dir holds a file INCOMPLETE while
its task runs, and keeps it if the task did not finish (Ctrl-C exits 130).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sim.cli import check_overrides, split_argv, to_sim_config
from sim.errors import UserError
from sim.paths import SCENARIO_DIR


def fail(message: str) -> None:
    print(f"sim: error: {message}", file=sys.stderr)
    sys.exit(2)


def run_task(cfg: DictConfig) -> dict:
    """Run the task into the run dir. In a sweep (-m), a run dir that already finished this
    very configuration is not run again: an interrupted sweep resumes (sim/sweep.py)."""
    from dataclasses import asdict

    from hydra.types import RunMode

    from sim.outputs import INCOMPLETE, mark_complete, mark_incomplete
    from sim.sweep import finished_summary, mark_finished

    sim_cfg = to_sim_config(cfg)
    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)
    sweeping = hc.mode == RunMode.MULTIRUN
    config = asdict(sim_cfg)
    sweeper = getattr(hc, "sweeper", None)
    params = sweeper.get("params") if sweeper is not None else None
    if not sweeping and params:
        print(
            f"note: scenario={hc.runtime.choices.get('scenario')} is a sweep over "
            f"{', '.join(params)}; this ran one point of it. Add -m to run the sweep.",
            file=sys.stderr,
        )
    if sweeping and (done := finished_summary(out_dir, config)) is not None:
        print(f"{out_dir}: already finished, not run again")
        return done
    mark_incomplete(out_dir, "its task is running (or the process running it was killed)")
    try:
        result = TASKS[sim_cfg.task](sim_cfg, out_dir)
    except KeyboardInterrupt:
        mark_incomplete(out_dir, "interrupted (Ctrl-C) before its outputs were all written")
        print(f"sim: interrupted; {out_dir} is marked {INCOMPLETE}", file=sys.stderr)
        raise
    except BaseException as exc:
        mark_incomplete(out_dir, f"stopped by an error: {exc}")
        raise
    mark_complete(out_dir)
    if sweeping:
        import time

        from sim.sweep import progress_line

        mark_finished(out_dir, config)
        line = progress_line(Path(hc.sweep.dir), time.time())
        if line:
            print(line, flush=True)
    return result


def simulate_task(sim_cfg, out_dir: Path) -> dict:
    from sim.console import ProgressBar, print_brief, print_summary
    from sim.outputs import write_json, write_parquet, write_parquet_chunks
    from sim.report import write_report
    from sim.run import simulate

    with ProgressBar(enabled=sim_cfg.output.progress and sys.stderr.isatty()) as bar:
        result = simulate(sim_cfg, progress=bar.update, run_dir=out_dir)
    if result.streamed is None:
        write_parquet(out_dir / "requests.parquet", result.requests)
        write_parquet(out_dir / "steps.parquet", result.steps)
    else:  # a long run: its steps were written as it went; its requests a row group at a time
        write_parquet_chunks(out_dir / "requests.parquet", result.requests)
    if result.phases is not None:
        write_trace_files(result, out_dir)
    if sim_cfg.output.report and "disagg" in result.summary:
        from sim.disagg_report import write_run_report

        write_run_report(result, out_dir)
    elif sim_cfg.output.report:
        write_report(result, out_dir)
    write_json(out_dir / "summary.json", result.summary)
    if _in_sweep():
        print_brief(result.summary, out_dir)
    else:
        print_summary(result.summary, out_dir)
    return result.summary


def write_trace_files(result, out_dir: Path) -> None:
    """trace=true: trace.json (Perfetto), timeline.png / .svg and phases.parquet."""
    from sim.outputs import write_parquet
    from sim.timeline import plot_timeline, trace_events, write_trace

    s = result.summary
    write_parquet(out_dir / "phases.parquet", result.phases)
    about = {"backend": s["backend"], "model": s["model_id"], "workload": s["sim"]["workload"]}
    write_trace(out_dir / "trace.json", trace_events(result.steps, result.phases), about)
    label = f"{s['model_id']}, {s['backend'].removeprefix('sim:')}"
    runs = [(label, result.steps, result.phases, result.setup.memory.num_blocks)]
    plot_timeline(runs, out_dir / "timeline.png")


def _in_sweep() -> bool:
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def kernel_check_task(sim_cfg, out_dir: Path) -> dict:
    from sim.kernel_check import run_kernel_check

    result = run_kernel_check(sim_cfg, out_dir)
    kc = result["kernel_check"]
    print(
        f"kernel_check: {kc['num_rows']} rows of {result['timings']} on {result['hardware']} "
        f"({result['cost_profile']}): overall MAPE {kc['overall_mape_pct']:.2f}%"
    )
    for op, mape in kc["per_op"].items():
        print(f"  {op:<20} {mape:6.2f}%")
    if result["hardware"] not in result["table_gpus"]:
        print(f"  note: the table was measured on {', '.join(result['table_gpus'])}")
    print(f"Outputs: {out_dir}/ (summary.json, report.md, kernel_check.png)")
    return result


def show_engine_task(sim_cfg, out_dir: Path) -> dict:
    from sim.show_engine import show_engine

    return show_engine(sim_cfg, out_dir)


def validate_task(sim_cfg, out_dir: Path) -> dict:
    from sim.cases import load_cases
    from sim.console import ProgressBar
    from sim.validate import run_all
    from sim.validation_report import write_validation

    paths = _case_files(sim_cfg)
    cases = load_cases(paths, sim_cfg)
    with ProgressBar(enabled=sim_cfg.output.progress and sys.stderr.isatty(), what="cases") as bar:
        results = run_all(cases, sim_cfg.validate.jobs, progress=bar.update_count)
    title = ", ".join(str(p) for p in paths)
    v = write_validation(cases, results, out_dir, title)["validation"]
    print(f"validate: {v['num_cases']} cases ({v['num_failed']} could not be simulated)")
    for metric, med in v["median_abs_pct_error"].items():
        p90 = v["p90_abs_pct_error"][metric]
        print(f"  {metric:<24} median |error| {med:6.1f}%   p90 {p90:6.1f}%")
    for cid, why in list(v["failed"].items())[:5]:
        print(f"  failed {cid}: {why}")
    print(f"Outputs: {out_dir}/ (summary.json, validation.csv, report.md)")
    return v


def upgrade_diff_task(sim_cfg, out_dir: Path) -> dict:
    from sim.console import ProgressBar
    from sim.upgrade_diff import run_upgrade_diff
    from sim.upgrade_report import write_upgrade_outputs

    cache = out_dir / "simulations"  # each simulation's outcome: a rerun resumes from them
    kept = len(list(cache.glob("*.json"))) if cache.is_dir() else 0
    if kept:
        print(f"upgrade_diff: resuming; {kept} simulations already done in {cache}")
    with ProgressBar(enabled=sim_cfg.output.progress and sys.stderr.isatty(), what="runs") as bar:
        summary = run_upgrade_diff(sim_cfg, progress=bar.update_count, cache=cache)
    write_upgrade_outputs(summary, out_dir)
    print_upgrade(summary, out_dir)
    return summary


def long_context_task(sim_cfg, out_dir: Path) -> dict:
    from sim.console import ProgressBar
    from sim.long_context_report import write_long_context_outputs
    from sim.long_context_study import run_long_context
    from sim.long_context_text import (
        cotenant_sentence,
        decode_sentence,
        memory_sentence,
        ttft_sentence,
    )

    with ProgressBar(enabled=sim_cfg.output.progress and sys.stderr.isatty(), what="runs") as bar:
        study = run_long_context(sim_cfg, progress=bar.update_count)
    write_long_context_outputs(study, out_dir)
    s = study.summary
    print(f"long_context: {s['model']}, {s['prompt_tokens']:,} prompt tokens on {s['hardware']}")
    for title, sentence in (
        ("Memory", memory_sentence),
        ("TTFT", ttft_sentence),
        ("Decode", decode_sentence),
        ("Everyone else", cotenant_sentence),
    ):
        print(f"  {title}: {sentence(s)}")
    print(f"{s['wall_time_s']:.1f} s. Outputs: {out_dir}/ (summary.json, report.md, plots)")
    return s


def disagg_task(sim_cfg, out_dir: Path) -> dict:
    from sim.console import ProgressBar
    from sim.disagg_report import headline, write_search_outputs
    from sim.disagg_search import run_disagg_search

    bar_on = sim_cfg.output.progress and sys.stderr.isatty()
    with ProgressBar(enabled=bar_on, what="simulations") as bar:
        s = run_disagg_search(sim_cfg, progress=bar.update_count)
    write_search_outputs(s, out_dir)
    print(f"disagg: {headline(s)}")
    print(
        f"{len(s['probes'])} splits probed, {s['simulations_run']} simulations in "
        f"{s['wall_time_s']:.1f} s. Outputs: {out_dir}/ (summary.json, probes.csv, report.md)"
    )
    return s


def capacity_task(sim_cfg, out_dir: Path) -> dict:
    from sim.capacity import run_capacity
    from sim.capacity_report import headline, write_capacity_outputs
    from sim.console import ProgressBar

    with ProgressBar(enabled=sim_cfg.output.progress and sys.stderr.isatty(), what="probes") as bar:
        s = run_capacity(sim_cfg, progress=bar.update_count)
    write_capacity_outputs(s, out_dir)
    print(f"capacity: {headline(s)}")
    print(
        f"{len(s['probes'])} probes, {s['simulations_run']} simulations in "
        f"{s['wall_time_s']:.1f} s. Outputs: {out_dir}/ (summary.json, probes.csv, report.md)"
    )
    return s


def teach_task(sim_cfg, out_dir: Path) -> dict:
    from sim.teach import run_lesson
    from sim.teach_report import write_teach_outputs

    started = time.perf_counter()
    out = run_lesson(sim_cfg)
    command = f"python -m sim scenario=teach_{sim_cfg.teach.lesson}"
    s = write_teach_outputs(out, out_dir, command, started)
    print(f"teach_{s['lesson']}: {s['lesson_sentence']}")
    print(
        f"{s['wall_time_s']:.1f} s. Outputs: {out_dir}/ (report.md, report.html, timeline.png, "
        "trace.json for ui.perfetto.dev)"
    )
    return s


def print_upgrade(s: dict, out_dir: Path) -> None:
    from sim.upgrade import METRICS
    from sim.upgrade_diff import NAMES, fmt

    b, a = s["before"]["engine"], s["after"]["engine"]
    print(f"upgrade_diff: {b} -> {a}")
    for m in METRICS:
        print(
            f"  {NAMES[m][0]:<20} {fmt(m, s['before'][m]):>16} -> {fmt(m, s['after'][m]):>16}"
            f"  {s['change_pct'][m]:+7.1f}%"
        )
    m = s["headline"]
    print(f"  {NAMES[m][0]} by setting (Shapley, points of %):")
    for row in s["attribution"][:8]:
        if not row["inert"]:
            print(
                f"    {row['setting']:<32} {row['category']:<10} "
                f"{row['effect_pct'][m]:+7.1f} ± {row['ci_pct'][m]:.1f}"
            )
    print(f"Verdict: {s['verdict']}")
    print(f"{s['simulations_run']} simulations in {s['wall_time_s']:.0f} s.")
    print(f"Outputs: {out_dir}/ (summary.json, attribution.csv, report.md, waterfall.png)")


def _case_files(sim_cfg) -> tuple[str, ...]:
    paths = sim_cfg.validate.cases
    if not paths:
        raise UserError("scenario=validate needs validate.cases=FILE (or a list: [A,B])")
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise UserError(f"validate.cases: {missing[0]} does not exist")
    return paths


TASKS = {
    "simulate": simulate_task,
    "kernel_check": kernel_check_task,
    "show_engine": show_engine_task,
    "validate": validate_task,
    "upgrade_diff": upgrade_diff_task,
    "long_context": long_context_task,
    "capacity": capacity_task,
    "teach": teach_task,
    "disagg": disagg_task,
}


@hydra.main(config_path=str(SCENARIO_DIR), config_name="config", version_base="1.3")
def _hydra_entry(cfg: DictConfig) -> None:
    try:
        run_task(cfg)
    except UserError as exc:
        if _debug():
            raise
        fail(str(exc))
    except KeyboardInterrupt:
        if _debug():
            raise
        sys.exit(130)


def _debug() -> bool:
    return bool(os.environ.get("SIM_DEBUG"))


def main() -> None:
    if "--debug" in sys.argv[1:]:  # tracebacks instead of one-line errors (= SIM_DEBUG=1)
        sys.argv.remove("--debug")
        os.environ["SIM_DEBUG"] = "1"
        os.environ["HYDRA_FULL_ERROR"] = "1"
    overrides, multirun = split_argv(sys.argv[1:])
    informational = {"-h", "--help", "--hydra-help", "--info", "--cfg", "-c", "--shell-completion"}
    if not informational & set(sys.argv[1:]):
        from sim.run import Setup

        try:
            for cfg in check_overrides(overrides, multirun):
                if cfg.task == "disagg" or (cfg.task == "simulate" and cfg.disagg.enabled):
                    from dataclasses import replace

                    from sim.disagg import Pools, check

                    Pools.from_config(replace(cfg, disagg=replace(cfg.disagg, enabled=True)))
                    check(cfg)
                    if cfg.task == "disagg":
                        from sim.disagg_search import check as check_search

                        check_search(cfg)
                elif cfg.task in ("simulate", "show_engine"):
                    Setup.from_config(cfg)
                elif cfg.task == "teach":
                    from sim.teach import LESSONS

                    if cfg.teach.lesson not in LESSONS:
                        raise UserError(
                            f"teach.lesson={cfg.teach.lesson!r}: choose one of {', '.join(LESSONS)}"
                        )
                    Setup.from_config(cfg)
                elif cfg.task == "capacity":
                    from sim.capacity import check

                    Setup.from_config(cfg)
                    check(cfg)
                elif cfg.task == "validate":
                    _case_files(cfg)
                elif cfg.task == "upgrade_diff":
                    from sim.upgrade_diff import make_plan

                    make_plan(cfg)
                elif cfg.task == "long_context":
                    from sim.long_context_run import Context

                    Context.of(cfg).settings(cfg.parallel.tp)
        except UserError as exc:
            if _debug():
                raise
            fail(str(exc))
    _hydra_entry()


if __name__ == "__main__":
    main()
