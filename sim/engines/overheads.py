"""Engine CPU time per step, by release line: calibration/engine_overheads.yaml is the one
place those numbers (and what each is based on) live.

A line may say which engine core it describes (`engine: v0` or `v1`). vLLM 0.8-0.10 run V1 by
default but fall back to the V0 engine for arguments V1 does not take yet (sim/engines/
v1_oracle.py); such a run's CPU time and executor are V0's, whose code in those releases is the
0.6-0.7 engine's (vllm/engine/llm_engine.py, worker/worker_base.py and the multiprocessing
executor are carried over), so a caller that passes the run's `scheduler` ("vllm_v0" or
"vllm_v1") gets the last line of that engine not after the release."""

from __future__ import annotations

from functools import cache

import yaml

from sim.engines.versions import version_tuple
from sim.paths import CALIBRATION_DIR

OVERHEADS = CALIBRATION_DIR / "engine_overheads.yaml"

# yaml field -> EngineSettings knob
KNOBS = {
    "step_s": "cpu_step_overhead_s",
    "per_seq_s": "cpu_per_seq_overhead_s",
    "output_per_seq_s": "cpu_output_per_seq_s",
    "exposed_s": "cpu_exposed_s",
    "hash_per_token_s": "prefix_hash_s_per_token",
}


@cache
def _table() -> dict:
    return yaml.safe_load(OVERHEADS.read_text())


ENGINE_CORES = {"vllm_v0": "v0", "vllm_v1": "v1"}  # scheduler -> a line's `engine`


def _line(family: str, release: str, scheduler: str | None = None) -> dict:
    """The release line `release` belongs to: the last one that does not start after it, of
    the engine core `scheduler` runs when the table's lines say which they describe."""
    lines = _table()[family]
    core = ENGINE_CORES.get(scheduler or "")
    if core and any(x.get("engine") == core for x in lines):
        lines = [x for x in lines if x.get("engine", core) == core]
    v = version_tuple(release)
    return max(
        (x for x in lines if version_tuple(str(x["from"])) <= v),
        key=lambda x: version_tuple(str(x["from"])),
        default=lines[0],
    )


def cpu_overheads(
    family: str, release: str, scheduler: str | None = None
) -> tuple[dict[str, float], str]:
    """({knob: seconds}, rule) of the line of `family` that `release` belongs to (of the
    engine core `scheduler` runs, when given)."""
    line = _line(family, release, scheduler)
    core = f" {line['engine'].upper()}" if scheduler and "engine" in line else ""
    rule = (
        f"estimate for the {family}{core} {line['from']}+ line, from published measurements "
        "(calibration/engine_overheads.yaml)"
    )
    return {knob: float(line[key]) for key, knob in KNOBS.items()}, rule


def basis(family: str, release: str, scheduler: str | None = None) -> str:
    """The text that says what the line's numbers are based on."""
    return str(_line(family, release, scheduler)["basis"])


def executor_s(family: str, release: str, workers: int, scheduler: str | None = None) -> float:
    """Seconds the executor adds to each step of a replica of `workers` GPUs (tp x pp) in
    `family`'s line of `release` (of the engine core `scheduler` runs, when given):
    tp_step_s once it has more than one, plus tp_rank_s for each worker beyond the first; 0
    for one GPU, for an engine the table does not list (the teaching engines) and for a line
    without the fields."""
    if workers <= 1 or family not in _table():
        return 0.0
    line = _line(family, release, scheduler)
    return float(line.get("tp_step_s", 0.0)) + float(line.get("tp_rank_s", 0.0)) * (workers - 1)
