"""Calibrated GPU profiles: calibration/profiles/<gpu>.json, written by `python -m sim.calibrate`.

A profile holds one or more kernel families (the engine and version whose kernels were
measured, e.g. "vllm@0.24.0", or a measurement source such as "vidur"), each a set of fitted
surfaces and collective tables. The simulator prices with the vLLM family closest to (and not
after) the engine version it simulates; kernel_check uses the family that matches the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sim.cost.comm import allreduce_release
from sim.cost.fp8 import BLOCK_REFERENCE, REFERENCE
from sim.cost.kernels import CommTable, KernelPricer
from sim.cost.measured_moe import MeasuredExperts
from sim.cost.prior import PROFILE_DIR, CostProfile
from sim.cost.surface import Surface
from sim.engines.versions import release_key
from sim.errors import UserError
from sim.specs.cached import parsed
from sim.specs.hardware import Hardware, load_hardware


@dataclass(frozen=True, slots=True)
class GpuProfile:
    gpu: str
    default_family: str
    families: dict  # family -> {"source": str, "surfaces": {...}, "comm": {...}}
    path: Path
    aliases: dict | None = None  # family -> the family whose tables it reuses

    @classmethod
    def load(cls, path: Path) -> GpuProfile:
        return parsed(path, cls._read)

    @classmethod
    def _read(cls, path: Path) -> GpuProfile:
        try:
            data = json.loads(path.read_text())
            return cls(
                data["gpu"], data["default_family"], data["families"], path, data.get("aliases", {})
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"{path}: not a calibrated GPU profile ({exc})") from exc

    def family_for(self, engine: str | None, version: str | None) -> str:
        """The family of `engine`'s kernels measured at the newest version not after
        `version` (for a version older than every measured one, the oldest measured); the
        default family when none was measured for that engine."""
        if engine and version:
            names = [*self.families, *(self.aliases or {})]
            mine = [f for f in names if f.startswith(engine + "@")]

            def key(f: str):
                return release_key(f.split("@")[1])

            earlier = [f for f in mine if key(f) <= release_key(version)]
            if earlier:
                return max(earlier, key=key)
            if mine:
                return min(mine, key=key)
        return self.default_family

    def pricer(self, hardware: Hardware, prior: CostProfile, family: str) -> KernelPricer:
        """Kernels of `family`; tables it did not measure (norms, collectives, or one weight
        format of a kernel class, say fp4 MoE) come from the profile's other families, default
        first: a neighbouring release's measured kernel beats the roofline prior."""
        surfaces, floors, others = {}, {}, {}
        for fam in self._lookup_order(family):
            for key, value in fam.get("surfaces", {}).items():
                if key not in surfaces:
                    surfaces[key] = Surface.from_dict(value)
                    if key in fam.get("floors", {}):
                        floors[key] = fam["floors"][key]
                elif key.startswith("moe/"):  # (KernelPricer.moe_s: experts it did not measure)
                    others.setdefault(key, []).append(Surface.from_dict(value))
        reference = self._block_reference(family)
        if reference is not None:
            surfaces[f"{REFERENCE}/gemm/fp8_block"] = Surface.from_dict(reference)
        pricer = KernelPricer(hardware, prior, surfaces, self.comm_tables(family), floors)
        pricer.alternates = others
        order = self._lookup_order(family)
        timed = [fam["moe_measured"] for fam in order if fam.get("moe_measured")]
        pricer.measured_moe = MeasuredExperts(timed) if timed else None
        return pricer

    def _block_reference(self, family: str) -> dict | None:
        """The block-FP8 GEMM surface of the collection that timed it as GPU time at decode
        shapes (sim/cost/fp8.py BLOCK_REFERENCE), for another release of its engine."""
        ref = BLOCK_REFERENCE.get(family.split("@")[0])
        if ref is None or ref not in self.families:
            return None
        if (self.aliases or {}).get(family, family) == ref:
            return None
        return self.families[ref].get("surfaces", {}).get("gemm/fp8_block")

    def comm_tables(self, family: str) -> dict[str, CommTable]:
        """The collective tables `family`'s pricer gets: its own, then the other families'
        (default first) for the kinds and GPU counts it did not measure."""
        comm: dict[str, CommTable] = {}
        for fam in self._lookup_order(family):
            for key, value in fam.get("comm", {}).items():
                if key not in comm:
                    comm[key] = CommTable.from_dict(value)
        return comm

    def _lookup_order(self, family: str) -> list[dict]:
        """`family` (through its alias), the default family, then the rest by name."""
        family = (self.aliases or {}).get(family, family)
        if family not in self.families:
            raise UserError(
                f"{self.path} has no kernel family {family!r}; it has: {', '.join(self.families)}"
            )
        order = [family, self.default_family, *sorted(self.families)]
        return [self.families[f] for f in dict.fromkeys(f for f in order if f in self.families)]


@dataclass(frozen=True, slots=True)
class PricingChoice:
    pricer: KernelPricer
    profile: str  # "h100-sxm" or "prior"
    family: str | None
    calibrated: bool
    source: str

    def record(self) -> dict:
        return {
            "cost_profile": self.profile,
            "cost_profile_calibrated": self.calibrated,
            "kernel_family": self.family,
            "cost_profile_source": self.source,
            "priced_with": dict(self.pricer.used),
        }


def choose_pricer(
    hardware: Hardware,
    cost_profile: str,
    prior: CostProfile,
    engine: str | None = None,
    version: str | None = None,
    family: str | None = None,
    root: Path = PROFILE_DIR,
) -> PricingChoice:
    """`auto`: the GPU's calibrated profile when one exists, else the roofline prior;
    `prior`: always the prior; NAME: calibration/profiles/NAME.json."""
    if cost_profile == "prior":
        return PricingChoice(
            _pricer(KernelPricer(hardware, prior), "prior", None),
            "prior",
            None,
            False,
            "uncalibrated roofline prior",
        )
    name = hardware.name if cost_profile == "auto" else cost_profile
    path = root / f"{name}.json"
    if not path.is_file():
        if cost_profile == "auto":
            pricer = KernelPricer(hardware, prior)
            note = _borrow_collectives(pricer, engine, version, root)
            note += _borrow_elementwise(pricer, engine, version, root)
            return PricingChoice(
                _pricer(pricer, "prior", None),
                "prior",
                None,
                False,
                f"uncalibrated roofline prior (no measured profile for {hardware.name}){note}",
            )
        names = ", ".join(sorted(p.stem for p in root.glob("*.json")))
        raise UserError(
            f"cost_profile={cost_profile!r}: no {path}; calibrated: {names}, or auto / prior"
        )
    profile = GpuProfile.load(path)
    chosen = family or profile.family_for(engine, version)
    pricer = profile.pricer(hardware, prior, chosen)
    note = _borrow_collectives(pricer, engine, version, root)
    note += _borrow_elementwise(pricer, engine, version, root)
    reduce = None
    if family is None and engine and version:  # the all-reduce the release dispatches to
        measured = [*profile.families, *(profile.aliases or {})]
        reduce = allreduce_release(engine, version, hardware, measured)
    if reduce is not None and reduce != chosen:
        tables = profile.comm_tables(reduce).items()
        pricer.comm = {**pricer.comm, **{k: t for k, t in tables if k.startswith("allreduce/")}}
        note += f"; all-reduce timed as {engine} {version} runs it: {reduce}'s (sim/cost/comm.py)"
    else:
        reduce = None
    pricer = _pricer(pricer, str(path), chosen if reduce is None else f"{chosen}+{reduce}")
    donor = (profile.aliases or {}).get(chosen, chosen)
    source = profile.families[donor].get("source", donor)
    if donor != chosen:
        source += f" (the tables {chosen} reuses)"
    if family is None and engine and version and chosen != f"{engine}@{version}":
        if chosen.startswith(engine + "@"):
            source += f"; the nearest measured release to {engine} {version}"
        else:
            source += f"; no {engine} kernels were measured on this GPU"
    return PricingChoice(pricer, profile.gpu, chosen, True, source + note)


def _borrow_collectives(pricer: KernelPricer, engine, version, root: Path) -> str:
    """Give a pricer the collective tables of a kind it has none of (all-reduce, send/recv)
    from the GPU its catalogue file names in `collectives_from` (same peer fabric), that
    GPU's family nearest the engine release; returns the note the pricing source carries
    ("" when nothing was borrowed)."""
    twin = pricer.hardware.collectives_from
    if not twin:
        return ""
    path = root / f"{twin}.json"
    if not path.is_file():
        raise UserError(
            f"hardware {pricer.hardware.name}: collectives_from={twin!r} has no calibrated "
            f"profile {path}; name a GPU under {root} or remove the field"
        )
    have = {key.split("/")[0] for key in pricer.comm}
    donor = GpuProfile.load(path)
    family = donor.family_for(engine, version)
    borrowed = {
        key: table
        for key, table in donor.comm_tables(family).items()
        if key.split("/")[0] not in have
    }
    if not borrowed:
        return ""
    pricer.comm = {**pricer.comm, **borrowed}
    kinds = ", ".join(sorted({key.split("/")[0] for key in borrowed}))
    return f"; {kinds} measured on {donor.gpu} ({family}), the same peer fabric"


def _borrow_elementwise(pricer: KernelPricer, engine, version, root: Path) -> str:
    """Give a pricer the elementwise kernels (norms, activations, rotary embedding, residual
    adds, embedding) it has no measured table of from the twin its catalogue names in
    `collectives_from` when the twin is the same die (SM count and compute capability: the
    H200 and the H100 SXM): a small kernel's latency floor is the die's, its bytes move at
    this GPU's bandwidth (kernels.twin_moved_s). Without it such a kernel is priced at
    its bytes alone, 70x under the twin's for a decode step's norms (issue 43). Returns the
    note the pricing source carries ("" when nothing was borrowed)."""
    hw = pricer.hardware
    twin = hw.collectives_from
    path = root / f"{twin}.json"
    if not twin or not path.is_file():
        return ""  # (_borrow_collectives has said what a missing twin profile means)
    twin_hw = load_hardware(twin)
    if (twin_hw.sm_count, twin_hw.compute_capability) != (hw.sm_count, hw.compute_capability):
        return ""  # another die: another floor (the H20's 78 SMs)
    donor = GpuProfile.load(path)
    family = donor.family_for(engine, version)
    theirs = donor.pricer(twin_hw, pricer.prior, family).surfaces
    borrowed = {
        key.split("/", 1)[1]: surface
        for key, surface in theirs.items()
        if key.startswith("elementwise/") and key not in pricer.surfaces
    }
    if not borrowed:
        return ""
    pricer.twin_elementwise = borrowed
    pricer.twin_hbm_bytes_per_s = twin_hw.hbm_bytes_per_s
    kinds = ", ".join(sorted(borrowed))
    return f"; elementwise kernels ({kinds}) measured on {donor.gpu}, the same die"


def _pricer(pricer: KernelPricer, profile: str, family: str | None) -> KernelPricer:
    """The pricer with its fingerprint: everything its prices depend on."""
    pricer.fingerprint = f"{profile}|{family}|{pricer.hardware!r}|{pricer.prior!r}"
    return pricer
