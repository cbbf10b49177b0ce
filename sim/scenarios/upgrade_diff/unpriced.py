"""Kernel changes the cost model cannot tell apart: a change of attention backend whose two
sides are priced with the same measured table (the GPU's profile has no table for one of
them, so the nearest table of the same dtype prices it: "X (nearest to Y)"), or both with the
roofline prior. Such a change comes out inert, and that is no evidence about the kernels: the
verdict says that no table for the change exists, and never cites it as a cause."""

from __future__ import annotations

from dataclasses import dataclass

from sim.scenarios.upgrade_diff.outcomes import Figures

NEAREST = " (nearest to "  # how KernelPricer.used names a table that stands in for another
KERNEL_SETTINGS = ("attention_backend",)  # settings that choose the attention table
GEMM_SETTINGS = ("fp8_gemm_backend",)  # settings whose kernels one GEMM price stands for
GEMM_WHY = (
    "the cost model prices a block-FP8 GEMM (where the model has any) the same whichever kernel "
    "runs it: no measured table of SGLang's CUTLASS, Triton or DeepGEMM block kernel tells them "
    "apart (sim/cost/fp8.py)"
)


def table(kernel: str) -> str:
    """The table that priced a kernel (`used`'s name without what it stands in for)."""
    return kernel.split(NEAREST, 1)[0]


def stands_in_for(kernel: str) -> str | None:
    """The table asked for and missing, when another stood in for it (None: none missing)."""
    return kernel.split(NEAREST, 1)[1].removesuffix(")") if NEAREST in kernel else None


@dataclass(frozen=True, slots=True)
class Unpriced:
    """A kernel change priced with the same table on both sides."""

    setting: str
    before: object
    after: object
    priced_with: str  # the one table (or "prior") that priced both
    missing: tuple[str, ...]  # the tables asked for that this GPU's profile does not have
    reason: str = ""  # why, where it is not a missing table

    @property
    def words(self) -> str:
        if self.reason:
            why = self.reason
        elif self.missing:
            why = (
                f"this GPU's profile has no measured table for {' or '.join(self.missing)}, so "
                f"{self.priced_with} prices both sides"
            )
        elif self.priced_with in ("prior", ""):
            why = "this GPU has no measured attention table, so the roofline prior prices both"
        else:
            why = f"{self.priced_with} prices both sides"
        return (
            f"{self.setting} ({self.before} -> {self.after}) is not priced: {why}; the "
            "simulation has no evidence of what this kernel change does"
        )

    @property
    def summary(self) -> dict:
        return {
            "setting": self.setting,
            "before": self.before,
            "after": self.after,
            "priced_with": self.priced_with,
            "missing_tables": list(self.missing),
            "why": self.words,
        }


def unpriced(setting: str, field: str, before, after, a: Figures, b: Figures) -> Unpriced | None:
    """The change of `field` (before -> after) as unpriced, when the run with it (b) prices
    attention with the very table the run without it (a) does, or it chooses a GEMM kernel
    the cost model prices alike (GEMM_SETTINGS); else None."""
    if field in GEMM_SETTINGS:
        return Unpriced(setting, before, after, a.kernel_family, (), GEMM_WHY)
    if field not in KERNEL_SETTINGS or a.kernel_family != b.kernel_family:
        return None
    k0, k1 = a.attention_kernel, b.attention_kernel
    if table(k0) != table(k1):
        return None
    missing = tuple(dict.fromkeys(m for m in map(stands_in_for, (k0, k1)) if m))
    return Unpriced(setting, before, after, table(k0), missing)
