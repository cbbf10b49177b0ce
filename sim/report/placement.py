"""Where text goes on a figure: labels beside their points that overlap neither each other, the
points nor the axes' edge, and a legend below the panels that fits the figure's width.

Both measure text in pixels with the figure's own renderer, so call them once the layout is
final (after fig.tight_layout()); both are deterministic (fixed candidate places tried in a
fixed order), so a figure's PNG bytes still depend only on what it shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.path import Path
from matplotlib.transforms import Bbox

# A label is tried beside its point, then further out on the same eight directions, in the
# order given (a Pareto front's labels go first where no point can be: below and to the left).
# Beyond the first ring a thin line joins the label to its point.
NE_FIRST = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))
SW_FIRST = ((-1, -1), (-1, 0), (0, -1), (1, -1), (-1, 1), (1, 0), (0, 1), (1, 1))
RADII = (4, 14, 26, 40, 56, 74, 94, 116)


def offsets(directions=NE_FIRST) -> tuple[tuple[float, float], ...]:
    """Offsets (points) to try, nearest first, each ring in the order of `directions`."""
    return tuple((dx * r, dy * r) for r in RADII for dx, dy in directions)


GAP = 2.0  # pixels kept free around every label


def _align(d: float, lo: str, hi: str) -> str:
    return hi if d < 0 else lo if d > 0 else "center"


class _Taken:
    """What a new label must keep clear of, in pixels: points (by index: a label may touch its
    own), boxes (other labels, what `avoid` lists) and leader lines."""

    def __init__(self, points: list[Bbox], boxes: list[Bbox]):
        self.points, self.boxes, self.lines = points, boxes, []

    def clear(self, own: int, box: Bbox, line: Path | None) -> bool:
        others = [b for k, b in enumerate(self.points) if k != own] + self.boxes
        if any(box.overlaps(b) for b in others) or any(
            seg.intersects_bbox(box) for seg in self.lines
        ):
            return False
        if line is None:
            return True
        return not (
            any(line.intersects_bbox(b) for b in others)
            or any(line.intersects_path(seg) for seg in self.lines)
        )


def place_labels(
    ax,
    xs: Sequence[float],
    ys: Sequence[float],
    texts: Sequence[str],
    fontsize: float = 7,
    avoid: Sequence[tuple[float, float, float, float]] = (),
    directions=NE_FIRST,
    clear_of: Sequence = (),
) -> list:
    """Annotate each point (xs[k], ys[k]) with texts[k] at the first offset where the label
    stays inside the axes, and it and its leader line clear of every point, every label and
    leader line placed before, and every box of `avoid` ((x0, y0, x1, y1) in data
    coordinates: an error bar; a point, x0 == x1 and y0 == y1, stands for its marker) or of
    `clear_of` (artists: a
    legend). A label with no free place
    takes the nearest place inside the axes. Points are labelled left to right. Returns the
    annotations."""
    fig = ax.figure
    ax.get_xlim(), ax.get_ylim()  # the limits autoscaling gives, before transforming
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    pts = ax.transData.transform(np.column_stack([xs, ys]).astype(float))
    half = fontsize * fig.dpi / 72 / 2  # a marker's half size, about
    boxes = []
    for x0, y0, x1, y1 in avoid:
        (a, b), (c, d) = ax.transData.transform([(x0, y0), (x1, y1)])
        box = Bbox.from_extents(min(a, c), min(b, d), max(a, c), max(b, d))
        boxes.append(box.padded(half if (x0, y0) == (x1, y1) else 1.0))  # a point: its marker
    boxes += [a.get_window_extent(renderer) for a in clear_of]
    taken = _Taken([Bbox.from_extents(x, y, x, y).padded(half) for x, y in pts], boxes)
    out, tries = [], offsets(directions)
    for k in sorted(range(len(texts)), key=lambda k: (pts[k][0], pts[k][1], k)):
        (dx, dy), box, line = _first_free(ax, renderer, frame, k, pts[k], (xs[k], ys[k]),
                                          texts[k], fontsize, taken, tries)  # fmt: skip
        ann = ax.annotate(
            texts[k], (xs[k], ys[k]), xytext=(dx, dy), textcoords="offset points",
            fontsize=fontsize, ha=_align(dx, "left", "right"), va=_align(dy, "bottom", "top"),
            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5", "shrinkA": 0,
                        "shrinkB": 3} if line is not None else None,
        )  # fmt: skip
        taken.boxes.append(box)
        if line is not None:
            taken.lines.append(line)
        out.append(ann)
    return out


def _first_free(ax, renderer, frame, k, pixel, xy, text, fontsize, taken, tries):
    """(offset, the label's box, its leader line or None) at the first free place; else the
    first whose label alone is clear (its line may cross another); else the first inside the
    axes."""
    second = third = None
    scale = ax.figure.dpi / 72
    for dx, dy in tries:
        t = ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                        ha=_align(dx, "left", "right"), va=_align(dy, "bottom", "top"))  # fmt: skip
        box = t.get_window_extent(renderer).padded(GAP)
        t.remove()
        inside = (
            box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1
        )
        if not inside:
            continue
        line = None
        if max(abs(dx), abs(dy)) > RADII[0]:
            end = (pixel[0] + dx * scale, pixel[1] + dy * scale)
            line = Path([tuple(pixel), end])
        place = ((dx, dy), box, line)
        if taken.clear(k, box, line):
            return place
        if second is None and taken.clear(k, box, None):
            second = place
        third = third or place
    return second or third or (tries[0], Bbox.from_extents(0, 0, 0, 0), None)


def legend_below(
    fig, handles: list, title: str | None = None, fontsize: float = 7, bottom: float = 0.0
) -> float:
    """A legend centred below the panels, its lower edge at `bottom` (a fraction of the figure's
    height: stack a second legend on the first), in as few rows as fit the figure's width, the
    entries shared evenly between them. Returns its upper edge, for the next legend or for
    tight_layout(rect=(0, edge, 1, ...))."""
    renderer = fig.canvas.get_renderer()

    def draw(ncol: int):
        return fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, bottom),
                          ncol=ncol, fontsize=fontsize, title=title, title_fontsize=fontsize,
                          frameon=False)  # fmt: skip

    ncol = len(handles)
    while ncol > 1:
        legend = draw(ncol)
        fits = legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width
        legend.remove()
        if fits:
            break
        ncol -= 1
    rows = math.ceil(len(handles) / max(ncol, 1))
    legend = draw(math.ceil(len(handles) / rows))
    return bottom + legend.get_window_extent(renderer).height / fig.bbox.height


def suptitle_fitted(fig, text: str, fontsize: float = 9) -> None:
    """The figure's title, wrapped at spaces into as few lines as fit the figure's width
    (fig.tight_layout() then keeps the panels below it)."""
    renderer = fig.canvas.get_renderer()
    words = text.split(" ")
    for lines in range(1, len(words) + 1):
        per = math.ceil(len(text) / lines)
        wrapped, line = [], ""
        for w in words:
            if line and len(line) + 1 + len(w) > per:
                wrapped.append(line)
                line = w
            else:
                line = f"{line} {w}" if line else w
        wrapped.append(line)
        title = fig.suptitle("\n".join(wrapped), fontsize=fontsize)
        if title.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return


__all__ = ["NE_FIRST", "SW_FIRST", "legend_below", "offsets", "place_labels", "suptitle_fitted"]
