"""Catalogue names as people type them: a suggestion for a mistyped one (`h100` -> `h100-sxm`,
`llama3-8b` -> `llama-3.1-8b`), and a HuggingFace repository id read as the catalogue entry of
the same architecture (`meta-llama/Llama-3.1-8B-Instruct` -> `llama-3.1-8b`).

An id matches an entry when their names are the same words once case, the organisation and
the words of a fine-tuned variant are set aside: an instruction or chat tune, a base or
pretrained checkpoint and HuggingFace's `-hf` conversions share the architecture of the entry,
as do Meta's repositories under their former names (`Meta-Llama-3.1-8B`).
Anything else (a size, a version, a date, a quantisation such as FP8) must match.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

# Words that name a variant of the same architecture (Llama-3.1-8B-Instruct, Llama-2-7b-chat-hf,
# Qwen3-8B-Base, gemma-3-27b-pt / -it).
VARIANT_WORDS = frozenset({"instruct", "chat", "it", "hf", "base", "pt"})
MAX_SUGGESTIONS = 3
CUTOFF = 0.6  # difflib's similarity below which a name is not offered
NEAR_BEST = 0.06  # offered beside the closest when this near to it


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """' (did you mean X?)' with the closest of `choices`, or '' when none is close. The
    choices the name begins (`h100` -> `h100-sxm`, `a100` -> both A100s) or that begin the name
    (`h200-sxm` -> `h200`) come first; else difflib's closest spellings, those about as close
    as the closest (`llama3-8b` -> `llama-3.1-8b` alone, not every Llama); else the other
    variants of the part the name starts with, when that word is a part number (`h100-pcie` ->
    `h100-sxm`; `gpt-5` gets nothing). Case is ignored throughout."""
    typed = str(name).strip().lower()
    by_lower = {str(c).lower(): str(c) for c in choices}
    prefixed = [
        c
        for c in by_lower
        if len(typed) >= 2 and (c.startswith(typed) or typed.startswith(c + "-"))
    ]
    close = _closest(typed, prefixed or list(by_lower), cutoff=0.0 if prefixed else CUTOFF)
    if not close:  # another variant of the same part: h100-pcie -> h100-sxm
        part = re.split(r"[-_\s]+", typed)[0]
        family = [c for c in by_lower if re.split(r"[-_\s]+", c)[0] == part]
        close = _closest(typed, family, cutoff=0.0) if re.search(r"\d", part) else []
    if not close:
        return ""
    return f" (did you mean {' or '.join(by_lower[c] for c in close)}?)"


def _closest(typed: str, choices: list[str], cutoff: float) -> list[str]:
    scored = sorted(
        ((difflib.SequenceMatcher(None, typed, c).ratio(), c) for c in choices),
        key=lambda rc: -rc[0],
    )
    if not scored or scored[0][0] < cutoff:
        return []
    best = scored[0][0]
    return [c for r, c in scored[:MAX_SUGGESTIONS] if r >= max(cutoff, best - NEAR_BEST)]


def name_words(name: str) -> tuple[str, ...]:
    """A model name as the words that decide its architecture: lower case, the organisation
    (`meta-llama/`) and the variant words left out."""
    repo = str(name).strip().rsplit("/", 1)[-1].lower()
    words = tuple(w for w in re.split(r"[-_\s]+", repo) if w and w not in VARIANT_WORDS)
    return words[1:] if words[:2] == ("meta", "llama") else words  # Meta-Llama-3.1-8B: the
    # name of Meta's repositories before they were renamed Llama-3.1-8B


def catalogue_match(name: str, entries: Sequence[str]) -> str | None:
    """The one entry whose name has the same words as `name` (a HuggingFace id or a differently
    written catalogue name); None when no entry, or more than one, does."""
    words = name_words(name)
    found = [e for e in entries if words and name_words(e) == words]
    return found[0] if len(found) == 1 else None
