"""A per-sequence cost as a function of context length, tabulated lazily in fixed pages.

A decode step prices every sequence's attention from its context alone (given the batch's
size), so the cost model looks each context up instead of pricing the batch afresh. Every
value is computed once, in a call that prices whole pages of PAGE_TOKENS contexts (as many
pages as the table grows by: one call costs ~0.3 ms however short, ~0.25 ms more per page).
Pricing is elementwise, so a context's value does not depend on which batch asked first or
on how many pages the call held (tests/test_cost_tables.py checks it page by page, windowed
layers included): the same context always gives the same bits, whether a step is simulated
alone or as part of a fast-forwarded run of steps.

    contexts   0 ........ DENSE_TOKENS ........................ 1M
    storage    [ dense array, grown page by page ] [ sparse pages, on demand ]
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np

PAGE_TOKENS = 1024
DENSE_TOKENS = 1 << 16  # contexts below this live in one array; above, pages in a dict


class ContextTable:
    def __init__(self, per_sequence: Callable[[np.ndarray], np.ndarray]):
        self.per_sequence = per_sequence  # contexts (int64 array) -> seconds (float64 array)
        self.dense = np.zeros(0)
        # the same values, for row() to read as Python floats: an array, not a list, so the
        # garbage collector has nothing to visit in it (a list's every float would be visited
        # by each full collection: a sweep worker's tables hold millions)
        self.dense_values = array("d")
        self.pages: dict[int, np.ndarray] = {}

    def _page(self, index: int, count: int = 1) -> np.ndarray:
        """`count` pages from page `index` on, priced in one call (see the module's note)."""
        start = index * PAGE_TOKENS
        contexts = np.arange(start, start + count * PAGE_TOKENS, dtype=np.int64)
        return np.asarray(self.per_sequence(contexts), dtype=np.float64)

    def _grow(self, top: int) -> None:
        """Dense pages up to the one holding context `top` (< DENSE_TOKENS)."""
        have = len(self.dense) // PAGE_TOKENS
        need = top // PAGE_TOKENS + 1
        if need > have:
            self.dense = np.concatenate([self.dense, self._page(have, need - have)])
            self.dense_values = array("d", self.dense.tobytes())

    def values_upto(self, top: int) -> array | None:
        """The values of contexts 0 .. top (at least) as an array of Python-readable floats,
        indexable by context; None when `top` lies beyond the dense pages."""
        if top >= DENSE_TOKENS:
            return None
        if top >= len(self.dense_values):
            self._grow(top)
        return self.dense_values

    def row(self, contexts: list[int]) -> list[float]:
        """The same values for one list of contexts, as Python floats."""
        top = max(contexts)
        if top < DENSE_TOKENS:
            if top >= len(self.dense_values):
                self._grow(top)
            dense = self.dense_values
            return [dense[c] for c in contexts]
        return self(np.array(contexts, dtype=np.int64)).tolist()

    def __call__(self, contexts: np.ndarray) -> np.ndarray:
        """Seconds per sequence at each context (any shape of non-negative int64)."""
        if contexts.size == 0:
            return np.zeros(contexts.shape)
        top = int(contexts.max())
        if top < DENSE_TOKENS:
            if top >= len(self.dense):
                self._grow(top)
            return self.dense[contexts]
        out = np.empty(contexts.shape)
        small = contexts < DENSE_TOKENS
        if small.any():  # the dense pages only as far as the short contexts reach
            self._grow(int(contexts[small].max()))
            out[small] = self.dense[contexts[small]]
        big = contexts[~small]
        values = np.empty(big.shape)
        page_of = big // PAGE_TOKENS
        for p in np.unique(page_of).tolist():
            if p not in self.pages:
                self.pages[p] = self._page(p)
            sel = page_of == p
            values[sel] = self.pages[p][big[sel] - p * PAGE_TOKENS]
        out[~small] = values
        return out
