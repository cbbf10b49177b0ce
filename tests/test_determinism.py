"""The same config and seed give byte-identical outputs."""

from __future__ import annotations

import json

from sim.config import SimConfig
from sim.run.simulate import simulate
from tests.conftest import RUN_FILES, run_task_into


def _run(tmp_path, name, monkeypatch, *overrides):
    out = tmp_path / name
    run_task_into(out, monkeypatch, ["workload.num_requests=150", *overrides])
    return out


def test_same_seed_same_bytes(tmp_path, monkeypatch):
    a = _run(tmp_path, "a", monkeypatch)
    b = _run(tmp_path, "b", monkeypatch)
    for name in RUN_FILES[1:]:  # summary.json differs in sim.wall_time_s and cpu_time_s only
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for s in (sa, sb):
        s["sim"].pop("wall_time_s"), s["sim"].pop("cpu_time_s")
    assert sa == sb


def test_another_seed_changes_the_workload(tmp_path, monkeypatch):
    a = _run(tmp_path, "a", monkeypatch)
    c = _run(tmp_path, "c", monkeypatch, "seed=1")
    assert (a / "requests.parquet").read_bytes() != (c / "requests.parquet").read_bytes()


def test_every_engine_family_is_deterministic(tmp_path, monkeypatch):
    for engine in ("vllm@0.6.6", "sglang", "trtllm", "static"):
        runs = [
            _run(tmp_path, f"{engine}-{k}", monkeypatch, f"engine={engine}", "output.report=false")
            for k in range(2)
        ]
        for name in ("requests.parquet", "steps.parquet"):
            assert (runs[0] / name).read_bytes() == (runs[1] / name).read_bytes(), (engine, name)


def test_runs_sharing_a_process_price_alike():
    """Cost models of one process that price the same model alike share their per-token and
    decode memos (a sweep's points in one worker): a run after another gives the same bits
    and names the same tables, in the same order, as the same run alone."""
    import sim.cost.attention as attention  # the process-wide memos, emptied for a fresh run
    import sim.cost.step as step

    def config(budget: int) -> SimConfig:
        return SimConfig.from_mapping({
            "engine_args": {"max_num_batched_tokens": budget, "max_num_seqs": 32},
            "workload": {"kind": "poisson", "rate": 20.0, "num_requests": 60},
            "output": {"report": False, "progress": False},
        })  # fmt: skip

    step._TOKEN_MEMOS.clear()
    attention._SHARED.clear()
    alone = simulate(config(2048))
    simulate(config(512))  # fills the memos with another budget's steps
    after = simulate(config(2048))
    assert len(step._TOKEN_MEMOS) == 1
    for result in (alone, after):
        result.summary["sim"].pop("wall_time_s"), result.summary["sim"].pop("cpu_time_s")
    assert json.dumps(after.summary) == json.dumps(alone.summary)  # priced_with order too
    assert after.requests.equals(alone.requests)
