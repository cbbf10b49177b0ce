"""The uncalibrated prior: fixed efficiencies per kernel class, kernel-launch and collective
costs (calibration/profiles/prior.yaml). Calibrated GPU profiles replace its efficiencies with
fitted surfaces; its launch costs apply to every run."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from sim.errors import UserError
from sim.paths import CALIBRATION_DIR
from sim.specs.cached import parsed

PROFILE_DIR = CALIBRATION_DIR / "profiles"


@dataclass(frozen=True, slots=True)
class CostProfile:
    name: str
    calibrated: bool
    gemm_flops_efficiency: float
    memory_bandwidth_efficiency: float
    attention_prefill_flops_efficiency: float
    attention_decode_bandwidth_efficiency: float
    allreduce_bandwidth_efficiency: float
    allreduce_latency_s: float
    kernel_launch_s: float
    eager_kernels_per_layer: int
    compiled_kernels_per_layer: int
    piecewise_eager_kernels_per_layer: int

    @classmethod
    def load(cls, name: str = "prior", root: Path = PROFILE_DIR) -> CostProfile:
        path = root / f"{name}.yaml"
        if not path.is_file():
            names = ", ".join(sorted(p.stem for p in root.glob("*.yaml")))
            raise UserError(f"no prior cost profile {name!r}; choose one of: {names}")
        return parsed(path, cls._read)

    @classmethod
    def _read(cls, path: Path) -> CostProfile:
        data = yaml.safe_load(path.read_text())
        expected = {f.name for f in fields(cls)}
        missing = sorted(expected - set(data or {}))
        if missing:
            raise UserError(f"{path}: missing fields {', '.join(missing)}")
        return cls(**{k: data[k] for k in expected})
