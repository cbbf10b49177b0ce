"""The releases each engine has published, and which of them the catalogue knows.

A release is known when it was published and lies between its family's first rule set and the
newest rule set's line (vLLM 0.4.0 .. 0.33.x, SGLang 0.3.0 .. 0.5.x, TensorRT-LLM 1.0.0 ..
1.4.x); it runs with the rules of the nearest rule set not after it, in release order
(0.6.3.post1 after 0.6.3, 1.3.0rc10 before 1.3.0). Every rule set is known by its own name.
Anything else is refused with the nearest known releases: a mistyped release (vllm@0.8.45) must
not run with some other release's rules and be reported as that release. A published release
past the newest line (vllm 0.34.0) is refused as well: nobody has read its rules yet
(docs/architecture.md, recipe "A new engine release line").

Sources, read 2026-12-07 (every release from the family's first rule set on):
    vllm    PyPI, `pip index versions --pre vllm` (no pre-releases are published there)
    sglang  PyPI, `pip index versions --pre sglang`
    trtllm  PyPI, `pip index versions --pre tensorrt-llm`, from 1.0.0; and three releases
            NVIDIA published only on its own index and GitHub: 1.3.0rc18 (its wheel on
            pypi.nvidia.com, named in smg-project/smg PR #1663, which also says PyPI then
            stopped at rc15), 1.3.0rc20 (https://github.com/NVIDIA/TensorRT-LLM/releases/tag/
            v1.3.0rc20) and 1.4.0rc4 (its versioned docs, https://nvidia.github.io/
            TensorRT-LLM/1.4.0rc4/, which sim/engines/trtllm.py's rules were read from).
            1.3.0rc16, rc17, rc19, rc21 and 1.4.0rc2, rc3 fill the gaps of that numbering but
            no source for them was found: they are refused until one is added here. The rule
            set 1.4.0 names the 1.4 line (read from 1.4.0rc4); no final 1.4.0 had been
            published by that date.
"""

from __future__ import annotations

from sim.engines.versions import release_key, version_tuple
from sim.errors import UserError


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


PUBLISHED: dict[str, tuple[str, ...]] = {
    "vllm": _names(
        """
    0.4.0 0.4.0.post1 0.4.1 0.4.2 0.4.3 0.5.0 0.5.0.post1 0.5.1 0.5.2 0.5.3 0.5.3.post1
    0.5.4 0.5.5 0.6.0 0.6.1 0.6.1.post1 0.6.1.post2 0.6.2 0.6.3 0.6.3.post1 0.6.4
    0.6.4.post1 0.6.5 0.6.6 0.6.6.post1 0.7.0 0.7.1 0.7.2 0.7.3 0.8.0 0.8.1 0.8.2 0.8.3
    0.8.4 0.8.5 0.8.5.post1 0.9.0 0.9.0.1 0.9.1 0.9.2 0.10.0 0.10.1 0.10.1.1 0.10.2
    0.11.0 0.11.1 0.11.2 0.12.0 0.13.0 0.14.0 0.14.1 0.15.0 0.15.1 0.16.0 0.17.0 0.17.1
    0.18.0 0.18.1 0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0 0.22.1 0.23.0 0.24.0
    0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.33.0 0.34.0
    """
    ),
    "sglang": _names(
        """
    0.3.0 0.3.1 0.3.1.post1 0.3.1.post2 0.3.1.post3 0.3.2 0.3.3 0.3.3.post1 0.3.4
    0.3.4.post1 0.3.4.post2 0.3.5 0.3.5.post1 0.3.5.post2 0.3.6 0.3.6.post1 0.3.6.post2
    0.3.6.post3 0.4.0 0.4.0.post1 0.4.0.post2 0.4.1 0.4.1.post1 0.4.1.post2 0.4.1.post3
    0.4.1.post4 0.4.1.post5 0.4.1.post6 0.4.1.post7 0.4.2 0.4.2.post1 0.4.2.post2
    0.4.2.post3 0.4.2.post4 0.4.3 0.4.3.post1 0.4.3.post2 0.4.3.post3 0.4.3.post4 0.4.4
    0.4.4.post1 0.4.4.post2 0.4.4.post3 0.4.4.post4 0.4.5 0.4.5.post1 0.4.5.post2
    0.4.5.post3 0.4.6 0.4.6.post1 0.4.6.post2 0.4.6.post3 0.4.6.post4 0.4.6.post5 0.4.7
    0.4.7.post1 0.4.8 0.4.8.post1 0.4.9 0.4.9.post1 0.4.9.post2 0.4.9.post3 0.4.9.post4
    0.4.9.post5 0.4.9.post6 0.4.10 0.4.10.post1 0.4.10.post2 0.5.0rc0 0.5.0rc1 0.5.0rc2
    0.5.1 0.5.1.post1 0.5.1.post2 0.5.1.post3 0.5.2rc0 0.5.2rc1 0.5.2rc2 0.5.2 0.5.3rc0
    0.5.3rc2 0.5.3 0.5.3.post1 0.5.3.post2 0.5.3.post3 0.5.4 0.5.4.post1 0.5.4.post2
    0.5.4.post3 0.5.5 0.5.5.post1 0.5.5.post2 0.5.5.post3 0.5.6 0.5.6.post1 0.5.6.post2
    0.5.7 0.5.8 0.5.8.post1 0.5.9 0.5.10rc0 0.5.10 0.5.10.post1 0.5.11 0.5.12
    0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18
    0.5.19 0.5.20 0.5.21 0.5.22 0.5.23
    """
    ),
    "trtllm": _names(
        """
    1.0.0 1.1.0rc0 1.1.0rc1 1.1.0rc2 1.1.0rc3 1.1.0rc4 1.1.0rc5 1.1.0 1.2.0rc0 1.2.0rc1
    1.2.0rc2 1.2.0rc2.post2 1.2.0rc3 1.2.0rc4 1.2.0rc5 1.2.0rc6 1.2.0rc6.post1
    1.2.0rc6.post2 1.2.0rc6.post3 1.2.0rc7 1.2.0rc8 1.2.0 1.2.1 1.3.0rc0 1.3.0rc1
    1.3.0rc2 1.3.0rc3 1.3.0rc4 1.3.0rc5 1.3.0rc5.post1 1.3.0rc5.post2 1.3.0rc6 1.3.0rc7
    1.3.0rc8 1.3.0rc9 1.3.0rc10 1.3.0rc11 1.3.0rc12 1.3.0rc12.post1 1.3.0rc13 1.3.0rc14
    1.3.0rc15 1.3.0rc18 1.3.0rc20 1.3.0rc22 1.3.0rc22.post1 1.3.0rc23 1.3.0rc23.post1
    1.3.0rc24 1.3.0rc25 1.3.0rc26 1.3.0rc27 1.3.0rc28 1.3.0rc29 1.4.0rc0 1.4.0rc1 1.4.0rc4
    """
    ),
}  # the teaching engines (orca, static) publish nothing: their one rule set is all they are


def known_releases(engine: str, rule_sets: tuple[str, ...]) -> tuple[str, ...]:
    """Every release of `engine` the catalogue knows, oldest first: its rule sets and the
    published releases from the first rule set to the end of the newest one's line."""
    first, last = release_key(rule_sets[0]), _line_end(rule_sets[-1])
    published = [r for r in PUBLISHED.get(engine, ()) if first <= release_key(r) < last]
    by_key = {release_key(r): r for r in (*published, *rule_sets)}
    return tuple(by_key[k] for k in sorted(by_key))


def known_release(spec: str, engine: str, version: str, rule_sets: tuple[str, ...]):
    """(the release as the catalogue spells it, the rule set it runs with) for `version` of
    `engine`; a UserError naming the nearest known releases when it is not known."""
    key = release_key(version)
    if key is None:
        raise UserError(
            f"engine={spec!r}: {version!r} is not a release number; give one as the engine "
            "publishes it (e.g. vllm@0.8.5, vllm@0.6.3.post1, trtllm@1.3.0rc10)"
        )
    known = known_releases(engine, rule_sets)
    by_key = {release_key(r): r for r in known}
    if key in by_key:
        rule_set = max((r for r in rule_sets if release_key(r) <= key), key=release_key)
        return by_key[key], rule_set
    nearest = _neighbours(key, known)
    if key < release_key(rule_sets[0]) or key >= _line_end(rule_sets[-1]):
        published = any(release_key(r) == key for r in PUBLISHED.get(engine, ()))
        why = (
            ": it is published, but no rules have been read for its line yet (docs/"
            "architecture.md, recipe 'A new engine release line')"
            if published
            else ""
        )
        raise UserError(
            f"engine={spec!r}: {engine} {version} is outside the known range {rule_sets[0]} .. "
            f"{rule_sets[-1]}{why}; the nearest known: {nearest}"
        )
    typos = _one_key_off(version, known)
    raise UserError(
        f"engine={spec!r}: {engine} {version} is not a release {engine} has published "
        f"(sim/engines/published.py lists the ones known); the nearest known: {nearest}"
        + (f" (did you mean {' or '.join(typos)}?)" if typos else "")
    )


def _line_end(newest: str) -> tuple:
    """A release key past every release of the newest rule set's line and before any of the
    next line's (0.33.0: past 0.33.x, before 0.34.0 and its pre-releases)."""
    major, minor, _ = version_tuple(newest)
    return ((major, minor + 1, 0, 0), (-4, 0), -1, 0)  # -4: before an alpha's -3


def _neighbours(key: tuple, known: tuple[str, ...]) -> str:
    """The known releases just before and just after `key`, in release order."""
    before = [r for r in known if release_key(r) < key]
    after = [r for r in known if release_key(r) > key]
    return " and ".join(([before[-1]] if before else []) + ([after[0]] if after else []))


def _one_key_off(typed: str, known: tuple[str, ...]) -> list[str]:
    """Known releases of the typed one's line that it is one slip of a key away from: a key
    pressed once too often or two keys swapped (0.8.45 -> 0.8.4, 0.8.5). A changed digit names
    another release as much as a slip, so it is not offered."""
    typed = typed.strip().lower()
    line = version_tuple(typed)[:2]
    return [r for r in known if version_tuple(r)[:2] == line and _slip(typed, r)][:3]


def _slip(typed: str, release: str) -> bool:
    if len(typed) == len(release) + 1:
        return any(typed[:i] + typed[i + 1 :] == release for i in range(len(typed)))
    swaps = (typed[:i] + typed[i + 1] + typed[i] + typed[i + 2 :] for i in range(len(typed) - 1))
    return len(typed) == len(release) and typed != release and release in swaps
