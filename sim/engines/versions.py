"""Engine version numbers as comparable tuples ("0.6.3.post1" -> (0, 6, 3))."""

from __future__ import annotations


def version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in str(version).split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out + [0] * (3 - len(out)))  # "1.0" == "1.0.0"
