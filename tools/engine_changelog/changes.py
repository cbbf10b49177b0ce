"""What changed from one release's facts to the next, and the changelog file that holds it.

A change is {setting, before, after, kind, file, modelled, source} plus `where`: the class of a
default, or the function and the chain of if-tests of a derived rule (so a change reads
"chunked_prefill_size, ServerArgs.__post_init__ | gpu_mem < 25000: 2048 -> 1024"). kind:
added / removed (an argument or flag that appears or goes), default (a changed default the
simulator does not model), kernel / scheduling / memory / default (a modelled one, by the
category of the EngineSettings field it sets), kernel for a changed environment flag that
selects kernels, derived (a changed derivation rule). modelled: the setting is one the
simulator's rules set (engines.modelled_names), except a derived rule taken only on a platform
the simulator has no GPU for (off_platform). before / after: the value, "(absent)" on the
side where the argument, flag or rule does not exist.
"""

from __future__ import annotations

import ast
import re

import yaml

from sim.engines.changelog import read_file
from sim.engines.settings import CATEGORY
from sim.engines.versions import release_key
from tools.engine_changelog.engines import ENV_RE

KIND_OF_CATEGORY = {"defaults": "default", "kernels": "kernel", "scheduling": "scheduling"}
KIND_OF_CATEGORY["memory"] = "memory"
ENV_KINDS = (
    ("kernel", r"ATTN|GEMM|_DG_|KERNEL|FLASH|TRITON|CUDA|GRAPH|COMPILE|MARLIN|MOE|FP8|CUTLASS"),
    ("scheduling", r"SCHED|ASYNC|_V1$|OVERLAP|STEP|RATIO"),
    ("memory", r"MEM|CACHE|KV|SWAP|BLOCK"),
)


ABSENT = "(absent)"  # the side of an added or removed argument, flag or rule that has none

OFF_PLATFORM = re.compile(r"\b(?:is_)?(?:cpu|tpu|xpu|npu|hpu|neuron|openvino|mps|musa)\b")


def value(text_: str | None):
    """A fact's text as a YAML scalar where it is a literal (256, 'fcfs', None), else the text;
    ABSENT where there is no such fact."""
    if text_ is None:
        return ABSENT
    try:
        out = ast.literal_eval(text_)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text_
    return out if isinstance(out, (int, float, str, bool, type(None))) else text_


def diff(before: dict, after: dict, modelled: frozenset[str], names: dict) -> list[dict]:
    """The changes from facts `before` to facts `after` (release.archive_facts)."""
    source = after["archive"]
    out = []
    for key in sorted(before["defaults"].keys() | after["defaults"].keys()):
        cls, _, name = key.rpartition(".")
        if ENV_RE.match(name):
            continue  # a flag declared as a class attribute (SGLang's Envs): an env fact
        out += _pair(before["defaults"].get(key), after["defaults"].get(key), name, cls)
    for name in sorted(before["env"].keys() | after["env"].keys()):
        out += _pair(before["env"].get(name), after["env"].get(name), name, "environment")
    for setting in sorted(before["rules"].keys() | after["rules"].keys()):
        old, new = before["rules"].get(setting, {}), after["rules"].get(setting, {})
        for where in sorted(old.keys() | new.keys()):
            if (old.get(where) or {}).get("value") != (new.get(where) or {}).get("value"):
                fact = new.get(where) or old[where]
                out.append(_change(setting, where, old.get(where), new.get(where), fact["file"]))
                out[-1]["kind"] = "derived"
    for change in out:
        change["source"] = source
    return mark(out, modelled, names)


def mark(found: list[dict], modelled: frozenset[str], names: dict) -> list[dict]:
    """Each change's `modelled` and, for a changed default, its kind, from the simulator's
    names now: a changelog is remarked without its packages (`--remark`)."""
    for change in found:
        change["modelled"] = change["setting"] in modelled and not off_platform(change)
        if change["kind"] in KIND_OF_CATEGORY.values() and change["where"] != "environment":
            modelled_default = change["modelled"] and change["kind"] != "derived"
            change["kind"] = _kind(change["setting"], names) if modelled_default else "default"
    return found


def off_platform(change: dict) -> bool:
    """A derived rule taken only on a platform the simulator has no GPU for: one of its
    conditions (not negated) tests for a CPU, TPU, XPU, NPU, HPU, Neuron, OpenVINO, MPS or
    MUSA device (the catalogue holds NVIDIA and AMD GPUs)."""
    if change["kind"] != "derived":
        return False
    tests = change["where"].split(" | ")[1:]
    return any(OFF_PLATFORM.search(t) for t in tests if not t.startswith("not ("))


def _pair(old: dict | None, new: dict | None, setting: str, where: str) -> list[dict]:
    if old and new and old["value"] == new["value"]:
        return []
    change = _change(setting, where, old, new, (new or old)["file"])
    if old is None or new is None:
        change["kind"] = "added" if old is None else "removed"
    elif where == "environment":
        change["kind"] = _env_kind(setting)
    return [change]


def _change(setting: str, where: str, old: dict | None, new: dict | None, file: str) -> dict:
    return {
        "setting": setting,
        "where": where,
        "before": value(old and old["value"]),
        "after": value(new and new["value"]),
        "kind": "default",
        "file": file,
    }


def _kind(setting: str, names: dict) -> str:
    knob = {v: k for k, v in names.items()}.get(setting, setting)
    category = CATEGORY.get(knob)
    return KIND_OF_CATEGORY[category.value] if category else "default"


def _env_kind(name: str) -> str:
    return next((kind for kind, pattern in ENV_KINDS if re.search(pattern, name)), "default")


def attach_prs(found: list[dict], prs: dict) -> None:
    """Each change's `pr` from prs.yaml's {setting: PR} of its release, where one is known."""
    for change in found:
        if change["setting"] in prs:
            change["pr"] = prs[change["setting"]]


def release_entry(facts: dict, changes: list[dict] | None, previous: str | None) -> dict:
    entry = {"read_from": facts["read_from"], "compared_with": previous}
    entry["modelled_change"] = None if changes is None else any(c["modelled"] for c in changes)
    entry["changes"] = changes or []
    return entry


FIELDS = ("setting", "where", "before", "after", "kind", "file", "modelled", "source", "pr")


def write_changelog(path, header: dict, releases: dict, unread: dict, comment: str) -> None:
    ordered = {r: releases[r] for r in sorted(releases, key=release_key)}
    for entry in ordered.values():  # each change's fields in one order, however it was made
        entry["changes"] = [{k: c[k] for k in FIELDS if k in c} for c in entry["changes"]]
    missing = {r: unread[r] for r in sorted(unread, key=release_key)}
    body = {**header, "releases": ordered, "unread": missing}
    path.parent.mkdir(parents=True, exist_ok=True)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: 5x faster when there
    text = yaml.dump(body, Dumper=dumper, sort_keys=False, width=100, allow_unicode=True)
    path.write_text("".join(f"# {line}\n" for line in comment.splitlines()) + text)


def read_changelog(path) -> dict:
    return read_file(path) or {}
