"""A smooth function on a grid of knots: multilinear interpolation, fitted by penalised least
squares (scipy), clamped at the edges.

The cost model stores each kernel class's log(measured / roofline) as one of these over shape
features (log2 sizes, ratios), so any shape can be priced, not only the measured ones. Between
knots the surface is linear in each feature; a second-difference penalty keeps it smooth where
the data are sparse. Outside the range the data covered, each feature is clamped to that range:
a shape beyond the measurements takes the efficiency of the nearest measured edge instead of
a linear extrapolation in log space, which can grow without bound.
"""

from __future__ import annotations

import base64
import bisect
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

# Coefficients are stored as little-endian float16 in base64: a log-ratio to 3 significant
# digits (0.1% of a time), a third of the size of decimal text.
COEF_DTYPE = "<f2"


@dataclass(frozen=True, slots=True)
class Surface:
    features: tuple[str, ...]
    knots: tuple[np.ndarray, ...]  # increasing, at least one knot per feature
    coef: np.ndarray  # shape = tuple(len(k) for k in knots)
    bounds: tuple[tuple[float, float], ...] | None = None  # per feature: the data's range
    cells: tuple | None = field(default=None, compare=False, repr=False)  # see _cells
    plain: tuple | None = field(default=None, compare=False, repr=False)  # see _plain_cells

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(k) for k in self.knots)

    @classmethod
    def constant(cls, value: float, features: tuple[str, ...] = ()) -> Surface:
        knots = tuple(np.zeros(1) for _ in features)
        return cls(features, knots, np.full(tuple(1 for _ in features), float(value)))

    def _index_weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row, the flat coefficient indices of its grid cell's corners and their
        multilinear weights (n x corners each); features with one knot are constant."""
        cells, offsets, bits = _cells(self)
        base = np.zeros(len(x), dtype=np.int64)
        if not cells:
            return base[:, None], np.ones((len(x), 1))
        weight = np.ones((len(x), len(offsets)))
        for j, (d, k, lo, hi, stride, last) in enumerate(cells):
            i, f, constant = _cell(x[:, d], k, lo, hi, last)
            base += i * stride
            if not constant:
                f = f[:, None]
            weight *= np.where(bits[:, j] == 1, f, 1 - f)
        return base[:, None] + offsets, weight

    def at(self, row) -> float:
        """The value at one point (a sequence of features), in plain Python: __call__'s
        interpolation by the same operations in the same order, so the same bits."""
        cells, offsets, coef = self.plain or _plain_cells(self)
        base = 0
        fracs = []
        for d, knots, lo, hi, stride, last in cells:
            v = min(max(float(row[d]), lo), hi)
            i = min(max(bisect.bisect_right(knots, v) - 1, 0), last)
            base += i * stride
            fracs.append((v - knots[i]) / (knots[i + 1] - knots[i]))
        if not cells:
            return coef[base]
        if len(fracs) == 3:  # (prefill_chunk_s's, its head features fixed) the loop, unrolled
            v0, v1, v2, v3, v4, v5, v6, v7 = [coef[base + o] for o in offsets]
            f0, f1, f2 = fracs
            g0, g1, g2 = 1 - f0, 1 - f1, 1 - f2
            u0, u1, u2, u3 = (
                v0 * g2 + v4 * f2,
                v1 * g2 + v5 * f2,
                v2 * g2 + v6 * f2,
                v3 * g2 + v7 * f2,
            )
            return (u0 * g1 + u2 * f1) * g0 + (u1 * g1 + u3 * f1) * f0
        values = [coef[base + o] for o in offsets]
        for f in reversed(fracs):  # the last feature first: its lower and upper corners pair up
            half = len(values) // 2
            g = 1 - f
            values = [a * g + b * f for a, b in zip(values[:half], values[half:], strict=True)]
        return values[0]

    def fixing(self, tail) -> Surface:
        """This surface with its last len(tail) features fixed at the values `tail`: a
        surface of the leading features whose at() gives the same bits as at() of the whole
        row (those features folded on the grid once, by the same operations at() folds them
        with, last feature first)."""
        cells, _, _ = _cells(self)
        lead = len(self.features) - len(tail)
        grid = np.asarray(self.coef, dtype=np.float64)
        for d in range(len(self.features) - 1, lead - 1, -1):
            cell = next((c for c in cells if c[0] == d), None)
            if cell is None:  # one knot: nothing to fold
                grid = grid[..., 0]
                continue
            _, k, lo, hi, _, last = cell
            knots = k.tolist()
            v = min(max(float(tail[d - lead]), float(lo)), float(hi))
            i = min(max(bisect.bisect_right(knots, v) - 1, 0), last)
            f = (v - knots[i]) / (knots[i + 1] - knots[i])
            g = 1 - f
            grid = grid[..., i] * g + grid[..., i + 1] * f
        bounds = self.bounds[:lead] if self.bounds else None
        return Surface(self.features[:lead], self.knots[:lead], grid, bounds)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Values at the rows of x (n x features): multilinear interpolation folded one feature
        at a time, from the last to the first, each fold a * (1 - f) + b * f between the cell's
        lower and upper knot. A feature with one value down the column (a decode table's batch
        size and head shape) takes its cell once, and trailing such features are folded on the
        grid before any row is read; a row's value is the same bits whichever rows share its
        call, whether or not a column is constant in it."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        cells, _, _ = _cells(self)
        n = len(x)
        if not cells:
            return np.full(n, self.coef.ravel()[0])
        where = [_cell(x[:, d], k, lo, hi, last) for d, k, lo, hi, _, last in cells]
        values = self.coef.reshape([len(c[1]) for c in cells])
        j = len(cells) - 1
        while j >= 0 and where[j][2]:  # trailing constant features: fold the grid itself
            i, f, _ = where[j]
            values = values[..., i] * (1 - f) + values[..., i + 1] * f
            j -= 1
        if j < 0:
            return np.full(n, values)
        flat = values.ravel()
        if j == 0:  # one feature left: a line
            i, f, _ = where[0]
            return flat[i] * (1 - f) + flat[i + 1] * f
        strides = [int(np.prod(values.shape[d + 1 :])) for d in range(j + 1)]
        base = sum(where[d][0] * strides[d] for d in range(j + 1))
        bits = (np.arange(2 ** (j + 1))[:, None] >> np.arange(j + 1)[None, :]) & 1
        # (feature j varies down the call, so base is an array: corners are n x 2 ** (j + 1))
        corners = flat[base[:, None] + bits @ np.array(strides, dtype=np.int64)]
        for d in range(j, -1, -1):  # corner c holds bit d for feature d: the top bit first
            i, f, constant = where[d]
            if not constant:
                f = f[:, None]
            half = corners.shape[1] // 2
            corners = corners[:, :half] * (1 - f) + corners[:, half:] * f
        return corners[:, 0]

    def design(self, x: np.ndarray) -> sp.csr_matrix:
        """The sparse matrix B with B @ coef.ravel() == self(x)."""
        import scipy.sparse as sp  # fitting only: pricing (every run) need not import it

        index, weight = self._index_weights(x)
        rows = np.repeat(np.arange(len(x)), index.shape[1])
        size = int(np.prod(self.shape))
        return sp.csr_matrix((weight.ravel(), (rows, index.ravel())), shape=(len(x), size))

    def penalty(self) -> sp.csr_matrix:
        """Second differences along every feature with three or more knots."""
        import scipy.sparse as sp  # fitting only: pricing (every run) need not import it

        blocks = []
        for d, length in enumerate(self.shape):
            if length < 3:
                continue
            diff = sp.diags([1.0, -2.0, 1.0], [0, 1, 2], shape=(length - 2, length))
            ops = [sp.identity(s, format="csr") for s in self.shape]
            ops[d] = diff
            block = ops[0]
            for op in ops[1:]:
                block = sp.kron(block, op, format="csr")
            blocks.append(block)
        size = int(np.prod(self.shape))
        return sp.vstack(blocks).tocsr() if blocks else sp.csr_matrix((0, size))

    def fitted(self, x: np.ndarray, y: np.ndarray, smoothing: float) -> Surface:
        """Least squares of y on the grid, plus smoothing^2 x |second differences|^2."""
        import scipy.sparse as sp  # fitting only: pricing (every run) need not import it
        from scipy.sparse.linalg import spsolve  # fitting only, as above

        design = self.design(np.asarray(x, dtype=np.float64))
        pen = self.penalty()
        normal = design.T @ design + smoothing**2 * (pen.T @ pen)
        normal = normal + 1e-9 * sp.identity(normal.shape[0])
        coef = spsolve(normal.tocsc(), design.T @ np.asarray(y, dtype=np.float64))
        coef = np.asarray(coef).reshape(self.shape)
        return Surface(self.features, self.knots, coef, data_bounds(x))

    def to_dict(self) -> dict:
        out = {
            "features": list(self.features),
            "knots": [[float(v) for v in k] for k in self.knots],
            "coef_f16": base64.b64encode(self.coef.ravel().astype(COEF_DTYPE).tobytes()).decode(),
        }
        if self.bounds is not None:
            out["bounds"] = [[round(lo, 4), round(hi, 4)] for lo, hi in self.bounds]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Surface:
        knots = tuple(np.asarray(k, dtype=np.float64) for k in data["knots"])
        shape = tuple(len(k) for k in knots)
        raw = base64.b64decode(data["coef_f16"])
        coef = np.frombuffer(raw, dtype=COEF_DTYPE).astype(np.float64)
        if coef.size != int(np.prod(shape)):
            raise ValueError(f"surface has {coef.size} coefficients for a grid of {shape}")
        bounds = data.get("bounds")
        if bounds is not None:
            bounds = tuple((float(lo), float(hi)) for lo, hi in bounds)
        return cls(tuple(data["features"]), knots, coef.reshape(shape), bounds)


def _cell(column: np.ndarray, k: np.ndarray, lo: float, hi: float, last: int) -> tuple:
    """One feature's cell for each row: (knot index, fraction of the way to the next knot,
    constant), scalars when the column holds one value, arrays otherwise."""
    first = column[0]
    if math.isfinite(first) and (column == first).all():
        v = min(max(first, lo), hi)
        i = min(max(int(k.searchsorted(v, side="right")) - 1, 0), last)
        return i, (v - k[i]) / (k[i + 1] - k[i]), True
    v = np.minimum(np.maximum(column, lo), hi)
    i = np.minimum(np.maximum(k.searchsorted(v, side="right") - 1, 0), last)
    return i, (v - k[i]) / (k[i + 1] - k[i]), False


def _cells(surface: Surface) -> tuple[list, np.ndarray, np.ndarray]:
    """Per feature with two or more knots: (column, knots, clamp low, clamp high, stride,
    last cell), with the corner offsets of a cell and which corner takes the upper knot;
    worked out on first use and kept on the surface."""
    if surface.cells is not None:
        return surface.cells
    shape = surface.shape
    strides = [int(np.prod(shape[d + 1 :])) for d in range(len(shape))]
    cells = []
    for d, k in enumerate(surface.knots):
        if len(k) > 1:
            lo, hi = surface.bounds[d] if surface.bounds else (k[0], k[-1])
            cells.append((d, k, max(lo, k[0]), min(hi, k[-1]), strides[d], len(k) - 2))
    bits = (np.arange(2 ** len(cells))[:, None] >> np.arange(len(cells))[None, :]) & 1
    offsets = bits @ np.array([c[4] for c in cells], dtype=np.int64)
    object.__setattr__(surface, "cells", (cells, offsets, bits))
    return surface.cells


def _plain_cells(surface: Surface) -> tuple[list, list[int], list[float]]:
    """_cells as Python numbers for Surface.at (knots and clamps as floats: the same values,
    and a point's arithmetic stays in Python floats), with the coefficients as a flat list;
    kept on the surface."""
    cells, offsets, _ = _cells(surface)
    plain = (
        [
            (d, k.tolist(), float(lo), float(hi), stride, last)
            for d, k, lo, hi, stride, last in cells
        ],
        offsets.tolist(),
        surface.coef.ravel().tolist(),
    )
    object.__setattr__(surface, "plain", plain)
    return plain


def data_bounds(x: np.ndarray, *others: tuple | None) -> tuple[tuple[float, float], ...]:
    """Per feature, the range of the rows of x, widened to cover any `others` bounds."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    lo, hi = x.min(axis=0), x.max(axis=0)
    for other in others:
        if other is not None:
            lo = np.minimum(lo, [b[0] for b in other])
            hi = np.maximum(hi, [b[1] for b in other])
    return tuple((float(a), float(b)) for a, b in zip(lo, hi, strict=True))


def grid(features: tuple[str, ...], knots: list) -> Surface:
    """An all-zero surface (efficiency 1) on the given knots, ready to be fitted."""
    arrays = tuple(np.asarray(k, dtype=np.float64) for k in knots)
    return Surface(features, arrays, np.zeros(tuple(len(k) for k in arrays)))
