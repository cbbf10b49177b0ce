"""The same config and seed give byte-identical outputs."""

from __future__ import annotations

import json

from tests.conftest import RUN_FILES, run_task_into


def _run(tmp_path, name, monkeypatch, *overrides):
    out = tmp_path / name
    run_task_into(out, monkeypatch, ["workload.num_requests=150", *overrides])
    return out


def test_same_seed_same_bytes(tmp_path, monkeypatch):
    a = _run(tmp_path, "a", monkeypatch)
    b = _run(tmp_path, "b", monkeypatch)
    for name in RUN_FILES[1:]:  # summary.json differs in sim.wall_time_s only
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    sa["sim"].pop("wall_time_s")
    sb["sim"].pop("wall_time_s")
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
