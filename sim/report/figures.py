"""What every report shares: matplotlib without a screen, PNGs whose bytes depend only on what
they show, and markdown tables."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
logging.getLogger("matplotlib").setLevel(logging.WARNING)
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from sim.report.html import md_table  # noqa: E402  (re-exported: reports import it here)
from sim.run.outputs import atomic_write  # noqa: E402

PNG_META = {"Software": None}  # keep PNG bytes independent of the matplotlib build string

__all__ = ["PNG_META", "md_table", "plain_formatter", "plain_ticks", "plot_text", "plt", "save_png"]


def plot_text(value: object) -> str:
    """A user's string (a GPU's or a model's name, a case's hardware) as a figure shows it:
    every `$` escaped, so matplotlib does not read `$...$` as mathtext, which raises on what it
    cannot parse (`$\\frac$`) and sets the rest in italics."""
    return str(value).replace("$", r"\$")


def save_png(fig, path: Path, dpi: int = 110) -> str:
    """Write `fig` to `path` (atomically) and close it; its file name, for the report's link.
    A figure laid out once by fig.tight_layout() keeps a placeholder layout engine, for which
    savefig draws the whole figure once more before drawing it to the file; without it, the
    same bytes are written a third faster."""
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata=PNG_META))
    plt.close(fig)
    return path.name


def plain_formatter() -> FuncFormatter:
    """Tick labels 1,000 and 0.5 rather than 10^3 and 5 x 10^-1."""
    return FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")


def plain_ticks(ax) -> None:
    """Log axes labelled 20, 50, 100 rather than 2 x 10^1."""
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() != "log":
            continue
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain_formatter())
        axis.set_minor_formatter(NullFormatter())
