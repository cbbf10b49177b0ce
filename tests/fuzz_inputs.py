"""Malformed user input for every parser, and what each parser must make of it.

Each parser has a dict of Hypothesis strategies, one per kind of malformed input (KINDS below),
each drawing an `Example`: the bytes of a file, the name to write them under (its suffix picks
the format; it may hold folders), and the field that was changed. `check_<parser>(path)` loads
a written example and returns "loaded" or "error"; anything else raises AssertionError:

  * an exception other than UserError (KeyError, ValueError, RecursionError, ...);
  * a UserError that is not one line or does not name the file (config: the key);
  * values loaded that are not sane (lengths >= 1, finite numbers, arrivals sorted from 0);
  * a parse that runs longer than HANG_S (a hang);
  * a sparse file (`hole`) whose parse raises the process's peak memory by PEAK_BYTES or more
    (it runs under an address-space cap of that much more, so a parser that reads a 5 GB
    file of zeros fails with MemoryError here instead of taking the machine down).

Used by tests/test_fuzz.py (bounded, derandomized) and benchmarks/fuzz.py (many examples).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import re
import resource
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import yaml
from hypothesis import strategies as st

from sim.calibrate.kernel_tables import read_tables
from sim.calibrate.observations import COLUMNS
from sim.config import MAX_TOKENS, SimConfig
from sim.errors import UserError
from sim.paths import HARDWARE_DIR, MODEL_CATALOG_DIR
from sim.scenarios.validate.cases import MAX_LABEL, MAX_REASON, load_cases
from sim.scenarios.validate.importers.bench_json import bench_json as importer_bench_json
from sim.scenarios.validate.importers.command import write_cases
from sim.scenarios.validate.importers.guidellm import guidellm
from sim.scenarios.validate.importers.silicon import silicon
from sim.specs.hardware import load_hardware
from sim.specs.model import Attention
from sim.specs.model_config import load_model
from sim.workload.bench_results import BENCH_METRICS, bench_metrics, measured_requests
from sim.workload.traces import load_trace

HANG_S = 20.0  # a parse of a file of a few kB that takes this long is a hang
PEAK_BYTES = 2**30  # a refused input may raise the peak memory by less than this


class Example(NamedTuple):
    kind: str  # one of KINDS
    content: bytes | None  # None: a folder stands where the file should be
    name: str  # relative path to write it at
    where: str = ""  # the field changed, dotted ("3.ContextTokens"; several: joined by ";")
    hole: int = 0  # bytes of zeros after `content`, written as a sparse hole (no disk used)


# ---- values that break parsers ------------------------------------------------------------------
NONFINITE = (math.nan, math.inf, -math.inf)
BAD_NUMBERS = (0, -1, -4096, 0.5, 1.5, -0.0, -1e-9)
HUGE = (1e30, 2**63, 2**64, -(2**63), 1e308, -1e308, 10**400)
WRONG_TYPES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "12", "1e3", "NaN", "inf", "true", "2023-01-01", "null", "[1]"]),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=2),
    st.none(),
    st.booleans(),
)
DEEP = "__DEEP_NESTING__"  # replaced by [[[...]]] once serialized
RAW = "__RAW__"  # RAW + text + RAW: replaced by the bare text once serialized (a number as
# written: 4e0 is a float in JSON and YAML 1.2, text in YAML 1.1)
BOMB = "__ALIAS_BOMB__"  # replaced by an alias to nested anchors (YAML)
EXTREME_FLOATS = (
    "5e-324",
    "1e-320",
    "2.2250738585072014e-308",
    "1e-300",
    "1.7976931348623157e308",
    "1e308",
    "-1e308",
    "4e0",
    "1E3",
    "-0.0",
    "9.999999999999999e22",
)
MARKUP = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "a | b",
    "| x |\n|---|",
    "**bold** _it_ `code`",
    "[link](javascript:alert(1))",
    "line one\nline two",
    "# heading",
    "&lt;&amp;&#x27;",
    "${oc.env:HOME}",
    "$(touch /tmp/sim-fuzz)",
    "<!-- comment -->",
    "\u202eevil",
    "\x1b[31mred\x1b[0m",
    "{{ 7 * 7 }}",
)
HOLES = (2**20, 300 * 2**20, 5 * 2**30)  # sparse: 1 MiB, 300 MiB, 5 GiB of zeros
EXTRA_VALUES = st.one_of(
    WRONG_TYPES,
    st.integers(-3, 2**40),
    st.floats(),
    st.lists(st.integers(0, 3), max_size=4),
    st.lists(st.sampled_from(["full_attention", "sliding_attention", "linear_attention"])),
    st.fixed_dictionaries({"num_heads": st.integers(0, 64), "head_dim": st.integers(0, 256)}),
)

STRUCTURE_KINDS = (
    "valid",
    "missing_field",
    "wrong_type",
    "nonfinite",
    "bad_number",
    "huge",
    "unsorted",
    "duplicate_rows",
    "no_rows",
    "extra_fields",
    "deep_nesting",
    "several",
    "markup",
    "extreme_floats",
)
SEVERAL = ("missing_field", "wrong_type", "nonfinite", "bad_number", "huge", "extra_fields")
BYTE_KINDS = ("empty", "truncated", "non_utf8", "random_bytes", "wrong_extension", "bad_path")
BYTE_KINDS += ("sparse", "alias_bomb")
KINDS = STRUCTURE_KINDS + BYTE_KINDS


@dataclass(frozen=True)
class Format:
    name: str  # where the parser expects the file
    docs: st.SearchStrategy  # well-formed documents (JSON-like: dicts, lists, numbers, text)
    write: Callable[[object], bytes]
    other_names: tuple[str, ...]  # the same content misfiled (wrong_extension)
    max_depth: int = 100_000  # deep_nesting: the deepest [[[...]]] to write
    known_keys: tuple[str, ...] = ()  # extra_fields: names the parser knows, besides random ones


# ---- serializers ------------------------------------------------------------------------------
def _json(doc) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def _jsonl(rows) -> bytes:
    rows = rows if isinstance(rows, list) else [rows]
    return "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows).encode()


def _yaml(doc) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def _csv(columns: tuple[str, ...]) -> Callable[[object], bytes]:
    """Rows of dicts as CSV; the header is every key seen (`columns` when there are no rows)."""

    def write(rows) -> bytes:
        rows = rows if isinstance(rows, list) else [rows]
        header = list(dict.fromkeys(k for r in rows if isinstance(r, dict) for k in r))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header or columns)
        for r in rows:
            writer.writerow([r.get(k, "") for k in header] if isinstance(r, dict) else [r])
        return out.getvalue().encode()

    return write


def _parquet(rows) -> bytes:
    rows = rows if isinstance(rows, list) else [rows]
    rows = [r if isinstance(r, dict) else {"value": r} for r in rows]
    df = pd.DataFrame(rows)
    df.columns = [str(c) for c in df.columns]
    for attempt in range(2):
        buf = io.BytesIO()
        try:
            df.to_parquet(buf)
            return buf.getvalue()
        except Exception:  # mixed types pyarrow cannot store: keep them as text
            if attempt:
                raise
            for col in df.columns:
                if df[col].dtype.kind == "O":
                    df[col] = df[col].map(lambda v: v if v is None else str(v))
    raise AssertionError("unreachable")


# ---- mutations ---------------------------------------------------------------------------------
def _nodes(doc, path=()) -> Iterator[tuple[tuple, object]]:
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for key, value in items:
        yield (*path, key), value
        yield from _nodes(value, (*path, key))


def _at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@st.composite
def _mutated(draw, kind: str, doc, known_keys: tuple[str, ...] = ()) -> tuple[object, str]:
    """`doc` with one change of `kind` (a copy), and the dotted path of what changed."""
    doc = copy.deepcopy(doc)
    if kind == "several":  # two to four changes at once; their paths joined by ";"
        wheres = []
        for _ in range(draw(st.integers(2, 4))):
            doc, where = draw(_mutated(draw(st.sampled_from(SEVERAL)), doc, known_keys))
            wheres.append(where)
        return doc, ";".join(wheres)
    nodes = list(_nodes(doc))
    rows = isinstance(doc, list) and bool(doc) and all(isinstance(r, dict) for r in doc)
    values = {
        "wrong_type": WRONG_TYPES,
        "nonfinite": st.sampled_from(NONFINITE),
        "bad_number": st.sampled_from(BAD_NUMBERS),
        "huge": st.sampled_from(HUGE),
        "deep_nesting": st.just(DEEP),
        "extreme_floats": st.sampled_from([f"{RAW}{x}{RAW}" for x in EXTREME_FLOATS]),
    }
    path: tuple = ()
    if kind == "markup":  # one text field, or every one, written as markup
        texts = [p for p, v in nodes if isinstance(v, str)]
        if texts and draw(st.booleans()):
            chosen = texts
        else:
            chosen = [draw(st.sampled_from(texts or [p for p, _ in nodes]))] if nodes else []
        for at in chosen:
            _at(doc, at[:-1])[at[-1]] = draw(st.sampled_from(MARKUP))
        path = chosen[0] if chosen else ()
    elif kind == "missing_field":
        keys = [p for p, _ in nodes if isinstance(_at(doc, p[:-1]), dict)]
        if keys:
            path = draw(st.sampled_from(keys))
            if rows and len(path) == 2 and draw(st.booleans()):  # the whole column
                for r in doc:
                    r.pop(path[1], None)
            else:
                del _at(doc, path[:-1])[path[-1]]
    elif kind in values:
        numbers = [p for p, v in nodes if _is_number(v)]
        targets = [p for p, _ in nodes]
        if kind in ("nonfinite", "bad_number", "huge", "extreme_floats") and numbers:
            targets = numbers
        if targets:
            path = draw(st.sampled_from(targets))
            _at(doc, path[:-1])[path[-1]] = draw(values[kind])
    elif kind in ("unsorted", "duplicate_rows", "no_rows"):
        lists = ([()] if isinstance(doc, list) else []) + [
            p for p, v in nodes if isinstance(v, list)
        ]
        if lists:
            path = draw(st.sampled_from(lists))
            items = _at(doc, path)
            if kind == "unsorted":
                items[:] = draw(st.permutations(items))
            elif kind == "duplicate_rows" and items:
                i = draw(st.integers(0, len(items) - 1))
                items[i:i] = [copy.deepcopy(items[i]) for _ in range(draw(st.integers(1, 3)))]
            elif kind == "no_rows":
                items.clear()
    elif kind == "extra_fields":
        dicts = ([()] if isinstance(doc, dict) else []) + [
            p for p, v in nodes if isinstance(v, dict)
        ]
        if dicts:
            at = draw(st.sampled_from(dicts))
            known = st.sampled_from(known_keys) if known_keys else st.nothing()
            key = draw(st.one_of(st.text(min_size=1, max_size=10), known))
            value = draw(EXTRA_VALUES)
            if rows and len(at) == 1 and draw(st.booleans()):  # a whole column
                for r in doc:
                    r[key] = value
            else:
                _at(doc, at)[key] = value
            path = (*at, key)
    return doc, ".".join(map(str, path))


@st.composite
def _example(draw, kind: str, fmt: Format) -> Example:
    doc = draw(fmt.docs)
    if kind in STRUCTURE_KINDS:
        doc, where = draw(_mutated(kind, doc, fmt.known_keys))
        content = fmt.write(_raw_as_floats(doc) if fmt.write is _parquet else doc)
        if kind == "deep_nesting":
            depth = draw(st.integers(10, fmt.max_depth))
            deep = ("[" * depth + "]" * depth).encode()
            content = content.replace(f'"{DEEP}"'.encode(), deep).replace(DEEP.encode(), deep)
        if kind == "extreme_floats" and fmt.write is not _parquet:
            content = re.sub(rf"[\"']?{RAW}(.*?){RAW}[\"']?".encode(), rb"\1", content)
        return Example(kind, content, fmt.name, where)
    if kind == "alias_bomb":
        content, where = draw(_alias_bomb(doc))
        return Example(kind, content, fmt.name, where)
    content, name = fmt.write(doc), fmt.name
    if kind == "empty":
        content = draw(st.sampled_from([b"", b"\n", b"   \n\n", b"\xef\xbb\xbf"]))
    elif kind == "truncated":
        content = content[: draw(st.integers(0, max(len(content) - 1, 0)))]
    elif kind == "non_utf8":
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(content)))
            bad = draw(
                st.sampled_from([b"\xff", b"\xfe\xfe", b"\xc3\x28", b"\x80", b"\xed\xa0\x80"])
            )
            content = content[:at] + bad + content[at:]
    elif kind == "random_bytes":
        content = draw(st.binary(min_size=1, max_size=300))
    elif kind == "wrong_extension":
        name = draw(st.sampled_from(fmt.other_names))
    elif kind == "bad_path":  # a name too long for the file system, or a folder in its place
        too_long = (f"{'x' * 300}{Path(name).suffix}", content)
        name, content = draw(st.sampled_from([too_long, (name, None)]))
    elif kind == "sparse":  # zeros after nothing, after the whole file, or after a part of it
        content = draw(st.sampled_from([b"", content, content[: len(content) // 2]]))
        return Example(kind, content, name, hole=draw(st.sampled_from(HOLES)))
    return Example(kind, content, name)


def _raw_as_floats(doc):
    """RAW placeholders as the floats they write (a parquet file holds numbers, not text)."""
    if isinstance(doc, dict):
        return {k: _raw_as_floats(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_raw_as_floats(v) for v in doc]
    if isinstance(doc, str) and doc.startswith(RAW):
        return float(doc[len(RAW) : -len(RAW)])
    return doc


@st.composite
def _alias_bomb(draw, doc) -> tuple[bytes, str]:
    """YAML: a field of `doc` replaced by an alias to `depth` levels of anchors, each a list
    of `width` aliases to the one before (width ** depth values), or one that holds itself.
    A format read as JSON or CSV gets the same text (it must refuse it)."""
    depth, width = draw(st.integers(1, 9)), draw(st.integers(2, 9))
    anchors = [f"  a0: &a0 [{', '.join(['lol'] * width)}]"]
    anchors += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth + 1)]
    alias = f"*a{depth}"
    if draw(st.integers(0, 9)) == 0:  # an anchor holding its own alias
        anchors.append("  self: &self [1, *self]")
        alias = "*self"
    doc = copy.deepcopy(doc) if isinstance(doc, dict) else {"value": doc}
    nodes = [p for p, _ in _nodes(doc)]
    at = draw(st.sampled_from(nodes)) if nodes else ("value",)
    _at(doc, at[:-1])[at[-1]] = BOMB
    body = _yaml(doc).decode().replace(f"'{BOMB}'", alias).replace(BOMB, alias)
    return ("_anchors:\n" + "\n".join(anchors) + "\n" + body).encode(), ".".join(map(str, at))


def kinds(formats: list[Format]) -> dict[str, st.SearchStrategy[Example]]:
    """One strategy per kind, each over every format of the parser."""
    return {k: st.one_of(*(_example(k, f) for f in formats)) for k in KINDS}


def write(example: Example, folder: Path) -> Path:
    """The example written under `folder`; a name the file system refuses is left missing."""
    path = folder / example.name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if example.content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.write_bytes(example.content)
            if example.hole:  # zeros that take no disk: the file's size is set past its end
                os.truncate(path, len(example.content) + example.hole)
    except (OSError, ValueError):
        pass
    return path


# ---- well-formed documents ---------------------------------------------------------------------
_tokens = st.integers(1, 8192)
_gaps = st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=8)


@st.composite
def _azure(draw) -> list[dict]:
    start = pd.Timestamp("2023-11-16 18:15:46.6805900")
    times = np.cumsum(draw(_gaps))
    return [
        {
            "TIMESTAMP": str(start + pd.Timedelta(seconds=float(t))),
            "ContextTokens": draw(_tokens),
            "GeneratedTokens": draw(_tokens),
        }
        for t in times
    ]


@st.composite
def _vidur(draw) -> list[dict]:
    times = np.cumsum(draw(_gaps))
    timed = draw(st.booleans())
    return [
        ({"arrived_at": float(t)} if timed else {})
        | {"num_prefill_tokens": draw(_tokens), "num_decode_tokens": draw(_tokens)}
        for t in times
    ]


@st.composite
def _mooncake(draw) -> list[dict]:
    rows, next_id = [], 0
    for t in np.cumsum(draw(_gaps)):
        n = draw(_tokens)
        blocks = -(-n // 512)
        shared = draw(st.integers(0, min(blocks, next_id)))
        rows.append(
            {
                "timestamp": int(t * 1000),
                "input_length": n,
                "output_length": draw(_tokens),
                "hash_ids": list(range(shared)) + list(range(next_id, next_id + blocks - shared)),
            }
        )
        next_id += blocks - shared
    return rows


@st.composite
def _requests(draw) -> list[dict]:
    """LLMServingSim requests.jsonl rows (arrivals on the unix clock, the rest the engine's)."""
    rows = []
    for i, t in enumerate(np.cumsum(draw(_gaps))):
        ttft, tpot = draw(st.floats(0.001, 2)), draw(st.floats(0.001, 0.1))
        out = draw(_tokens)
        rows.append(
            {
                "request_id": str(i),
                "arrival_time": 1.7e9 + float(t),
                "queued_ts": float(t),
                "scheduled_ts": float(t) + ttft / 2,
                "first_token_ts": float(t) + ttft,
                "last_token_ts": float(t) + ttft + tpot * (out - 1),
                "input_toks": draw(_tokens),
                "output_toks": out,
            }
        )
    return rows


@st.composite
def _bench(draw) -> dict:
    """A `vllm bench serve --save-result --save-detailed` file."""
    n = draw(st.integers(1, 8))
    doc = {
        "date": "20250101-000000",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n,
        "request_rate": draw(st.one_of(st.just("inf"), st.floats(0.1, 100))),
        "burstiness": draw(st.floats(0.1, 10)),
        "max_concurrency": draw(st.one_of(st.none(), st.integers(1, 256))),
        "completed": n,
        "input_lens": [draw(_tokens) for _ in range(n)],
        "output_lens": [draw(_tokens) for _ in range(n)],
        "ttfts": [draw(st.floats(0.001, 2)) for _ in range(n)],
        "itls": [[draw(st.floats(0.001, 0.1)) for _ in range(3)] for _ in range(n)],
        "errors": [""] * n,
    }
    for key in draw(st.lists(st.sampled_from(BENCH_METRICS), max_size=8, unique=True)):
        doc[key] = draw(st.floats(0.001, 1e4))
    return doc


def _file_docs(folder: Path, pattern: str, load, skip: tuple[str, ...] = ()) -> st.SearchStrategy:
    paths = [p for p in sorted(folder.glob(pattern)) if p.name not in skip]
    return st.sampled_from([load(p.read_text()) for p in paths])


_MODEL_DOCS = _file_docs(MODEL_CATALOG_DIR, "*.json", json.loads)
# links.yaml is the links between servers, not a GPU (sim/specs/links.py reads it)
_HARDWARE_DOCS = _file_docs(HARDWARE_DIR, "*.yaml", yaml.safe_load, skip=("links.yaml",))

_LENGTHS = {"input_len": st.integers(1, 4096), "output_len": st.integers(1, 1024)}
_WORKLOADS = st.one_of(
    st.fixed_dictionaries(
        {"concurrency": st.integers(1, 64), "num_requests": st.integers(1, 200), **_LENGTHS}
    ).map(lambda w: {"closed_loop": w}),
    st.fixed_dictionaries(
        {"rate": st.floats(0.1, 50), "num_requests": st.integers(1, 200), **_LENGTHS}
    ).map(lambda w: {"poisson": w}),
    st.fixed_dictionaries({"num_requests": st.integers(1, 200), **_LENGTHS}).map(
        lambda w: {"burst": w}
    ),
)
_CASE = st.fixed_dictionaries(
    {
        "id": st.text("abc-0123", min_size=1, max_size=8),
        "engine": st.sampled_from(["vllm@0.10.2", "vllm", "sglang@0.5.6"]),
        "hardware": st.sampled_from(["h100-sxm", "a100-80gb"]),
        "model": st.sampled_from(["llama-3.1-8b", "qwen3-8b"]),
        "workload": _WORKLOADS,
        "measured": st.fixed_dictionaries(
            {"mean_ttft_ms": st.floats(1, 1000), "mean_tpot_ms": st.floats(1, 100)}
        ),
    },
    optional={
        "parallel": st.fixed_dictionaries({"tp": st.sampled_from([1, 2, 4])}),
        "engine_args": st.fixed_dictionaries({"max_num_seqs": st.integers(1, 512)}),
        "dtype": st.sampled_from(["bf16", "fp8"]),
        "seed": st.integers(0, 100),
        "notes": st.text(max_size=20),
        "flags": st.just(["prefill_above_peak"]),
    },
)
_CASES = st.lists(_CASE, min_size=1, max_size=3).map(lambda cases: {"cases": cases})

_CONFIG_DOCS = st.fixed_dictionaries(
    {},
    optional={
        "seed": st.integers(0, 100),
        "workload": st.fixed_dictionaries(
            {
                "kind": st.sampled_from(["poisson", "gamma", "constant", "burst", "closed_loop"]),
                "num_requests": st.integers(1, 5000),
                "rate": st.floats(0.1, 100),
                **_LENGTHS,
            },
            optional={
                "concurrency": st.integers(1, 256),
                "length_dist": st.sampled_from(["fixed", "uniform", "lognormal"]),
                "range_ratio": st.floats(0, 0.9),
                "shared_prefix_tokens": st.integers(0, 4096),
            },
        ),
        "parallel": st.fixed_dictionaries({"tp": st.sampled_from([1, 2, 8]), "dp": st.just(1)}),
        "long_context": st.fixed_dictionaries(
            {"budgets": st.lists(st.integers(256, 65536), min_size=1, max_size=3)}
        ),
        "slo": st.fixed_dictionaries({"ttft_ms": st.floats(1, 1e4)}),
        "capacity": st.fixed_dictionaries({"seeds": st.integers(2, 5)}),
        "engine_args": st.fixed_dictionaries({"max_num_seqs": st.integers(1, 512)}),
        "max_sim_time_s": st.floats(1, 1e6),
    },
)


# ---- kernel tables ---------------------------------------------------------------------------
_AIC_LABELS = {
    "framework": st.just("VLLM"),
    "version": st.just("0.14.1.dev1"),
    "device": st.just("NVIDIA H200"),
}
_ms = st.floats(1e-4, 100)
_size = st.integers(1, 65536)
_ATTENTION = {
    **_AIC_LABELS,
    "kernel_source": st.sampled_from(["vllm_flash_attn", "vllm_flash_attn_fa3"]),
    "batch_size": st.integers(1, 64),
    "num_heads": st.integers(1, 128),
    "num_key_value_heads": st.integers(1, 16),
    "head_dim": st.sampled_from([64, 128, 256]),
    "beam_width": st.just(1),
    "attn_dtype": st.just("bfloat16"),
    "kv_cache_dtype": st.sampled_from(["bfloat16", "fp8"]),
    "latency": _ms,
}
_VIDUR_LABELS = ("input_layernorm", "attn_pre_proj", "attn_post_proj", "mlp_up_proj", "add")
_VIDUR_MLP = {
    **{f"time_stats.{label}.median": _ms for label in _VIDUR_LABELS},
    "n_head": st.just(32),
    "n_kv_head": st.sampled_from([8, 32]),
    "n_embd": st.just(4096),
    "n_expanded_embd": st.just(11008),
    "vocab_size": st.just(32768),
    "use_gated_mlp": st.booleans(),
    "num_tokens": _size,
    "num_tensor_parallel_workers": st.sampled_from([1, 2, 4]),
}


def _vidur_comm(kind: str) -> dict:
    return {
        f"time_stats.{kind}.median": _ms,
        "rank": st.just(0),
        "num_workers": st.just(8),
        "size": _size,
        "collective": st.just(kind),
        "devices_per_node": st.sampled_from([8, 8, 1]),  # rows of one node are kept
        "max_devices_per_node": st.just(8),
    }


_KERNEL_TABLES = {  # file -> its columns
    "perf_data/h200_sxm/gemm/vllm/0.14.0/gemm_perf.parquet": {
        **_AIC_LABELS,
        "op_name": st.just("gemm"),
        "kernel_source": st.just("vllm_default"),
        "gemm_dtype": st.sampled_from(["bfloat16", "fp8", "float16"]),
        "m": _size,
        "n": _size,
        "k": _size,
        "latency": _ms,
    },
    "perf_data/h200_sxm/attention/vllm/0.14.0/context_attention_perf.parquet": {
        **_ATTENTION,
        "op_name": st.just("context_attention"),
        "isl": _size,
        "step": st.just(0),
    },
    "perf_data/h200_sxm/attention/vllm/0.14.0/generation_attention_perf.parquet": {
        **_ATTENTION,
        "op_name": st.just("generation_attention"),
        "isl": st.just(1),
        "step": _size,
    },
    "perf_data/h200_sxm/moe/vllm/0.14.0/moe_perf.parquet": {
        **_AIC_LABELS,
        "op_name": st.just("moe"),
        "kernel_source": st.just("vllm_fused_moe"),
        "moe_dtype": st.just("bfloat16"),
        "num_tokens": _size,
        "hidden_size": _size,
        "inter_size": _size,
        "topk": st.integers(1, 8),
        "num_experts": st.integers(8, 256),
        "moe_tp_size": st.sampled_from([1, 2]),
        "moe_ep_size": st.sampled_from([1, 2]),
        "distribution": st.sampled_from(["balanced", "power_law_1.01"]),
        "latency": _ms,
    },
    "perf_data/h200_sxm/comm/vllm/0.14.0/custom_allreduce_perf.parquet": {
        **_AIC_LABELS,
        "op_name": st.just("all_reduce"),
        "kernel_source": st.sampled_from(["vLLM_custom_graph", "vLLM_custom_eager"]),
        "allreduce_dtype": st.just("bfloat16"),
        "num_gpus": st.sampled_from([2, 4, 8]),
        "message_size": _size,
        "latency": _ms,
    },
    "perf_data/h200_sxm/comm/nccl/2.23/nccl_perf.parquet": {
        "nccl_dtype": st.just("half"),
        "num_gpus": st.sampled_from([2, 4, 8]),
        "message_size": _size,
        "kernel_source": st.just("NCCL"),
        "op_name": st.sampled_from(["all_reduce", "all_gather"]),
        "latency": _ms,
    },
    "profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv": _VIDUR_MLP,
    "profiling/network/h100_dgx/all_reduce.csv": _vidur_comm("all_reduce"),
    "profiling/network/h100_dgx/send_recv.csv": _vidur_comm("send_recv"),
}


# ---- importer inputs ---------------------------------------------------------------------------
_SILICON = {
    "id": st.text("abc123", min_size=1, max_size=4),
    "silicon_data_source": st.just("src"),
    "backend": st.sampled_from(["vllm", "sglang"]),
    "backend_version": st.sampled_from(["0.12.0", "0.5.9"]),
    "model_path": st.sampled_from(["Qwen/Qwen3-32B", "openai/gpt-oss-120b", "x/unknown"]),
    "system": st.sampled_from(["h100_sxm", "h200_sxm", "b200_sxm"]),
    "precision": st.sampled_from(["bf16", "fp8", "fp4"]),
    "mode": st.sampled_from(["agg", "agg", "disagg"]),
    "isl": st.integers(1, 8192),
    "osl": st.integers(1, 2048),
    "batch_size": st.integers(1, 256),
    "tp_size": st.sampled_from([1, 2, 4, 8]),
    "pp_size": st.just(1),
    "attention_dp_size": st.just(1),
    "moe_ep_size": st.sampled_from([1, 4]),
    "silicon_ttft_ms": st.floats(1, 5000),
    "silicon_tpot_ms": st.floats(1, 100),
}


def _distribution(low: float, high: float) -> st.SearchStrategy[dict]:
    value = st.floats(low, high)
    return st.fixed_dictionaries(
        {
            "successful": st.fixed_dictionaries(
                {
                    "mean": value,
                    "median": value,
                    "percentiles": st.fixed_dictionaries({"p90": value, "p99": value}),
                }
            )
        }
    )


_GUIDELLM_METRICS = st.fixed_dictionaries(
    {
        "time_to_first_token_ms": _distribution(1, 1000),
        "inter_token_latency_ms": _distribution(1, 100),
        "request_latency": _distribution(0.1, 100),
        "prompt_token_count": _distribution(1, 4096),
        "output_token_count": _distribution(1, 1024),
        "output_tokens_per_second": _distribution(1, 1e4),
        "requests_per_second": _distribution(0.1, 100),
        "request_totals": st.fixed_dictionaries({"successful": st.integers(1, 500)}),
    }
)
_GUIDELLM_STRATEGY = st.one_of(
    st.fixed_dictionaries({"type_": st.just("concurrent"), "streams": st.integers(1, 64)}),
    st.fixed_dictionaries(
        {"type_": st.sampled_from(["constant", "poisson"]), "rate": st.floats(0.1, 50)}
    ),
    st.fixed_dictionaries({"type_": st.sampled_from(["throughput", "synchronous"])}),
)
_GUIDELLM = st.lists(
    st.fixed_dictionaries(
        {"config": st.fixed_dictionaries({"strategy": _GUIDELLM_STRATEGY})}
    ).flatmap(lambda b: _GUIDELLM_METRICS.map(lambda m: b | {"metrics": m})),
    min_size=1,
    max_size=3,
).map(lambda benchmarks: {"benchmarks": benchmarks})


def _kernel_format(name: str, columns: dict) -> Format:
    docs = st.lists(st.fixed_dictionaries(columns), min_size=1, max_size=6)
    stem = name.rsplit("/", 1)[0] + "/" + Path(name).stem
    known = ("window_size", "use_gated_mlp", "distribution", "step", "latency")
    if name.endswith(".parquet"):
        other = (f"{stem}.csv", f"{stem}.json", stem)
        return Format(name, docs, _parquet, other, known_keys=known)
    other = (f"{stem}.parquet", f"{stem}.tsv")
    return Format(name, docs, _csv(tuple(columns)), other, known_keys=known)


# ---- formats per parser --------------------------------------------------------------------------
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
_TRACE_OTHER = ("trace.txt", "trace", "trace.tsv")
_MODEL_KEYS = (
    "head_dim",
    "layer_types",
    "sliding_window",
    "sliding_window_pattern",
    "use_sliding_window",
    "max_window_layers",
    "attention_chunk_size",
    "full_attention_interval",
    "attn_type_list",
    "linear_attn_config",
    "linear_num_value_heads",
    "text_config",
    "quantization_config",
    "architectures",
    "num_local_experts",
    "num_experts_per_tok",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "moe_layer_freq",
    "mlp_only_layers",
    "n_shared_experts",
    "kv_lora_rank",
    "q_lora_rank",
    "index_head_dim",
)
_CASE_KEYS = ("requests", "kv_cache_dtype", "entry_point", "cost_profile", "flags", "trace")
_CASE_KEYS += ("bench_json", "constant", "lengths", "warmup_requests", "rate", "path")
_BENCH_KEYS = ("errors", "request_rate", "burstiness", "max_concurrency", "ttfts", "itls")


def _config_keys(cls=SimConfig) -> tuple[str, ...]:
    """Every key of the config, at any depth (extra_fields adds them where they do not belong)."""
    out = []
    for f in fields(cls):
        out.append(f.name)
        hint = f.default_factory if is_dataclass(f.default_factory) else None
        out += _config_keys(hint) if hint else []
    return tuple(dict.fromkeys(out))


_TRACE_KEYS = ("hash_ids", "queued_ts", "arrived_at", "TIMESTAMP", *_BENCH_KEYS)
_YAML_DEPTH = 1200  # PyYAML gives up near 500 levels; deeper only costs time
FORMATS: dict[str, list[Format]] = {
    "trace": [
        Format(name, docs, write, other, known_keys=_TRACE_KEYS)
        for name, docs, write, other in (
            ("trace.csv", _azure(), _csv(_AZURE_COLUMNS), ("trace.json", *_TRACE_OTHER)),
            ("vidur.csv", _vidur(), _csv(_VIDUR_COLUMNS), ("vidur.jsonl", *_TRACE_OTHER)),
            ("mooncake.jsonl", _mooncake(), _jsonl, ("mooncake.json", "mooncake.csv")),
            ("requests.jsonl", _requests(), _jsonl, ("requests.csv", *_TRACE_OTHER)),
            ("bench.json", _bench(), _json, ("bench.jsonl", "bench.csv", *_TRACE_OTHER)),
        )
    ],
    "model": [
        Format(
            "config.json",
            _MODEL_DOCS,
            _json,
            ("config.yaml", "config.txt", "config"),
            known_keys=_MODEL_KEYS,
        )
    ],
    "hardware": [
        Format(
            "gpu.yaml",
            _HARDWARE_DOCS,
            _yaml,
            ("gpu.json", "gpu.txt", "gpu"),
            max_depth=_YAML_DEPTH,
            known_keys=("gpu_hour_usd", "flops_per_s", "fp8"),
        )
    ],
    "cases": [
        Format(
            "cases.yaml",
            _CASES,
            _yaml,
            ("cases.json", "cases.txt"),
            max_depth=_YAML_DEPTH,
            known_keys=_CASE_KEYS,
        )
    ],
    "bench_metrics": [
        Format("bench.json", _bench(), _json, ("bench.txt", "bench"), known_keys=BENCH_METRICS)
    ],
    "measured_requests": [
        Format("requests.jsonl", _requests(), _jsonl, ("requests.json", "requests.txt")),
        Format("bench.json", _bench(), _json, ("bench.jsonl",), known_keys=_BENCH_KEYS),
    ],
    "kernel_table": [_kernel_format(name, columns) for name, columns in _KERNEL_TABLES.items()],
    # `python -m sim.importers` readers; the file name picks the importer (see check_importer)
    "importer": [
        Format(
            "silicon.csv",
            st.lists(st.fixed_dictionaries(_SILICON), min_size=1, max_size=4),
            _csv(tuple(_SILICON)),
            ("silicon.json", "silicon.txt"),
        ),
        Format("guidellm.json", _GUIDELLM, _json, ("guidellm.yaml", "guidellm.csv")),
        Format("bench.json", _bench(), _json, ("bench.csv",), known_keys=_BENCH_KEYS),
    ],
    # not a file: a mapping as Hydra composes it (written as JSON; the name is unused)
    "config": [
        Format(
            "config.json",
            _CONFIG_DOCS,
            _json,
            ("config.json",),
            max_depth=300,
            known_keys=_config_keys(),
        )
    ],
}


# ---- checks ------------------------------------------------------------------------------------
@contextmanager
def _no_hang(seconds: float = HANG_S):
    """AssertionError if the block runs longer than `seconds` (main thread, POSIX only)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def hang(signum, frame):
        raise AssertionError(f"parse still running after {seconds:.0f} s: a hang")

    old = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _outcome(load: Callable[[], object], names: tuple[str, ...], sane: Callable[[object], None]):
    """Whether `load` loaded (and `sane` passed) or failed with a one-line UserError naming
    one of `names`: "loaded" or "error"; AssertionError otherwise."""
    try:
        with _no_hang():
            value = load()
    except UserError as exc:
        message = str(exc)
        assert message and "\n" not in message, f"UserError not on one line: {message!r}"
        assert any(n in message for n in names), f"UserError names neither of {names}: {message}"
        return "error"
    except AssertionError:
        raise
    except Exception as exc:  # KeyError, RecursionError, MemoryError, ...
        raise AssertionError(f"{type(exc).__name__} escaped the parser: {exc!s:.300}") from exc
    try:
        sane(value)
    except AssertionError as exc:
        raise AssertionError(f"loaded but not sane: {exc}") from exc
    except Exception as exc:  # e.g. a window of None, a size beyond float
        raise AssertionError(f"loaded but unusable: {type(exc).__name__}: {exc!s:.200}") from exc
    return "loaded"


def _finite(name: str, values, low: float = 0.0, strict: bool = False) -> None:
    arr = np.asarray(values, dtype=float)
    assert np.isfinite(arr).all(), f"{name}: non-finite values loaded"
    assert (arr > low).all() if strict else (arr >= low).all(), f"{name}: values below {low}"


def check_trace(path: Path) -> str:
    def sane(t) -> None:
        n = len(t)
        assert n >= 1, "no requests loaded"
        for name, lengths in (("prompt_len", t.prompt_len), ("output_len", t.output_len)):
            assert lengths.dtype == np.int64 and len(lengths) == n, name
            assert (lengths >= 1).all() and (lengths <= MAX_TOKENS).all(), f"{name} out of range"
        if t.arrival_s is not None:
            assert len(t.arrival_s) == n
            _finite("arrival_s", t.arrival_s)
            assert t.arrival_s.min() == 0 and (np.diff(t.arrival_s) >= 0).all(), "not sorted"
        if t.hash_ids is not None:
            assert len(t.hash_ids) == n
            for ids in t.hash_ids:
                assert all(type(x) is int and 0 <= x < 2**62 for x in ids), "hash id out of range"
        assert t.request_rate is None or t.request_rate > 0, "request_rate"
        assert t.burstiness is None or 0 < t.burstiness < math.inf, "burstiness"
        c = t.max_concurrency
        assert c is None or (type(c) is int and c >= 1), "max_concurrency"

    return _outcome(lambda: load_trace(path), (str(path),), sane)


def check_model(path: Path) -> str:
    def sane(m) -> None:
        dims = (m.hidden_size, m.vocab_size, m.num_q_heads, m.num_kv_heads, m.head_dim)
        dims += (m.intermediate_size, m.max_position_embeddings)
        assert all(type(d) is int and d >= 1 for d in dims), f"dimensions {dims}"
        assert m.num_layers >= 1
        for layer in m.layers:
            if layer.attention in (Attention.SLIDING, Attention.CHUNKED):
                assert type(layer.window_tokens) is int and layer.window_tokens >= 1, "window"
            assert layer.attention is not Attention.LINEAR or m.linear is not None
            assert layer.attention is not Attention.MLA or m.mla is not None
        p = m.params
        assert 0 < p.active <= p.total and math.isfinite(float(p.total)), "parameters"
        for value in (m.weight_bytes(), m.kv_bytes_for_sequence(4096), m.flops_per_token(4096)):
            assert value >= 0 and math.isfinite(float(value))

    return _outcome(lambda: load_model(str(path)), (str(path),), sane)


def check_hardware(path: Path) -> str:
    def sane(hw) -> None:
        for name in ("hbm_bytes", "hbm_bytes_per_s", "pcie_bytes_per_s", "sm_count"):
            _finite(name, getattr(hw, name), strict=True)
        _finite("nvlink/l2", [hw.nvlink_bytes_per_s, hw.l2_bytes])
        _finite("flops_per_s", list(hw.flops_per_s.values()), strict=True)
        assert hw.gpu_hour_usd is None or 0 < hw.gpu_hour_usd < math.inf
        assert hw.peer_bytes_per_s > 0

    return _outcome(lambda: load_hardware(str(path)), (str(path),), sane)


def check_cases(path: Path) -> str:
    def sane(cases) -> None:
        for case in cases:  # none: a file with `cases: []` validates nothing
            # what reports echo of the file is cut (an alias bomb's values are not written out)
            assert len(case.error or "") <= MAX_REASON, f"a reason of {len(case.error)} chars"
            assert all(len(v) <= MAX_LABEL for v in case.slices.values()), case.slices
            if case.error is not None:
                assert case.error and "\n" not in case.error, f"case error: {case.error!r}"
                continue
            _sane_config(case.config)
            # a measured 0, null, NaN or text is kept with its reason (a row of its own)
            usable = [v for k, v in case.measured.items() if k not in case.unusable]
            _finite("measured", usable, strict=True)
            assert all(why and "\n" not in why for why in case.unusable.values())

    base = SimConfig.from_mapping({})
    return _outcome(lambda: load_cases([path], base), (str(path),), sane)


def check_bench_metrics(path: Path) -> str:
    def sane(metrics) -> None:
        assert set(metrics) <= set(BENCH_METRICS)
        _finite("metrics", list(metrics.values()), strict=True)

    return _outcome(lambda: bench_metrics(path), (str(path),), sane)


def check_measured_requests(path: Path) -> str:
    def sane(got) -> None:
        assert set(got) <= {"ttft", "tpot", "itl"}
        for name, values in got.items():
            assert values.ndim == 1
            _finite(name, values)

    return _outcome(lambda: measured_requests(str(path)), (str(path),), sane)


def check_kernel_table(path: Path) -> str:
    shapes = {
        "gemm": ("m", "n", "k"),
        "attention_prefill": ("batch", "heads", "kv_heads", "head_dim", "q", "ctx", "window"),
        "attention_decode": ("batch", "heads", "kv_heads", "head_dim", "q", "ctx", "window"),
        "moe": ("tokens", "hidden", "inter", "topk", "experts"),
        "allreduce": ("nbytes", "num_gpus"),
        "sendrecv": ("nbytes", "num_gpus"),
        "elementwise": ("nbytes",),
    }

    def sane(obs) -> None:
        assert isinstance(obs, pd.DataFrame) and list(obs.columns) == COLUMNS
        _finite("latency_s", obs["latency_s"], strict=True)
        for op, rows in obs.groupby("op"):
            for col in shapes[op]:
                _finite(f"{op}.{col}", rows[col])

    return _outcome(lambda: read_tables(path), (str(path),), sane)


def check_importer(path: Path) -> str:
    """The importer the file's name picks (silicon / guidellm / bench); what it imports must be
    a case file that load_cases reads (each case loading or an error row)."""
    out = path.parent / "imported" / "cases.yaml"
    args = ("vllm@0.10.2", "h100-sxm", "qwen3-8b", 1)

    def load():
        if path.name.startswith("silicon"):
            return silicon(path, out)[0]
        if path.name.startswith("guidellm"):
            return guidellm([path], out, *args)[0]
        return importer_bench_json([path], out, *args)

    def sane(cases) -> None:
        write_cases(cases, out, "fuzzed")
        check_cases(out)

    return _outcome(load, (str(path),), sane)


def check_config(mapping: object, where: str) -> str:
    """SimConfig.from_mapping on a mapping as Hydra gives it; an error must name the key."""
    # the last key of each changed path, and the one above it (the last may be a list index)
    keys = [k for w in where.split(";") for k in w.split(".")[-2:] if k]
    names = (*keys, *(repr(k)[1:-1] for k in keys)) or ("",)
    return _outcome(lambda: SimConfig.from_mapping(mapping), names, _sane_config)


def _sane_config(cfg) -> None:
    assert isinstance(cfg, SimConfig)

    def walk(obj, prefix: str) -> None:
        for f in fields(obj):
            value = getattr(obj, f.name)
            if is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
                continue
            for v in value if isinstance(value, tuple) else (value,):
                if _is_number(v):
                    assert math.isfinite(v), f"{prefix}{f.name}={v}"
                    assert type(v) is not int or abs(v) < 2**63, f"{prefix}{f.name}={v}: > int64"
                    if "max" in f.metadata:
                        assert v <= f.metadata["max"], f"{prefix}{f.name}={v} above its max"

    walk(cfg, "")


CHECKS: dict[str, Callable[[Path], str]] = {
    "trace": check_trace,
    "model": check_model,
    "hardware": check_hardware,
    "cases": check_cases,
    "bench_metrics": check_bench_metrics,
    "measured_requests": check_measured_requests,
    "kernel_table": check_kernel_table,
    "importer": check_importer,
}
PARSERS = (*CHECKS, "config")
STRATEGIES: dict[str, dict[str, st.SearchStrategy[Example]]] = {
    parser: kinds(FORMATS[parser])
    if parser != "config"
    else {k: st.one_of(_example(k, FORMATS["config"][0])) for k in STRUCTURE_KINDS}
    for parser in PARSERS
}


def run(parser: str, example: Example) -> str:
    """Write `example` to a fresh folder and check `parser` on it: "loaded" or "error"."""
    if parser == "config":
        return check_config(json.loads(example.content), example.where)
    with tempfile.TemporaryDirectory() as folder:
        path = write(example, Path(folder))
        if not example.hole:
            return CHECKS[parser](path)
        with _peak_within(PEAK_BYTES):
            return CHECKS[parser](path)


@contextmanager
def _peak_within(extra: int):
    """AssertionError if the block raises this process's peak resident memory by `extra` or
    more; its address space is capped at `extra` more than now meanwhile (Linux), so such a
    block fails with MemoryError instead of growing until the machine is out of memory."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = size + extra if soft == resource.RLIM_INFINITY else min(size + extra, soft)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):  # not Linux, or a cap already lower: no cap
        pass
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grew < extra, f"a sparse file raised the peak memory by {grew / 2**20:.0f} MiB"
