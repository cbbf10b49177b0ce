"""upgrade_diff says what its answer cannot see (issue 41): releases resolved with another
release's rules, an overloaded workload (and workload.rate=auto below capacity), kernel changes
no table prices, every headline's verdict kept in a run dir, a readable waterfall, an honest
progress count, and the small ones (an empty header, "worst", a user's override's category)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

import sim.scenarios.upgrade_diff.report as report
from sim.cli import compose_config, to_sim_config
from sim.config import UpgradeConfig
from sim.engines.resolve import parse_engine_spec
from sim.errors import UserError
from sim.report.console import ProgressBar
from sim.scenarios.upgrade_diff.headline import LARGEST
from sim.scenarios.upgrade_diff.outcomes import METRICS, Figures
from sim.scenarios.upgrade_diff.plan import make_plan
from sim.scenarios.upgrade_diff.result import Side
from sim.scenarios.upgrade_diff.scenario import UpgradeDiff
from sim.scenarios.upgrade_diff.study import run_upgrade_diff
from sim.scenarios.upgrade_diff.verdict import headline_words, mechanism, pair, verdict
from tests.test_cli import sim

QUICK = ["upgrade.seeds=1", "upgrade.budget=8", "upgrade.jobs=1", "upgrade.loads=[]"]
ISSUE = [  # issue 41's overloaded study: 16 req/s against a capacity of ~7.6
    "upgrade.before=vllm@0.8.4",
    "upgrade.after=vllm@0.8.5",
    "hardware=a100-80gb",
    "model=qwen3-8b",
]


def cfg_of(*overrides):
    return to_sim_config(compose_config(["scenario=upgrade_diff", *QUICK, *overrides]))


@pytest.fixture(scope="module")
def default_pair():
    """The main job's pair on a small workload: FA2 -> FA3 on an H100 without an FA2 table."""
    return run_upgrade_diff(cfg_of("workload.num_requests=50"))


# item 2: a release with no rule set of its own, two releases with the same rule set


def _same_rules_pair() -> tuple[str, str, str]:
    """Two published vLLM releases the catalogue resolves with one rule set, and that set."""
    for minor in range(4, 12):
        found: dict[str, list[str]] = {}
        for patch in range(6):
            try:
                _, version, rules = parse_engine_spec(f"vllm@0.{minor}.{patch}")
            except UserError:
                continue
            found.setdefault(rules, []).append(version)
        for rules, versions in found.items():
            if len(versions) > 1:
                return versions[0], versions[1], rules
    raise AssertionError("no two vLLM releases share a rule set")


def test_a_release_run_with_another_releases_rules_says_whose():
    a, b, rules = _same_rules_pair()
    late = b if b != rules else a  # the one without a rule set of its own
    s = run_upgrade_diff(
        cfg_of(
            f"upgrade.before=vllm@{late}", "upgrade.after=vllm@0.8.5", "workload.num_requests=40"
        )
    ).summary
    words = f"vllm@{late} has no rule set of its own: it runs with vllm {rules}'s rules"
    assert words in s["verdict"]
    assert any(words in note for note in s["notes"])  # report.md's list and the console
    assert s["before"]["rule_set"] == rules and s["after"]["rule_set"] == "0.8.5"


def test_two_releases_with_one_rule_set_say_what_the_catalogue_cannot_see():
    a, b, rules = _same_rules_pair()
    s = run_upgrade_diff(
        cfg_of(f"upgrade.before=vllm@{a}", f"upgrade.after=vllm@{b}", "workload.num_requests=40")
    ).summary
    assert f"vllm@{a} and vllm@{b} both resolve to vllm {rules}'s rules" in s["verdict"]
    assert "is not modelled" in s["verdict"] and "is not in this answer" in s["verdict"]


def test_releases_whose_rules_give_the_same_settings_say_what_is_not_modelled():
    figures = Figures(4000, 0, 44.0, 281.0, 17.0, 25.0, 0.3, 0.0, 28284, "k", "vllm")
    metrics = dict.fromkeys(METRICS, 1.0)
    before = Side("vllm@0.8.3", metrics, figures, rule_set="0.8.2")
    after = Side("vllm@0.8.5", metrics, figures, rule_set="0.8.5")
    r = SimpleNamespace(headline="mean_ttft_ms", change_pct=dict.fromkeys(METRICS, 0.0))
    text = verdict(r, before, after, [], pair(before.engine, after.engine, [], UpgradeConfig()))
    assert text.startswith("No setting differs from vllm@0.8.3 to vllm@0.8.5: ")
    assert "vllm@0.8.3 has no rule set of its own: it runs with vllm 0.8.2's rules." in text
    assert "Their rules give the same settings on this GPU and model" in text
    assert "is not modelled" in text


# item 3: an overloaded workload, and workload.rate=auto


def test_an_overloaded_study_says_so_first(tmp_path, capsys):
    result = run_upgrade_diff(cfg_of(*ISSUE, "workload.num_requests=120", "workload.rate=30"))
    s = result.summary
    for side in ("before", "after"):
        o = s[side]["sim"]["overload"]  # python -m sim's sim.overload, per seed
        assert o["overloaded"] is True and o["overloaded_seeds"] == 1
        assert o["per_seed"][0]["criterion"] and o["served_rate"] < o["offered_rate"] / 2
    assert s["verdict"].startswith("Overloaded: vllm@0.8.4 served ")
    assert "workload.rate=auto" in s["verdict"]
    UpgradeDiff().brief(result, tmp_path, False)  # the console: python -m sim's warning too
    assert "vllm@0.8.4 (seed 0): warning: overloaded: this configuration served" in (
        capsys.readouterr().out
    )


def test_auto_rate_is_a_fraction_of_the_before_versions_capacity(tmp_path):
    overrides = [*ISSUE, "workload.num_requests=200", "workload.rate=auto", "upgrade.loads=[1.0]"]
    s = run_upgrade_diff(cfg_of(*overrides)).summary
    # the capacity is a real run: the before version with every request queued at once
    r = sim(
        "engine=vllm@0.8.4",
        "hardware=a100-80gb",
        "model=qwen3-8b",
        "workload=burst",
        "workload.num_requests=200",
        f"hydra.run.dir={tmp_path / 'burst'}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    burst = json.loads((tmp_path / "burst" / "summary.json").read_text())
    auto = s["auto_rate"]
    assert auto["capacity_rps"] == pytest.approx(burst["request_throughput"], rel=1e-9)
    assert auto["rate"] == pytest.approx(0.7 * auto["capacity_rps"], abs=1e-4)
    assert s["config"]["workload"]["rate"] == auto["rate"]
    assert any(n.startswith(f"workload.rate=auto: {auto['rate']:.2f} req/s") for n in s["notes"])
    assert s["before"]["sim"]["overload"]["overloaded"] is False
    assert s["load_sweep"]["capacity_rps"] == auto["capacity_rps"]  # one capacity run, shared
    attributed = s["shapley"]["attribution_simulations"]
    assert s["simulations_run"] == attributed + 1 + 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["workload.rate=auto"], "only scenario=upgrade_diff chooses a rate"),
        (["scenario=capacity", "workload.rate=auto"], "only scenario=upgrade_diff"),
        (["workload.rate=fast"], "expected a number or auto"),
        (
            ["scenario=upgrade_diff", "workload=closed_loop", "workload.rate=auto"],
            "workload.rate=auto needs a workload with a request rate",
        ),
        (
            ["scenario=upgrade_diff", "upgrade.auto_rate_fraction=1.5", "workload.rate=auto"],
            "upgrade.auto_rate_fraction=1.5: must be <= 1.0",
        ),
    ],
)
def test_auto_rate_elsewhere_is_one_line(tmp_path, overrides, message):
    r = sim(*overrides, f"hydra.run.dir={tmp_path / 'x'}", cwd=tmp_path)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_auto_rate_with_a_recorded_baseline_is_refused(tmp_path):
    (tmp_path / "bench.json").write_text("{}")
    with pytest.raises(UserError, match="the recorded baseline ran at its own rate"):
        make_plan(cfg_of("workload.rate=auto", f"upgrade.baseline={tmp_path / 'bench.json'}"))


# item 6: a kernel change priced with the same table is no evidence


def test_a_kernel_change_without_a_table_is_said_and_never_a_cause(default_pair):
    s = default_pair.summary
    (u,) = s["unpriced"]
    assert (u["setting"], u["before"], u["after"]) == (
        "attention_backend",
        "FLASH_ATTN_FA2",
        "FLASH_ATTN_FA3",
    )
    assert u["missing_tables"] == ["attention_decode/FLASH_ATTN_FA2/bf16"]
    assert "attention_backend (FLASH_ATTN_FA2 -> FLASH_ATTN_FA3) is not priced" in s["verdict"]
    assert "a different kernel" not in s["verdict"] and "nearest to" not in s["verdict"]


def test_a_table_standing_in_for_another_is_not_a_different_kernel():
    def figures(kernel: str) -> Figures:
        return Figures(4000, 0, 44.0, 281.0, 17.0, 25.0, 0.3, 0.0, 28284, kernel, "vllm")

    fa3 = "attention_decode/FLASH_ATTN_FA3/bf16"
    stand_in = f"{fa3} (nearest to attention_decode/FLASH_ATTN_FA2/bf16)"
    assert mechanism(figures(stand_in), figures(fa3)) == []
    flashinfer = "attention_decode/FLASHINFER/bf16"
    assert mechanism(figures(flashinfer), figures(fa3)) == [
        f"a different kernel ({flashinfer} -> {fa3})"
    ]


# item 8: a rerun with another headline keeps the first verdict


def test_every_headline_asked_in_a_run_dir_keeps_its_verdict(tmp_path):
    out = tmp_path / "ud"
    first = cfg_of("workload.num_requests=40", "upgrade.headline=mean_ttft_ms")
    second = replace(first, upgrade=replace(first.upgrade, headline="p99_tpot_ms"))
    verdicts = []
    for cfg in (first, second):
        scenario = UpgradeDiff()
        result = scenario.run(cfg, out, ProgressBar(enabled=False))
        scenario.write(result, out)
        verdicts.append(result.verdict)
    s = json.loads((out / "summary.json").read_text())
    assert s["headline"] == "p99_tpot_ms" and s["verdict"] == verdicts[1]  # the latest on top
    assert list(s["verdicts"]) == ["mean_ttft_ms", "p99_tpot_ms"]
    assert [v["verdict"] for v in s["verdicts"].values()] == verdicts
    report_md = (out / "report.md").read_text()
    assert all(v in report_md for v in verdicts)
    other = replace(second, upgrade=replace(second.upgrade, seeds=2))  # another study: its own
    result = UpgradeDiff().run(other, out, ProgressBar(enabled=False))
    assert result.summary["verdicts"] == {"p99_tpot_ms": result.verdict_record}


# item 11: a readable waterfall, an honest progress count


def test_the_waterfall_axis_spans_its_bars_and_labels_them(default_pair, monkeypatch, tmp_path):
    drawn = {}
    monkeypatch.setattr(report, "save_png", lambda fig, path: drawn.setdefault("fig", fig) and "")
    report.plot_waterfall(default_pair, tmp_path / "w.png")
    (ax,) = drawn["fig"].axes
    m = default_pair.headline
    base, after = default_pair.before.metrics[m], default_pair.after.metrics[m]
    lo, hi = ax.get_ylim()
    assert 0 < lo < min(base, after) and hi > max(base, after)
    assert (hi - lo) < 0.5 * max(base, after)  # a 6% change fills the axis, not a sliver
    labels = {t.get_text() for t in ax.texts}
    assert f"{base:,.0f}" in labels and f"{after:,.0f}" in labels
    top = next(r for r in default_pair.attribution if not r.inert)
    assert f"{top.effect_pct[m]:+.1f} pts" in labels


def test_the_progress_count_goes_one_way_and_ends_at_the_simulations_run():
    seen = []
    cfg = cfg_of("workload.num_requests=40", "upgrade.loads=[0.5,1.0]")
    s = run_upgrade_diff(cfg, progress=lambda done, total: seen.append((done, total))).summary
    done, totals = [d for d, _ in seen], [t for _, t in seen]
    assert done == sorted(done) and totals == sorted(totals)
    assert all(d <= t for d, t in seen)
    assert seen[-1] == (s["simulations_run"], s["simulations_run"])
    assert totals[0] >= s["shapley"]["attribution_simulations"] // 2 + 4  # the sweep from the start


def test_a_closed_loop_study_counts_each_simulation_once(tmp_path):
    """A concurrency sweep's point at the study's own concurrency is the attribution's first
    seed's pair, kept already: the count reported (and the progress' last total) is the
    simulations kept in the run dir, and a closed loop's header gives no request rate."""
    out = tmp_path / "ud"
    cfg = cfg_of("workload=closed_loop", "workload.concurrency=8", "workload.num_requests=40",
                 "upgrade.loads=[0.5,1.0]")  # fmt: skip
    seen = []
    scenario = UpgradeDiff()
    result = scenario.run(cfg, out, ProgressBar(enabled=False))
    scenario.write(result, out)
    kept = len(list((out / "simulations").glob("*.json")))
    assert result.simulations_run == kept
    rerun = run_upgrade_diff(
        cfg, progress=lambda d, t: seen.append((d, t)), cache=out / "simulations"
    )
    assert rerun.simulations_run == kept and seen[-1] == (kept, kept)
    header = (out / "report.md").read_text()
    assert "concurrency 8" in header and "req/s, concurrency" not in header


def test_a_zero_effect_is_no_noise_on_the_console_as_in_the_report(default_pair):
    """An effect of +0.0 ± 0.0 is not 'not distinguishable from noise' on one side only."""
    from sim.scenarios.upgrade_diff.result import AttributionRow
    from sim.scenarios.upgrade_diff.text import _pm
    from sim.scenarios.upgrade_diff.verdict import noise

    row = next(r for r in default_pair.attribution if not r.inert)
    m = default_pair.headline
    zero = replace(row, effect_pct={**row.effect_pct, m: 0.0}, ci_pct={**row.ci_pct, m: 0.0})
    assert isinstance(zero, AttributionRow)
    assert not noise(zero, m) and "(noise)" not in _pm(0.0, 0.0)
    wide = replace(row, effect_pct={**row.effect_pct, m: 0.1}, ci_pct={**row.ci_pct, m: 0.5})
    assert noise(wide, m) and "(noise)" in _pm(0.1, 0.5)


# item 12: the small ones


def test_nothing_that_differs_prints_no_empty_header(tmp_path, capsys):
    result = run_upgrade_diff(
        cfg_of(
            "upgrade.before=vllm@0.10.2", "upgrade.after=vllm@0.10.2", "workload.num_requests=40"
        )
    )
    UpgradeDiff().brief(result, tmp_path, False)
    out = capsys.readouterr().out
    assert "by setting" not in out and "No setting differs" in out


def test_the_headline_rule_says_worse_not_worst():
    r = SimpleNamespace(
        headline="mean_tpot_ms",
        headline_rule=LARGEST,
        change_pct=dict.fromkeys(METRICS, 0.0) | {"mean_tpot_ms": 5.6},
        change_ci_pct=dict.fromkeys(METRICS, 1.0),
    )
    text = headline_words(r)
    assert "worst" not in text and "it had the largest adverse change" in text


def test_a_users_override_is_not_a_changed_default():
    s = run_upgrade_diff(
        cfg_of(
            "upgrade.before=vllm@0.10.2",
            "upgrade.after=vllm@0.10.2",
            "upgrade.after_args.enable_prefix_caching=false",
            "workload.shared_prefix_tokens=1024",
            "workload.num_requests=40",
        )
    ).summary
    (row,) = s["attribution"]
    assert (row["category"], row["setting_category"]) == ("user override", "defaults")
    assert "user override: " in s["verdict"] and "defaults:" not in s["verdict"]
    assert s["by_category_pct"]["user override"] == pytest.approx(
        {m: row["effect_pct"][m] for m in METRICS}
    )
    assert s["by_category_pct"]["defaults"] == dict.fromkeys(METRICS, 0.0)


def test_an_mla_models_attention_is_named_in_the_figures():
    """DeepSeek's MLA attention is priced by the roofline prior (priced_with "mla"): the
    study's figures say so instead of an empty cell."""
    from sim.run.simulate import simulate
    from sim.scenarios.upgrade_diff.outcomes import outcome
    from tests.conftest import config

    cfg = config({"num_requests": 8}, model="deepseek-v3", hardware="h200",
                 parallel={"tp": 8}, cost_profile="auto")  # fmt: skip
    assert outcome(simulate(cfg))["sim"]["attention_kernel"] == "prior"
