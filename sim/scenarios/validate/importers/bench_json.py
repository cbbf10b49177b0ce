"""The `vllm bench serve --save-result` importer: each file is a case's workload, and its
metrics are what the case measured (sim/workload/bench_results.py reads them when the case
loads); the engine, GPU and model come from the command line."""

from __future__ import annotations

from pathlib import Path

from sim.errors import UserError
from sim.scenarios.validate.importers.catalogue import catalogue_model
from sim.scenarios.validate.importers.fields import read_json, relative_path


def bench_json(paths, out: Path, engine: str, hardware: str, model: str, tp: int) -> list[dict]:
    """One case per file; `model` None takes the catalogue name of the file's model_id."""
    cases = []
    for path in paths:
        data = read_json(path)
        if not isinstance(data, dict) or "input_lens" not in data or "output_lens" not in data:
            raise UserError(f"{path}: not a `vllm bench serve --save-result` file")
        case = {
            "id": f"bench-{Path(path).stem}",
            "engine": engine,
            "hardware": hardware,
            "model": model or catalogue_model(str(data.get("model_id", "")))[0],
            "parallel": {"tp": tp},
            "workload": {"bench_json": relative_path(path, out)},
            "source": str(path),
        }
        cases.append(case)
    return cases
