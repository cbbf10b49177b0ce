"""The links between GPUs of different replicas: hardware/links.yaml (NVLink, InfiniBand,
Ethernet), a rate per GPU and direction and a fixed cost per transfer, selected by name
(`disagg.link=infiniband`, in any case). sim/kv/transfer.py prices a KV transfer over one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sim.errors import UserError, shown
from sim.paths import HARDWARE_DIR
from sim.specs.cached import parsed
from sim.specs.hardware import LINKS_FILE, Hardware
from sim.specs.names import did_you_mean
from sim.user_files import load_yaml


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    display_name: str
    bytes_per_s: float  # per GPU and direction (per replica when shared_by_gpus)
    latency_s: float  # once per transfer
    shared_by_gpus: bool = False

    def record(self) -> dict:
        return {
            "name": self.name,
            "display_name": self.display_name,
            "bytes_per_s": self.bytes_per_s,
            "latency_s": self.latency_s,
            "shared_by_gpus": self.shared_by_gpus,
        }


def link_names(root: Path = HARDWARE_DIR) -> list[str]:
    return sorted(_catalogue(root))


def _catalogue(root: Path) -> dict:
    return parsed(root / LINKS_FILE, _read_catalogue)


def _read_catalogue(path: Path) -> dict:
    data = load_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{path}: expected a mapping of link name -> its fields")
    return data


def load_link(
    name: str,
    prefill: Hardware,
    decode: Hardware,
    bytes_per_s: float | None = None,
    latency_s: float | None = None,
    root: Path = HARDWARE_DIR,
) -> Link:
    """The catalogue's link `name` between the two pools' GPUs, with the rate or latency
    replaced where given. nvlink takes the GPUs' own peer link (both pools in one domain)."""
    links = _catalogue(root)
    by_lower = {str(k).lower(): k for k in links}  # names in any case: InfiniBand
    typed, name = name, by_lower.get(str(name).strip().lower(), name)
    if name not in links:
        raise UserError(
            f"disagg.link={typed!r} is not in hardware/{LINKS_FILE}"
            f"{did_you_mean(typed, sorted(links))}; choose one of: {', '.join(sorted(links))} "
            "(or set disagg.link_bytes_per_s)"
        )
    entry = links[name]
    rate = entry.get("bytes_per_s")
    if rate is None and bytes_per_s is None:
        if prefill.nvlink_bytes_per_s <= 0 or decode.nvlink_bytes_per_s <= 0:
            lacking = prefill if prefill.nvlink_bytes_per_s <= 0 else decode
            raise UserError(
                f"disagg.link={name}: {lacking.name} "
                "has no NVLink; use a network link (infiniband, ethernet) or set "
                "disagg.link_bytes_per_s"
            )
        if prefill.name != decode.name:
            raise UserError(
                f"disagg.link={name}: the pools' GPUs ({prefill.name}, {decode.name}) are not in "
                "one NVLink domain; use a network link (infiniband, ethernet)"
            )
        rate = prefill.nvlink_bytes_per_s
    rate = bytes_per_s if bytes_per_s is not None else rate
    latency = latency_s if latency_s is not None else entry.get("latency_s", 0.0)
    for key, value in (("bytes_per_s", rate), ("latency_s", latency)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0 or (key == "bytes_per_s" and not value):
            raise UserError(
                f"hardware/{LINKS_FILE}: {name}.{key} must be a finite number "
                f"{'> 0' if key == 'bytes_per_s' else '>= 0'}, got {shown(value)}"
            )
    return Link(
        name,
        str(entry.get("display_name", name)),
        float(rate),
        float(latency),
        bool(entry.get("shared_by_gpus", False)),
    )
