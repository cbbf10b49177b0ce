"""upgrade_diff's verdict: which metric leads and why, effects inside the noise, the offsets
in words, where the mechanism's figures come from, a what-if by its change, and the progress
lines a log gets (issue 25)."""

from __future__ import annotations

import io
import re
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

import sim.report.console as console
import sim.scenarios.runner as runner
from sim.config import UpgradeConfig
from sim.run.rundir import RunDir
from sim.scenarios.upgrade_diff.headline import choose_headline, worst_metric
from sim.scenarios.upgrade_diff.outcomes import METRICS, Figures, task_key
from sim.scenarios.upgrade_diff.plan import make_plan
from sim.scenarios.upgrade_diff.result import AttributionRow, Side
from sim.scenarios.upgrade_diff.scenario import UpgradeDiff
from sim.scenarios.upgrade_diff.study import run_upgrade_diff
from sim.scenarios.upgrade_diff.text import report_text
from sim.scenarios.upgrade_diff.verdict import pair, verdict
from tests.conftest import config
from tests.test_upgrade_diff import cfg_of

# the default pair's figures as issue 25 quotes them: throughput halved, mean TTFT +43833%
HALVED = {
    "request_throughput": -50.0,
    "output_throughput": -50.2,
    "mean_ttft_ms": 43833.3,
    "p99_ttft_ms": 900.0,
    "mean_tpot_ms": 5.0,
    "p99_tpot_ms": 20.0,
}
CI = dict.fromkeys(METRICS, 3.0)


def test_throughput_that_fell_beyond_the_noise_leads_the_verdict():
    assert worst_metric(HALVED) == "mean_ttft_ms"  # the old auto rule: the largest change
    chosen = choose_headline("auto", HALVED, CI)
    assert (chosen.metric, chosen.rule) == ("output_throughput", "throughput")


def test_a_named_metric_leads_whatever_moved():
    chosen = choose_headline("p99_tpot_ms", HALVED, CI, {"output_throughput": -30.0})
    assert (chosen.metric, chosen.rule) == ("p99_tpot_ms", "named")


def test_the_measured_regression_leads_when_measurements_are_given():
    rose = dict.fromkeys(METRICS, 0.0) | {"output_throughput": 5.0, "p99_tpot_ms": 2.0}
    measured = {"output_throughput": 1.0, "mean_ttft_ms": -3.0, "p99_tpot_ms": 30.0}
    assert choose_headline("auto", rose, CI, measured).metric == "p99_tpot_ms"
    measured["request_throughput"] = -15.0  # a throughput that fell comes first
    chosen = choose_headline("auto", rose, CI, measured)
    assert (chosen.metric, chosen.rule) == ("request_throughput", "measured")
    better = {"output_throughput": 4.0, "mean_ttft_ms": -9.0}  # nothing regressed: go on
    assert choose_headline("auto", rose, CI, better).rule == "throughput"


def test_throughput_inside_the_noise_falls_back_to_the_largest_change():
    change = dict.fromkeys(METRICS, 0.0) | {"output_throughput": 2.9, "p99_tpot_ms": 49.9}
    change["request_throughput"] = 0.5  # beyond its interval but under the 1% floor
    ci = CI | {"request_throughput": 0.1}
    chosen = choose_headline("auto", change, ci)
    assert (chosen.metric, chosen.rule) == ("p99_tpot_ms", "largest")


def _figures(p99_step_ms: float, mean_step_ms: float = 17.0) -> Figures:
    return Figures(4000, 0, 44.0, 281.0, mean_step_ms, p99_step_ms, 0.3, 0.0, 28284, "k", "f")


def _row(setting: str, effect: float, ci: float, before=1, after=2, metric="p99_tpot_ms"):
    zero = dict.fromkeys(METRICS, 0.0)
    return AttributionRow(
        setting=setting,
        category="defaults",
        before=before,
        after=after,
        rule="rule",
        rule_before="rule",
        effect_pct=zero | {metric: effect},
        ci_pct=zero | {metric: ci},
        added_pct=zero,
        removed_pct=zero,
        inert=False,
        in_minimal_set=False,
        linked=(),
        restore_flag=None,
        restore_note="",
        field=setting,
    )


def _attribution(headline: str, total: float, ci: float, rule: str, **change):
    return SimpleNamespace(
        headline=headline,
        headline_rule=rule,
        change_pct=dict.fromkeys(METRICS, 0.0) | {headline: total} | change,
        change_ci_pct=dict.fromkeys(METRICS, 15.0) | {headline: ci},
    )


def _side(engine: str, p99_tpot: float, p99_step: float, mean_step: float = 17.0) -> Side:
    metrics = dict.fromkeys(METRICS, 1.0) | {"p99_tpot_ms": p99_tpot}
    return Side(engine, metrics, _figures(p99_step, mean_step))


DEFAULT_ROWS = [
    _row("max_num_batched_tokens", 86.7, 19.9, 512, 8192),
    _row("cpu_per_seq_overhead_s", -23.3, 4.8),
    _row("cpu_step_overhead_s", -9.4, 1.7),
    _row("cudagraph_mode", -6.3, 11.2),  # its interval includes zero
    _row("compile", 2.2, 0.5),
]
BEFORE = _side("vllm@0.6.3", 24.73, 25.5, 17.22)
AFTER = _side("vllm@0.10.2", 37.08, 130.9, 17.24)
ALONE = _side("vllm@0.6.3 + max_num_batched_tokens alone", 40.0, 149.7, 20.54)
UPGRADE = pair("vllm@0.6.3", "vllm@0.10.2", DEFAULT_ROWS, UpgradeConfig())


def test_more_than_the_whole_change_is_said_in_words_and_noise_is_left_out():
    r = _attribution("p99_tpot_ms", 49.9, 15.0, "named")
    text = verdict(r, BEFORE, AFTER, DEFAULT_ROWS, UPGRADE, ALONE)
    assert "of the +49.9 points" not in text
    assert (
        "max_num_batched_tokens (512 -> 8192, defaults: +86.7 ± 19.9 points) accounts for "
        "+86.7 points, more than the whole +49.9-point change: other changes offset -36.8 "
        "(cpu_per_seq_overhead_s -23.3 and cpu_step_overhead_s -9.4)"
    ) in text
    assert "cudagraph_mode" not in text  # -6.3 ± 11.2: not distinguishable from noise
    assert text.endswith("Headline: p99 TPOT (upgrade.headline=p99_tpot_ms).")


def test_the_offset_adds_up_as_printed():
    r = _attribution("p99_tpot_ms", 5.62, 1.0, "named")
    text = verdict(r, BEFORE, AFTER, [_row("kernel_tables", 5.66, 0.2)], UPGRADE)
    assert "of the +5.6" not in text  # never "+5.7 of the +5.6-point change"
    assert "+5.7 points, more than the whole +5.6-point change: other changes offset -0.1" in text


def test_an_effect_inside_its_interval_is_never_a_leader():
    rows = [_row("noisy", -6.3, 11.2), _row("real", -4.0, 1.0)]
    r = _attribution("p99_tpot_ms", -10.0, 2.0, "named")
    text = verdict(r, BEFORE, AFTER, rows, UPGRADE)
    assert "real (1 -> 2, defaults: -4.0 ± 1.0 points) accounts for -4.0 of the -10.0" in text
    assert "noisy" not in text
    only_noise = verdict(r, BEFORE, AFTER, rows[:1], UPGRADE)
    assert "no setting's effect on it is distinguishable from noise" in only_noise


def test_the_mechanism_says_which_run_its_figures_come_from():
    r = _attribution("p99_tpot_ms", 49.9, 15.0, "named")
    text = verdict(r, BEFORE, AFTER, DEFAULT_ROWS, UPGRADE, ALONE)
    assert (
        "vllm@0.6.3 with only max_num_batched_tokens changed shows longer worst steps "
        "(p99 step 25.5 ms -> 149.7 ms)"
    ) in text
    quiet = _side("x", 24.8, 25.6)  # the top setting alone moves nothing the figures show
    text = verdict(r, BEFORE, AFTER, DEFAULT_ROWS, UPGRADE, quiet)
    assert (
        "from vllm@0.6.3 to vllm@0.10.2 the simulation shows longer worst steps "
        "(p99 step 25.5 ms -> 130.9 ms)"
    ) in text


def test_the_headline_rule_and_the_regression_it_does_not_explain_are_named():
    r = _attribution(
        "output_throughput", 5.1, 1.8, "throughput", request_throughput=5.1, p99_tpot_ms=49.9
    )
    rows = [_row("max_num_batched_tokens", 6.0, 1.0, 512, 8192, metric="output_throughput")]
    text = verdict(r, BEFORE, AFTER, rows, UPGRADE)
    assert text.startswith("output throughput rose 5.1% ")
    assert text.endswith(
        "Headline: output throughput (it moved beyond the noise; set upgrade.headline to "
        "choose). p99 TPOT rose 49.9%: upgrade.headline=p99_tpot_ms explains it."
    )


def test_a_what_if_is_named_by_its_change():
    rows = [_row("max_num_seqs", -12.0, 2.0, 256, 128)]
    up = UpgradeConfig(after_args={"max_num_seqs": 128, "block_size": None})
    sides = pair("vllm@0.10.2", "vllm@0.10.2", rows, up)
    assert sides.title == "vllm@0.10.2 with max_num_seqs 256 -> 128"
    assert (sides.before, sides.after) == ("vllm@0.10.2", "vllm@0.10.2 with max_num_seqs 128")
    r = _attribution("p99_tpot_ms", -12.0, 2.0, "named")
    text = verdict(r, BEFORE, AFTER, rows, sides)
    assert "on vllm@0.10.2 with max_num_seqs 256 -> 128:" in text
    assert not re.search(r"to vllm@0\.10\.2(?! with max_num_seqs 128)", text), text


@pytest.fixture(scope="module")
def small_run():
    return run_upgrade_diff(cfg_of("upgrade.seeds=2"))


def test_the_report_holds_every_figure_the_verdict_quotes(small_run, tmp_path, capsys):
    s = small_run
    assert s.summary["headline_rule"] in ("measured", "throughput", "largest")
    assert "Headline: " in s.verdict
    text = report_text(s, {"waterfall": "w.png"})
    steps = next(line for line in text.splitlines() if line.startswith("| mean / p99 step |"))
    for x, y in re.findall(r"p99 step ([\d.,]+) ms -> ([\d.,]+) ms", s.verdict):
        assert f"/ {x} ms" in steps and f"/ {y} ms" in steps, (s.verdict, steps)
    noisy = [
        r
        for r in s.attribution
        if not r.inert and abs(r.effect_pct[s.headline]) <= r.ci_pct[s.headline]
    ]
    for r in noisy:
        assert r.setting not in s.verdict
        cell = f"{r.effect_pct[s.headline]:+.1f} ± {r.ci_pct[s.headline]:.1f}"
        assert f"{cell} (noise)" in text or r.ci_pct[s.headline] == 0
    UpgradeDiff().brief(s, tmp_path, False)
    out = capsys.readouterr().out
    assert out.startswith("upgrade_diff: vllm@0.6.3 -> vllm@0.10.2\n")
    if any(r.ci_pct[s.headline] > 0 for r in noisy[:8]):
        assert "not distinguishable from noise" in out


def test_another_headline_reuses_every_kept_simulation():
    cfg = cfg_of()
    other = replace(cfg, upgrade=replace(cfg.upgrade, headline="p99_tpot_ms", seeds=5))
    plan = make_plan(cfg)
    sides = (plan.before, plan.after, plan.changes)
    assert task_key(cfg, (0,), *sides) == task_key(other, (0,), *sides)
    assert task_key(cfg, (0,), *sides) != task_key(cfg, (1,), *sides)
    assert task_key(cfg, (0,), *sides) != task_key(replace(cfg, seed=1), (0,), *sides)


def test_progress_lines_for_a_log(monkeypatch):
    monkeypatch.setattr(console, "SHOW_AFTER_S", 0.0)
    log = io.StringIO()
    with console.ProgressLines(what="runs", stream=log) as lines:
        for done in range(1, 41):
            lines.update_count(done, 40)
    printed = log.getvalue().splitlines()
    assert len(printed) == 10
    assert re.fullmatch(r"simulated 4/40 runs, \d+ s", printed[0])
    assert printed[-1].startswith("simulated 40/40 runs, ")


def test_progress_lines_when_the_total_is_not_known(monkeypatch):
    """A search that decides its runs as it goes (disagg, capacity) reports no total: the
    lines count runs (this raised TypeError on None)."""
    monkeypatch.setattr(console, "SHOW_AFTER_S", 0.0)
    log = io.StringIO()
    with console.ProgressLines(what="runs", stream=log) as lines:
        for done in range(1, 26):
            lines.update_count(done, None)
    printed = log.getvalue().splitlines()
    assert [line.split(",")[0] for line in printed] == ["simulated 10 runs", "simulated 20 runs"]


class _Counting:
    counts = "runs"

    def run(self, cfg, out_dir, bar):
        for done in range(1, 21):
            bar.update_count(done, 20)
        return SimpleNamespace(summary={"done": 20})

    def write(self, result, out_dir):
        pass

    def brief(self, result, out_dir, sweeping):
        pass


def test_a_run_whose_stderr_is_not_a_terminal_prints_progress_lines(monkeypatch, tmp_path):
    monkeypatch.setattr(console, "SHOW_AFTER_S", 0.0)
    log = io.StringIO()  # not a TTY
    monkeypatch.setattr(sys, "stderr", log)
    run_dir = RunDir.claim(tmp_path, "this test")
    try:
        assert runner._run(_Counting(), config(), tmp_path, False, run_dir) == {"done": 20}
        assert "simulated 20/20 runs" in log.getvalue()
        quiet = replace(config(), output=replace(config().output, progress=False))
        log.seek(0), log.truncate(0)
        runner._run(_Counting(), quiet, tmp_path, False, run_dir)
        runner._run(_Counting(), config(), tmp_path, True, run_dir)  # a sweep prints per point
    finally:
        run_dir.release()
    assert log.getvalue() == ""
