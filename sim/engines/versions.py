"""Engine version numbers: as comparable tuples for the rules ("0.6.3.post1" -> (0, 6, 3)), and
in full release order for telling published releases apart ("1.3.0rc10" < "1.3.0" <
"1.3.0.post1")."""

from __future__ import annotations

import re

# The forms engines publish (PEP 440, without epochs or local parts): 0.8.5, 0.9.0.1,
# 0.6.3.post1, 1.3.0rc10, 1.2.0rc6.post3, 0.19.0.dev2025040800.
_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.?post(\d+))?(?:\.?dev(\d+))?")
_PRE_RANK = {"a": -3, "b": -2, "rc": -1, None: 0}  # a pre-release comes before its release
RELEASE_PARTS = 4  # 0.10.1.1: the most numbers a release of the catalogue's engines has


def version_tuple(version: str) -> tuple[int, ...]:
    """The first three numbers of a version, each read from its leading digits ("1.3.0rc5" ->
    (1, 3, 0)): what the rules compare against the release that changed them."""
    out = []
    for part in str(version).split(".")[:3]:
        digits = re.match(r"\d*", part).group()
        out.append(int(digits) if digits else 0)
    return tuple(out + [0] * (3 - len(out)))  # "1.0" == "1.0.0"


def release_key(version: str) -> tuple | None:
    """The release order of `version` (None: not a version number): numbers first ("1.0" ==
    "1.0.0"), then a pre-release before its release, a post release after it and a dev build
    before whatever it is a build of."""
    m = _RELEASE.fullmatch(str(version).strip().lower())
    if m is None:
        return None
    numbers, pre, pre_n, post, dev = m.groups()
    parts = tuple(int(n) for n in numbers.split("."))
    if len(parts) > RELEASE_PARTS:
        return None
    parts += (0,) * (RELEASE_PARTS - len(parts))
    return (
        parts,
        (_PRE_RANK[pre], int(pre_n or 0)),
        int(post) if post is not None else -1,
        int(dev) if dev is not None else 10**12,  # a dev build before its release
    )
