"""Engine CPU time per step, by release line: calibration/engine_overheads.yaml is the one
place those numbers (and what each is based on) live."""

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


def _line(family: str, release: str) -> dict:
    """The release line `release` belongs to: the last one that does not start after it."""
    lines = _table()[family]
    v = version_tuple(release)
    return max(
        (x for x in lines if version_tuple(str(x["from"])) <= v),
        key=lambda x: version_tuple(str(x["from"])),
        default=lines[0],
    )


def cpu_overheads(family: str, release: str) -> tuple[dict[str, float], str]:
    """({knob: seconds}, rule) of the line of `family` that `release` belongs to."""
    line = _line(family, release)
    rule = (
        f"estimate for the {family} {line['from']}+ line, from published measurements "
        "(calibration/engine_overheads.yaml)"
    )
    return {knob: float(line[key]) for key, knob in KNOBS.items()}, rule


def basis(family: str, release: str) -> str:
    """The text that says what the line's numbers are based on."""
    return str(_line(family, release)["basis"])


def executor_s(family: str, release: str, workers: int) -> float:
    """Seconds the executor adds to each step of a replica of `workers` GPUs (tp x pp) in
    `family`'s line of `release`: tp_step_s once it has more than one, plus tp_rank_s for each
    worker beyond the first; 0 for one GPU, for an engine the table does not list (the
    teaching engines) and for a line without the fields."""
    if workers <= 1 or family not in _table():
        return 0.0
    line = _line(family, release)
    return float(line.get("tp_step_s", 0.0)) + float(line.get("tp_rank_s", 0.0)) * (workers - 1)
