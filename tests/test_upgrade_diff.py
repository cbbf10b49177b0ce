"""scenario=upgrade_diff end to end: the command line, baselines, measurements, what-ifs."""

from __future__ import annotations

import json
import re

import pytest

from sim.cli import compose_config, to_sim_config
from sim.errors import UserError
from sim.scenarios.upgrade_diff.headline import FLOOR_PCT, choose_headline, regressed
from sim.scenarios.upgrade_diff.outcomes import METRICS
from sim.scenarios.upgrade_diff.plan import make_plan
from sim.scenarios.upgrade_diff.restore import restore_flag
from sim.scenarios.upgrade_diff.study import run_upgrade_diff
from tests.test_cli import sim

SMALL = [
    "workload.num_requests=40",
    "workload.rate=30",
    "upgrade.seeds=2",
    "upgrade.budget=8",
    "upgrade.jobs=1",
    "upgrade.loads=[]",
]


def cfg_of(*overrides):
    return to_sim_config(compose_config(["scenario=upgrade_diff", *SMALL, *overrides]))


def _efficient(s: dict) -> None:
    for m in METRICS:
        effects = sum(row["effect_pct"][m] for row in s["attribution"])
        inert = s["shapley"]["inert_residual_pct"][m]
        assert effects + inert == pytest.approx(s["change_pct"][m], abs=1e-9)
        cats = sum(c[m] for c in s["by_category_pct"].values())
        assert cats + s["interaction_pct"][m] == pytest.approx(s["change_pct"][m], abs=1e-9)


def test_the_default_pair_from_the_command_line(tmp_path):
    out = tmp_path / "ud"
    args = [a for a in SMALL if not a.startswith(("upgrade.jobs", "upgrade.loads"))]
    # the CLI with its progress shown from the start (SHOW_AFTER_S: a study this small may
    # end within the 2 s after which a log gets its lines)
    show_at_once = (
        "import runpy, sim.report.console as c; c.SHOW_AFTER_S = 0.0; "
        "runpy.run_module('sim', run_name='__main__')"
    )
    r = sim(
        "-c",
        show_at_once,
        "scenario=upgrade_diff",
        *args,
        "upgrade.loads=[0.5,1.0]",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
        module=None,
    )
    assert r.returncode == 0, r.stderr
    assert "Verdict:" in r.stdout and "Headline: " in r.stdout
    assert re.search(r"simulated \d+/\d+ runs, \d+ s", r.stderr), r.stderr  # not a TTY: lines
    for name in ("summary.json", "report.md", "attribution.csv", "waterfall.png", "load_sweep.png"):
        assert (out / name).is_file(), name
    s = json.loads((out / "summary.json").read_text())
    for key in (
        "before",
        "after",
        "change_pct",
        "attribution",
        "by_category_pct",
        "interaction_pct",
        "unexplained_pct",
        "simulations_run",
    ):
        assert key in s, key
    assert set(s["change_pct"]) == set(METRICS)
    assert s["before"]["engine"] == "vllm@0.6.3" and s["after"]["engine"] == "vllm@0.10.2"
    row = s["attribution"][0]
    for key in ("setting", "category", "before", "after", "rule", "effect_pct", "ci_pct"):
        assert key in row, key
    assert set(row["effect_pct"]) == set(METRICS)
    head = s["headline"]
    effects = [abs(x["effect_pct"][head]) for x in s["attribution"]]
    assert effects == sorted(effects, reverse=True)  # sorted by effect
    names = {x["setting"] for x in s["attribution"]}
    assert {"max_num_batched_tokens", "enable_prefix_caching", "scheduler"} <= names
    assert "max_prefill_tokens" not in names  # derived from the budget: one change with it
    assert set(s["by_category_pct"]) == {"defaults", "kernels", "scheduling", "memory"}
    assert s["unexplained_pct"] is None  # nothing measured
    assert s["simulations_run"] > 2 * len(names)
    assert [p["factor"] for p in s["load_sweep"]["points"]] == [0.5, 1.0]
    _efficient(s)
    report = (out / "report.md").read_text()
    assert report.startswith("# Upgrade diff: vllm@0.6.3 -> vllm@0.10.2\n\n**")
    assert s["verdict"] in report and "vllm serve" in report


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("upgrade.baseline=none", "needs a pre-upgrade baseline"),
        ("upgrade.before=null", "needs a pre-upgrade baseline"),
        ("upgrade.after=vllm@9.9", "outside the known range"),
        ("upgrade.baseline=/no/such/run", "no such file or run dir"),
        ("upgrade.before_args.max_num_seqs=-3", "max_num_seqs"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(tmp_path, override, message):
    r = sim("scenario=upgrade_diff", override, f"hydra.run.dir={tmp_path / 'x'}", cwd=tmp_path)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x" / "summary.json").exists()


def test_one_version_against_itself_is_zero_everywhere():
    s = run_upgrade_diff(cfg_of("upgrade.before=vllm@0.10.2", "upgrade.after=vllm@0.10.2")).summary
    assert s["attribution"] == [] and s["minimal_set"] == []
    assert s["change_pct"] == {m: 0.0 for m in METRICS}
    assert s["interaction_pct"] == {m: 0.0 for m in METRICS}
    assert all(v == 0.0 for c in s["by_category_pct"].values() for v in c.values())
    assert s["simulations_run"] == 2  # one run per seed, nothing else
    assert "No setting differs" in s["verdict"]


def test_a_what_if_is_an_upgrade_of_one_argument():
    """Turning prefix caching off on a workload with a shared system prompt: one change, the
    user's override (of a setting in the defaults category), that raises TTFT, restored by its
    own flag."""
    s = run_upgrade_diff(
        cfg_of(
            "upgrade.before=vllm@0.10.2",
            "upgrade.after=vllm@0.10.2",
            "upgrade.after_args.enable_prefix_caching=false",
            "workload.shared_prefix_tokens=1024",
        )
    ).summary
    (row,) = s["attribution"]
    assert (row["setting"], row["category"], row["before"], row["after"]) == (
        "enable_prefix_caching",
        "user override",
        True,
        False,
    )
    assert row["setting_category"] == "defaults"
    assert row["effect_pct"]["mean_ttft_ms"] > 10
    assert row["effect_pct"]["mean_ttft_ms"] == pytest.approx(s["change_pct"]["mean_ttft_ms"])
    assert row["restore_flag"] == "--enable-prefix-caching"
    assert s["minimal_set"] == ["enable_prefix_caching"]
    assert s["before"]["sim"]["prefix_cache_hit_rate"] > 0.3
    assert s["after"]["sim"]["prefix_cache_hit_rate"] == 0.0


def test_recorded_baseline_and_measured_results(tmp_path):
    """Run dirs of each version as the baseline and the measurements: the simulated before
    matches its own earlier run exactly, and the measured change is all explained."""
    common = ["workload.num_requests=40", "workload.rate=30"]
    for name, engine in (("before", "vllm@0.8.5"), ("after", "vllm@0.10.2")):
        r = sim(f"engine={engine}", *common, f"hydra.run.dir={tmp_path / name}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    cfg = cfg_of(
        "upgrade.before=vllm@0.8.5",
        f"upgrade.baseline={tmp_path / 'before'}",
        f"upgrade.measured_after={tmp_path / 'after'}",
        "upgrade.seeds=1",
    )
    s = run_upgrade_diff(cfg).summary
    assert s["baseline"]["kind"] == "run_dir"
    assert all(abs(v) < 1e-9 for v in s["baseline"]["match_pct"].values())
    assert set(s["unexplained_pct"]) == set(METRICS)
    assert all(abs(v) < 1e-9 for v in s["unexplained_pct"].values())
    measured = s["measured"]["change_pct"]  # auto reads the measured change first
    chosen = choose_headline("auto", s["change_pct"], s["change_ci_pct"], measured)
    assert (s["headline"], s["headline_rule"]) == (chosen.metric, chosen.rule)
    assert chosen.rule == "measured" or regressed(measured, FLOOR_PCT) is None
    # a baseline of another configuration is refused with the overrides that fix it
    with pytest.raises(UserError, match=r"workload.rate=30"):
        make_plan(
            cfg_of(
                "upgrade.before=vllm@0.8.5",
                f"upgrade.baseline={tmp_path / 'before'}",
                "workload.rate=5",
            )
        )
    with pytest.raises(UserError, match=r"upgrade.before=vllm@0.8.5"):
        make_plan(cfg_of(f"upgrade.baseline={tmp_path / 'before'}"))


def test_a_bench_result_as_baseline_replays_its_requests(tmp_path):
    bench = {
        "backend": "vllm",
        "input_lens": [300, 500, 420, 380] * 8,
        "output_lens": [40, 60, 50, 30] * 8,
        "request_rate": 8.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "request_throughput": 7.5,
        "output_throughput": 340.0,
        "mean_ttft_ms": 40.0,
        "p99_ttft_ms": 90.0,
        "mean_tpot_ms": 9.0,
        "p99_tpot_ms": 12.0,
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench))
    s = run_upgrade_diff(cfg_of(f"upgrade.baseline={path}", "upgrade.seeds=1")).summary
    assert s["baseline"]["kind"] == "bench_json"
    assert set(s["baseline"]["match_pct"]) == set(METRICS)
    assert s["before"]["completed"] == 32  # the file's requests, not the configured 40
    assert any("replayed" in n for n in s["notes"])
    (tmp_path / "bad.json").write_text(json.dumps({"input_lens": [1]}))
    with pytest.raises(UserError, match="not a vllm bench serve result"):
        make_plan(cfg_of(f"upgrade.baseline={tmp_path / 'bad.json'}"))


@pytest.mark.parametrize(
    "args",
    [
        ("upgrade.before=sglang@0.4.6", "upgrade.after=sglang@0.5.23"),
        # TensorRT-LLM 1.0 -> 1.4 changed no default we know of: a what-if on the newer one
        (
            "upgrade.before=trtllm@1.0.0",
            "upgrade.after=trtllm@1.4.0",
            "upgrade.after_args.enable_chunked_prefill=true",
            "upgrade.after_args.capacity_scheduler_policy=MAX_UTILIZATION",
        ),
    ],
)
def test_other_engines_pairs(args):
    s = run_upgrade_diff(cfg_of(*args)).summary
    assert s["attribution"], "the two sides differ"
    _efficient(s)
    for row in s["attribution"]:
        assert row["restore_flag"] or row["restore_note"]


def test_same_config_same_summary():
    a = run_upgrade_diff(cfg_of("upgrade.seeds=1")).summary
    b = run_upgrade_diff(cfg_of("upgrade.seeds=1")).summary
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_restore_flags_speak_each_engines_language():
    cfg = cfg_of()
    plan = make_plan(cfg)
    flags = {c.name: restore_flag(plan.after, c)[0] for c in plan.changes}
    assert flags["max_num_batched_tokens"] == "--max-num-batched-tokens 512"
    assert flags["enable_prefix_caching"] == "--no-enable-prefix-caching"
    assert flags["attention_backend"] == (
        "VLLM_ATTENTION_BACKEND=FLASH_ATTN VLLM_FLASH_ATTN_VERSION=2"
    )
    assert flags["scheduler"] == "VLLM_USE_V1=0"
    assert flags["compile"] == "-O0"
    sg = make_plan(cfg_of("upgrade.before=sglang@0.4.6", "upgrade.after=sglang@0.5.23"))
    sg_flags = {c.name: restore_flag(sg.after, c) for c in sg.changes}
    for flag, _ in sg_flags.values():
        assert flag is None or flag.startswith(("--", "SGLANG"))
    old = make_plan(cfg_of("upgrade.before=sglang@0.3.6", "upgrade.after=sglang@0.4.6"))
    backend = next(c for c in old.changes if c.name == "attention_backend")
    assert restore_flag(old.after, backend)[0] == "--attention-backend flashinfer"
