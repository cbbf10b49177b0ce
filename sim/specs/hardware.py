"""The GPU catalogue: one YAML file per GPU under hardware/, selected by name (`hardware=h200`,
in any case: `hardware=H200`)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from sim.errors import UserError, key_name, shown
from sim.paths import HARDWARE_DIR
from sim.specs.cached import parsed
from sim.specs.names import did_you_mean
from sim.user_files import load_yaml, require_file

_REQUIRED = {
    "name": str,
    "display_name": str,
    "vendor": str,
    "compute_capability": str,
    "hbm_bytes": int,
    "hbm_bytes_per_s": float,
    "flops_per_s": dict,
    "nvlink_bytes_per_s": float,
    "pcie_bytes_per_s": float,
    "sm_count": int,
    "l2_bytes": int,
}
# Upper bounds far above any GPU: the KV pool is built block by block from hbm_bytes, and a
# rate beyond these is a unit slip (bits for bytes, a missing exponent sign).
_MAX = {
    "hbm_bytes": 2**42,  # 4 TiB
    "hbm_bytes_per_s": 1e15,
    "nvlink_bytes_per_s": 1e15,
    "pcie_bytes_per_s": 1e15,
    "sm_count": 2**20,
    "l2_bytes": 2**40,
}
_MAX_FLOPS_PER_S = 1e18
LINKS_FILE = "links.yaml"  # hardware/links.yaml: the links between GPU servers (specs/links.py)
_KIND = {str: "a string", int: "an integer", float: "a number", dict: "a mapping"}


@dataclass(frozen=True, slots=True)
class Hardware:
    """Datasheet peaks of one GPU. Bandwidths are per direction, per GPU."""

    name: str
    display_name: str
    vendor: str
    compute_capability: str  # "9.0" for Hopper; AMD parts carry their gfx target
    hbm_bytes: int  # device memory, nvidia-smi's total
    hbm_bytes_per_s: float
    flops_per_s: Mapping[str, float]  # dense tensor-core peak per dtype
    nvlink_bytes_per_s: float  # 0 when the GPU has no NVLink / Infinity Fabric peer link
    pcie_bytes_per_s: float
    sm_count: int
    l2_bytes: int
    gpu_hour_usd: float | None = None  # an indicative on-demand price of one GPU-hour (cost
    # per million tokens); None where the catalogue has none (capacity.gpu_hour_usd sets one)
    collectives_from: str | None = None  # a calibrated GPU on the same peer fabric whose
    # measured collective tables price the kinds (all-reduce, send/recv) this one's profile
    # has none of (A100-40GB: the A100-80GB's NVLink 3 tables); None: the prior prices them
    cuda_total_bytes: int | None = None  # the total the CUDA driver reports to a process
    # (torch.cuda.mem_get_info(): what the engines size their memory against), where public
    # logs give it; None: hbm_bytes

    @property
    def engine_total_bytes(self) -> int:
        """The device memory an engine sizes against: cuda_total_bytes, else hbm_bytes (never
        above hbm_bytes)."""
        return min(self.cuda_total_bytes or self.hbm_bytes, self.hbm_bytes)

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / 2**30

    @property
    def sm_major(self) -> int:
        """An NVIDIA GPU's compute capability major (9 for Hopper); 0 for other vendors, whose
        compute_capability holds a gfx target."""
        return int(self.compute_capability.split(".")[0]) if self.vendor == "nvidia" else 0

    @property
    def peer_bytes_per_s(self) -> float:
        """GPU-to-GPU bandwidth used by collectives: NVLink when present, else PCIe."""
        return self.nvlink_bytes_per_s if self.nvlink_bytes_per_s > 0 else self.pcie_bytes_per_s

    def peak_flops_per_s(self, dtype: str) -> float:
        if dtype not in self.flops_per_s:
            allowed = ", ".join(sorted(self.flops_per_s))
            raise UserError(
                f"hardware {self.name} has no {dtype} tensor-core rate; "
                f"its datasheet lists: {allowed}"
            )
        return self.flops_per_s[dtype]


def hardware_names(root: Path = HARDWARE_DIR) -> list[str]:
    """The GPUs of the catalogue: every YAML file under hardware/ but the link catalogue."""
    return sorted(p.stem for p in root.glob("*.yaml") if p.name != LINKS_FILE)


def load_hardware(name_or_path: str, root: Path = HARDWARE_DIR) -> Hardware:
    """A catalogue name (`h100-sxm`) or a path to a YAML file with the same fields."""
    path = Path(name_or_path)
    by_name = path.suffix not in (".yaml", ".yml")
    if by_name:
        path = root / f"{_spelling(name_or_path, root)}.yaml"
    if path.name == LINKS_FILE and _real(path).parent == _real(root):
        raise UserError(
            f"hardware={name_or_path!r}: hardware/{LINKS_FILE} holds the links between GPU "
            "servers (parallel.node_link, disagg.link), not a GPU; choose one of: "
            f"{', '.join(hardware_names(root))}"
        )
    if not _is_file(path) and by_name:
        names = hardware_names(root)
        raise UserError(
            f"hardware={name_or_path!r} is not in the catalogue"
            f"{did_you_mean(name_or_path, names)}; choose one of: {', '.join(names)} (or a "
            f"path to a .yaml file); to add this GPU, write hardware/{_file_stem(name_or_path)}"
            ".yaml from its datasheet (docs/architecture.md, recipe 'A new GPU')"
        )
    require_file(path, f"hardware file {path}")
    return parsed(path, _read)


def _spelling(name: str, root: Path) -> str:
    """The catalogue's name for `name`, whatever its case (`H100-SXM` -> `h100-sxm`); the
    name itself when the catalogue has none such."""
    typed = str(name).strip()
    by_lower = {n.lower(): n for n in hardware_names(root)}
    return by_lower.get(typed.lower(), typed)


def _file_stem(name: str) -> str:
    """A file name for a GPU not in the catalogue: lower case, words joined by dashes."""
    return "-".join(str(name).strip().lower().split()) or "NAME"


def _read(path: Path) -> Hardware:
    return _from_mapping(load_yaml(path), path)


def _real(path: Path) -> Path:
    """The path with links followed as far as they go (a loop of them does not raise)."""
    return Path(os.path.realpath(path))


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system
        return False


def _from_mapping(data: object, path: Path) -> Hardware:
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of hardware fields")
    fields = {}
    for key, kind in _REQUIRED.items():
        if key not in data:
            raise UserError(f"{path}: missing field {key!r}")
        value = data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value) if abs(value) < 1e300 else math.inf
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(f"{path}: field {key!r} must be {_KIND[kind]}, got {shown(value)}")
        if kind in (int, float) and not 0 <= value < math.inf:
            raise UserError(
                f"{path}: field {key!r} must be a finite number >= 0, got {shown(value)}"
            )
        if key in _MAX and value > _MAX[key]:
            raise UserError(
                f"{path}: field {key!r} is {shown(value)}; "
                f"at most {_MAX[key]:.3g} (no GPU has more)"
            )
        fields[key] = value
    flops = {}
    for dtype, rate in fields["flops_per_s"].items():
        if (
            not isinstance(rate, (int, float))
            or isinstance(rate, bool)
            or not 0 < rate <= _MAX_FLOPS_PER_S
        ):
            raise UserError(
                f"{path}: flops_per_s.{key_name(dtype)} must be a positive number up to "
                f"{_MAX_FLOPS_PER_S:.0e}, got {shown(rate)}"
            )
        flops[str(dtype)] = float(rate)
    fields["flops_per_s"] = MappingProxyType(flops)
    price = data.get("gpu_hour_usd")
    if price is not None:
        if not isinstance(price, (int, float)) or isinstance(price, bool) or not 0 < price < 1e9:
            raise UserError(
                f"{path}: gpu_hour_usd must be a positive number (dollars), got {shown(price)}"
            )
        fields["gpu_hour_usd"] = float(price)
    twin = data.get("collectives_from")
    if twin is not None:
        if not isinstance(twin, str) or not twin.strip():
            raise UserError(
                f"{path}: collectives_from must name a calibrated GPU (e.g. a100-80gb), "
                f"got {shown(twin)}"
            )
        fields["collectives_from"] = twin
    cuda = data.get("cuda_total_bytes")
    if cuda is not None:
        whole = isinstance(cuda, int) and not isinstance(cuda, bool)
        if not whole or not 0 < cuda <= fields["hbm_bytes"]:
            raise UserError(
                f"{path}: cuda_total_bytes must be a whole number of bytes, more than 0 and at "
                f"most hbm_bytes ({fields['hbm_bytes']}), got {shown(cuda)}"
            )
        fields["cuda_total_bytes"] = cuda
    for key in ("hbm_bytes", "hbm_bytes_per_s", "pcie_bytes_per_s", "sm_count"):
        if fields[key] == 0:
            raise UserError(f"{path}: field {key!r} must be > 0")
    return Hardware(**fields)
