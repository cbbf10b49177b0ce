"""Engine CPU lines by engine core (calibration/engine_overheads.yaml `engine`): a vLLM 0.8-0.10
run that falls back to V0 is priced with V0's CPU time and executor, not the V1 line of its
release (issue 43, item 2)."""

from __future__ import annotations

import pytest

from sim.engines.overheads import _table, basis, cpu_overheads, executor_s
from sim.engines.versions import version_tuple

V0_06 = {"cpu_step_overhead_s": 2e-3, "cpu_per_seq_overhead_s": 3.5e-5}
V1_08 = {"cpu_step_overhead_s": 1e-3, "cpu_per_seq_overhead_s": 1.5e-5}


def _pick(values: dict, keys) -> dict:
    return {k: pytest.approx(values[k]) for k in keys}


@pytest.mark.parametrize("release", ["0.8.3", "0.9.0", "0.10.1"])
def test_a_v0_fallback_takes_the_v0_line(release):
    v0, rule = cpu_overheads("vllm", release, "vllm_v0")
    assert _pick(v0, V0_06) == V0_06
    assert "V0 0.6.0+" in rule
    assert executor_s("vllm", release, 8, "vllm_v0") == pytest.approx(2e-4 + 7 * 1e-5)
    assert "async output processing" in basis("vllm", release, "vllm_v0")
    v1, rule = cpu_overheads("vllm", release, "vllm_v1")
    assert _pick(v1, V1_08) == V1_08
    assert "V1" in rule
    assert executor_s("vllm", release, 8, "vllm_v1") == pytest.approx(5e-5 + 7 * 2e-5)


def test_without_the_scheduler_a_release_takes_its_own_line():
    for release, expected in (("0.7.3", V0_06), ("0.8.3", V1_08)):
        values, rule = cpu_overheads("vllm", release)
        assert _pick(values, expected) == expected
        assert " V0 " not in rule and " V1 " not in rule
    assert executor_s("vllm", "0.8.3", 8) == executor_s("vllm", "0.8.3", 8, "vllm_v1")
    assert executor_s("vllm", "0.8.3", 1, "vllm_v0") == 0.0


def test_v0_and_v1_releases_before_and_after_keep_their_lines():
    assert cpu_overheads("vllm", "0.5.5", "vllm_v0")[0]["cpu_step_overhead_s"] == 3e-3
    assert cpu_overheads("vllm", "0.14.0", "vllm_v1")[0]["cpu_exposed_s"] == pytest.approx(2e-4)
    # engines whose lines name no core ignore the scheduler
    assert cpu_overheads("sglang", "0.5.9", "vllm_v0") == cpu_overheads("sglang", "0.5.9")


def test_every_vllm_line_names_its_engine_core_in_release_order():
    lines = _table()["vllm"]
    assert {x["engine"] for x in lines} == {"v0", "v1"}
    for core in ("v0", "v1"):
        starts = [version_tuple(str(x["from"])) for x in lines if x["engine"] == core]
        assert starts == sorted(starts)
    last_v0 = max(version_tuple(str(x["from"])) for x in lines if x["engine"] == "v0")
    first_v1 = min(version_tuple(str(x["from"])) for x in lines if x["engine"] == "v1")
    assert last_v0 < first_v1 == (0, 8, 0)  # VLLM_USE_V1 defaults to 1 from 0.8.0


def test_a_run_that_falls_back_to_v0_is_priced_with_v0s_executor():
    """resolve() hands the run's own engine core to the executor's line: vLLM 0.9.2 with FP8 KV
    on an A100 (no FlashAttention 3) runs V0, whose TP8 executor is 200 us + 7 x 10 us."""
    from sim.engines.resolve import resolve
    from sim.specs.hardware import load_hardware
    from sim.specs.model_config import load_model

    hw, model = load_hardware("a100-80gb"), load_model("llama-3.1-70b")
    v0 = resolve("vllm@0.9.2", hw, model, 8, "server", {"kv_cache_dtype": "fp8"})
    v1 = resolve("vllm@0.9.2", hw, model, 8, "server", {})
    assert (v0.scheduler, v1.scheduler) == ("vllm_v0", "vllm_v1")
    assert v0.cpu_executor_s == pytest.approx(executor_s("vllm", "0.9.2", 8, "vllm_v0"))
    assert v1.cpu_executor_s == pytest.approx(executor_s("vllm", "0.9.2", 8, "vllm_v1"))
    assert v0.cpu_executor_s > v1.cpu_executor_s


def test_a_run_that_falls_back_to_v0_takes_v0s_cpu_time_per_step():
    """vllm.defaults() asks for the CPU line of the run's own engine core."""
    from sim.engines.resolve import resolve
    from sim.specs.hardware import load_hardware
    from sim.specs.model_config import load_model

    hw, model = load_hardware("a100-80gb"), load_model("llama-3.1-8b")
    v0 = resolve("vllm@0.9.2", hw, model, 1, "server", {"kv_cache_dtype": "fp8"})
    v1 = resolve("vllm@0.9.2", hw, model, 1, "server", {})
    assert v0.cpu_step_overhead_s == pytest.approx(V0_06["cpu_step_overhead_s"])
    assert v1.cpu_step_overhead_s == pytest.approx(V1_08["cpu_step_overhead_s"])
    assert "V0" in v0.rules["cpu_step_overhead_s"]
