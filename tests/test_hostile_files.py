"""Hostile input files (issue 42, section 2): sparse files of zeros, YAML alias bombs, loops of
symbolic links, a folder or a FIFO where a file should be, a column named twice, YAML 1.2
floats, case ids that are null or empty. Each costs one line naming the file, never the
machine: the sparse files are parsed in a child process whose address space is capped (3 GB),
so code that reads them whole fails here instead of swapping."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.config import SimConfig
from sim.errors import UserError
from sim.paths import REPO_DIR, SHARED_DATA_DIR
from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.importers.command import write_cases
from sim.scenarios.validate.importers.silicon import silicon
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload import traces
from sim.workload.bench_results import measured_requests
from sim.workload.traces import load_trace
from tests.fuzz_inputs import _no_hang

GIB = 2**30
CAP = 3_000_000_000  # bytes of address space for the child processes
BASE = SimConfig.from_mapping({})
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
VIDUR_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def error(load, *args) -> str:
    with pytest.raises(UserError) as info, _no_hang(10):
        load(*args)
    message = str(info.value)
    assert "\n" not in message and len(message) < 1000, message
    return message


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    env.pop("SIM_DEBUG", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_capped,
    )


# ---- sparse files: refused at once, within a small peak -------------------------------------
# file -> (what comes before the 5 GiB of zeros, the parser's call)
SPARSE = {
    "t.csv": ("", "load_trace(p)"),
    "t.jsonl": ("", "load_trace(p)"),
    "t.json": ("", "load_trace(p)"),
    "h.csv": (AZURE_HEADER + "2023-11-16 18:15:46.680,10,5\n", "load_trace(p, 50)"),
    "h.jsonl": ('{"timestamp": 0, "input_length": 10, "output_length": 5}\n', "load_trace(p, 50)"),
    "config.json": ('{"hidden_size": 4096,', "load_model(str(p))"),
    "gpu.yaml": ("name: g\n", "load_hardware(str(p))"),
    "cases.yaml": ("cases:\n", "load_cases([p], SimConfig.from_mapping({}))"),
    "bench.json": ("", "bench_metrics(p)"),
    "requests.jsonl": ("", "measured_requests(str(p))"),
    "guidellm.json": ("", "guidellm([p], p.parent / 'o.yaml', 'vllm', 'h100-sxm', None, 1)"),
    "silicon.csv": ("id,backend\n", "silicon(p, p.parent / 'o.yaml')"),
    "all_reduce.csv": ("", "read_tables(p)"),
    "gemm_perf.parquet": ("", "read_tables(p)"),
}
CHILD = """
import json, resource, sys
from pathlib import Path
from sim.calibrate.kernel_tables import read_tables
from sim.config import SimConfig
from sim.errors import UserError
from sim.scenarios.validate.cases import load_cases
from sim.scenarios.validate.importers.guidellm import guidellm
from sim.scenarios.validate.importers.silicon import silicon
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload.bench_results import bench_metrics, measured_requests
from sim.workload.traces import load_trace
out = {}
for name, call in json.loads(sys.argv[1]).items():
    p = Path(sys.argv[2]) / name
    try:
        eval(call)
        out[name] = "LOADED"
    except UserError as exc:
        out[name] = str(exc)
    except BaseException as exc:
        out[name] = f"ESCAPED {type(exc).__name__}: {exc}"[:300]
out["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


@pytest.fixture
def sparse(tmp_path):
    """The SPARSE files in tmp_path (5 GiB each, no disk used), removed afterwards."""
    for name, (head, _) in SPARSE.items():
        (tmp_path / name).write_text(head)
        os.truncate(tmp_path / name, len(head.encode()) + 5 * GIB)
    yield tmp_path
    for name in SPARSE:
        (tmp_path / name).unlink()


def test_sparse_files_are_refused_at_once_within_a_small_peak(sparse):
    calls = {name: call for name, (_, call) in SPARSE.items()}
    start = time.perf_counter()
    r = _run(["-c", CHILD, json.dumps(calls), str(sparse)], sparse)
    took = time.perf_counter() - start
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got.pop("maxrss") < GIB  # every one of them parsed in this one process
    assert took < 30
    for name, message in got.items():
        assert str(sparse / name) in message and "\n" not in message, (name, message)
        assert "a NUL byte at byte" in message or "more than the" in message, (name, message)
    assert got["t.json"] == (
        f"{sparse / 't.json'}: 5 GiB, more than the 256 MiB a bench result may be (it is read "
        "whole); check the path, or split the file"
    )
    assert got["h.csv"].endswith(
        "a NUL byte at byte 69: not a text file (binary, or a sparse file of zeros)"
    )


@pytest.mark.parametrize(
    ("make", "args", "expected"),
    [
        (
            "sparse",
            ["workload=trace", "workload.path=t.csv", "workload.num_requests=50"],
            "t.csv: a NUL byte at byte 0: not a text file (binary, or a sparse file of zeros)",
        ),
        ("loop", ["model=loop.json"], "model file loop.json is a loop of symbolic links"),
    ],
)
def test_the_command_line_says_one_line_and_exits_2(tmp_path, make, args, expected):
    if make == "sparse":
        (tmp_path / "t.csv").touch()
        os.truncate(tmp_path / "t.csv", 5 * GIB)
    else:
        (tmp_path / "loop.json").symlink_to("loop.json")
    try:
        r = _run(["-m", "sim", *args, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    finally:
        (tmp_path / "t.csv").unlink(missing_ok=True)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == f"sim: error: {expected}"


# ---- streaming: only the rows a run needs, in bounded lines, the same values --------------------
def test_a_trace_is_read_up_to_the_rows_asked_for(tmp_path):
    rows = [f"{i},{10 + i},{5 + i}\n" for i in range(100)]
    csv = tmp_path / "t.csv"
    csv.write_text(VIDUR_HEADER + "".join(rows) + "100,nan,5\n" * 20_000)
    jsonl = tmp_path / "t.jsonl"
    line = '{{"timestamp": {i}, "input_length": {n}, "output_length": 5}}\n'
    jsonl.write_text("".join(line.format(i=i, n=10 + i) for i in range(100)) + "{bad\n" * 20_000)
    for path in (csv, jsonl):
        t = load_trace(path, max_rows=50)
        assert len(t) == 50 and t.prompt_len.tolist() == list(range(10, 60))
    assert "num_prefill_tokens of request 100 is nan" in error(load_trace, csv)
    assert error(load_trace, jsonl).startswith(f"{jsonl}:101: not valid JSON")


def test_csv_chunks_give_the_bytes_of_one_read(tmp_path, monkeypatch):
    azure = tmp_path / "azure.csv"
    stamps = ["2023-11-16 18:15:46.680", "2023-11-16 18:15:45.1", "2023-11-16 18:15:47.6805900"]
    azure.write_text(
        AZURE_HEADER + "".join(f"{s},{7 + i},{3 + i}\n" for i, s in enumerate(stamps * 5))
    )
    vidur = tmp_path / "vidur.csv"
    vidur.write_text(
        VIDUR_HEADER + "".join(f"{(i * 7) % 5 * 0.3},{i + 1},{i + 2}\n" for i in range(17))
    )
    shared = SHARED_DATA_DIR / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    files = {azure: 4, vidur: 4} | ({shared: 5000} if shared.is_file() else {})  # rows a chunk
    whole = [load_trace(f) for f in files]
    for (f, rows), one in zip(files.items(), whole, strict=True):
        monkeypatch.setattr(traces, "CHUNK_ROWS", rows)
        chunked = load_trace(f)
        for name in ("prompt_len", "output_len", "arrival_s"):
            assert getattr(one, name).tobytes() == getattr(chunked, name).tobytes(), (f, name)
    assert np.unique(whole[0].arrival_s).round(7).tolist() == [0.0, 1.58, 2.58059]


def test_a_line_past_the_bound_is_refused(tmp_path, monkeypatch):
    from sim import user_files

    monkeypatch.setattr(user_files, "LINE_BYTES", 1000)
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "x": "' + "y" * 5000)
    assert error(load_trace, f).startswith(f"{f}: a line longer than 1000 bytes from byte 0")


# ---- YAML: alias bombs, a key twice, YAML 1.2 floats -------------------------------------------
def _bomb(levels: int, width: int = 9) -> str:
    """Anchors a0..a{levels}, each a list of `width` aliases to the one before."""
    lines = [f"  a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "defs:\n" + "\n".join(lines) + "\n"


def _case(**fields) -> dict:
    return {
        "id": "c",
        "engine": "vllm",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "workload": {"burst": {"num_requests": 5, "input_len": 10, "output_len": 5}},
        "measured": {"mean_ttft_ms": 10.0},
    } | fields


def _cases_file(tmp_path: Path, cases: list[dict], before: str = "") -> Path:
    f = tmp_path / "cases.yaml"
    body = yaml.safe_dump({"cases": cases}, sort_keys=False)
    for name, alias in (("__BOMB__", "*a6"), ("__HALF__", "*a4")):
        body = body.replace(f"'{name}'", alias).replace(name, alias)
    f.write_text(before + body)
    return f


def test_an_alias_bomb_is_refused_in_one_line(tmp_path):
    cases = _cases_file(tmp_path, [_case(engine_args={"max_num_seqs": "__BOMB__"})], _bomb(6))
    start = time.perf_counter()
    assert error(load_cases, [cases], BASE) == (
        f"{cases}: its YAML aliases repeat 41,925,664 values and characters, more than the "
        "1,000,000 allowed (an alias bomb?); write the repeated parts out"
    )
    assert time.perf_counter() - start < 5
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(_bomb(6) + "name: *a6\n")
    assert "an alias bomb?" in error(load_hardware, str(gpu))
    gpu.write_text("name: &n [1, *n]\n")
    assert error(load_hardware, str(gpu)).endswith(
        "a YAML alias inside its own anchor (a structure that holds itself)"
    )


def test_what_reports_echo_of_a_case_is_cut(tmp_path):
    """A smaller bomb is within bounds (242,947 values and characters): the case loads, and what
    a report shows of it (its slices, a reason quoting it) is cut."""
    cases = _cases_file(
        tmp_path,
        [_case(id="a", hardware="__HALF__"), _case(id="b", workload={"trace": "__HALF__"})],
        _bomb(4),
    )
    from sim.scenarios.validate.cases import MAX_LABEL, MAX_REASON  # (a test of issue 42's)

    a, b = load_cases([cases], BASE)
    assert len(str(a.data["hardware"])) > 200_000
    assert a.slices["hardware"].startswith("[[[[['lol'") and len(a.slices["hardware"]) == MAX_LABEL
    assert b.error == "workload.trace: expected a file path"
    assert all(len(c.error or "") <= MAX_REASON for c in (a, b))


def test_a_key_written_twice_is_refused(tmp_path):
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("name: a\nvendor: nvidia\nname: b\n")
    assert error(load_hardware, str(gpu)) == (
        f"{gpu}:3: not valid YAML (the key 'name' appears twice)"
    )
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": 4096, "num_hidden_layers": 2, "hidden_size": 8}')
    assert error(load_model, str(config)) == (
        f"{config}: not a valid JSON config (the key 'hidden_size' appears twice in one object)"
    )


def test_a_csv_column_named_twice_is_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens,num_prefill_tokens\n0,1,2,3\n"
    )
    assert error(load_trace, trace) == (
        f"{trace}: the column 'num_prefill_tokens' appears twice in the header"
    )
    rows = tmp_path / "silicon.csv"
    rows.write_text("id,backend,isl,isl\n1,vllm,5,6\n")
    assert error(silicon, rows, tmp_path / "o.yaml") == (
        f"{rows}: the column 'isl' appears twice in the header"
    )


def test_yaml_12_floats_are_numbers(tmp_path):
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(
        "name: g\ndisplay_name: G\nvendor: nvidia\ncompute_capability: '9.0'\n"
        "hbm_bytes: 85520809984\nhbm_bytes_per_s: 3.35e12\nflops_per_s: {bf16: 1e15, fp8: 2E15}\n"
        "nvlink_bytes_per_s: 4.5e+11\npcie_bytes_per_s: 64e9\nsm_count: 132\nl2_bytes: 52428800\n"
    )
    hw = load_hardware(str(gpu))
    assert dict(hw.flops_per_s) == {"bf16": 1e15, "fp8": 2e15} and hw.pcie_bytes_per_s == 64e9
    workload = {"poisson": {"rate": "__RATE__", "num_requests": 5, "input_len": 8, "output_len": 4}}
    cases = _cases_file(tmp_path, [_case(workload=workload, measured={"mean_ttft_ms": 1.0})])
    cases.write_text(cases.read_text().replace("__RATE__", "4e0").replace("1.0", "1e2"))
    (case,) = load_cases([cases], BASE)
    assert case.error is None and case.config.workload.rate == 4.0
    assert case.measured == {"mean_ttft_ms": 100.0}
    out = tmp_path / "imported.yaml"  # an importer writes text that reads as a number quoted
    write_cases([_case(id="4e0", notes="1e308")], out, "header")
    (back,) = load_cases([out], BASE)
    assert back.id == "4e0" and back.data["notes"] == "1e308"


# ---- paths that are no file ---------------------------------------------------------------------
def test_loops_folders_and_fifos_are_named_as_what_they_are(tmp_path):
    loop = tmp_path / "loop.csv"
    loop.symlink_to(tmp_path / "loop2.csv")
    (tmp_path / "loop2.csv").symlink_to(loop)
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    assert error(load_trace, loop) == f"trace file {loop} is a loop of symbolic links"
    assert error(load_trace, folder) == f"trace file {folder} is a directory"
    assert error(load_trace, fifo) == f"trace file {fifo} is not a regular file (a FIFO)"
    model = tmp_path / "config.json"
    model.symlink_to(model)
    assert error(load_model, str(model)) == f"model file {model} is a loop of symbolic links"
    os.mkfifo(tmp_path / "gpu.yaml")
    assert error(load_hardware, str(tmp_path / "gpu.yaml")).endswith("(a FIFO)")
    assert error(measured_requests, str(fifo)).endswith("is not a regular file (a FIFO)")
    lengths = {"poisson": {"rate": 1.0, "num_requests": 5, "lengths": "loop.csv"}}
    (case,) = load_cases([_cases_file(tmp_path, [_case(workload=lengths)])], BASE)
    assert case.error == f"loop.csv: is a loop of symbolic links (resolved to {loop})"


# ---- case ids --------------------------------------------------------------------------------
def test_a_case_without_a_usable_id_is_an_error_row_named_by_its_place(tmp_path):
    ids = [None, "", "   ", [1, 2], "x" * 300, "a\nb", "ok"]
    cases = load_cases([_cases_file(tmp_path, [_case(id=i) for i in ids])], BASE)
    assert [c.id for c in cases] == [f"cases.yaml#{i}" for i in range(1, 7)] + ["ok"]
    assert cases[0].error == "id is null; every case needs an id: a short, unique, non-empty text"
    assert cases[1].error == "id is ''; every case needs an id: a short, unique, non-empty text"
    assert cases[3].error.startswith("id is [1, 2]")
    assert cases[4].error.endswith("... is 300 characters; at most 200")
    assert cases[5].error == "id 'a\\nb' holds a line break or a control character"
    assert cases[6].error is None and all(c.error for c in cases[:6])
