"""Every parser of user input, fuzzed: a malformed input either loads sane values or fails with
one clear UserError naming the file (the key, for the config), never another exception, never
a hang (tests/fuzz_inputs.py has the inputs and the checks). Bounded for CI: 200 derandomized
examples per parser; `python benchmarks/fuzz.py` draws thousands. Then the clearest messages,
one example each."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import SimConfig
from sim.errors import UserError
from sim.scenarios.validate.cases import load_cases
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from sim.workload.bench_results import bench_metrics, measured_requests
from sim.workload.traces import load_trace
from tests.fuzz_inputs import PARSERS, STRATEGIES, run
from tests.test_cli import sim

FUZZ = settings(
    max_examples=200,
    deadline=10_000,  # a hang, not a busy machine: CI shares its cores
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("parser", PARSERS)
def test_malformed_input_loads_sanely_or_fails_clearly(parser):
    @FUZZ
    @given(st.one_of(*STRATEGIES[parser].values()))
    def one(example):
        assert run(parser, example) in ("loaded", "error")

    one()


def error(load, *args) -> str:
    with pytest.raises(UserError) as info:
        load(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_nan_in_a_trace_column_names_the_file_the_column_and_the_row(tmp_path):
    f = tmp_path / "trace.csv"
    f.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,12,3\n1,nan,4\n")
    assert error(load_trace, f) == (
        f"{f}: num_prefill_tokens of request 1 is nan; lengths must be integers >= 1"
    )


def test_empty_and_non_utf8_files(tmp_path):
    empty, binary = tmp_path / "empty.csv", tmp_path / "latin1.csv"
    empty.write_text("")
    binary.write_bytes(
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01 00:00:00,5,6\n" + b"\xe9\xff\n"
    )
    assert "needs a header row" in error(load_trace, empty)
    assert error(load_trace, binary) == f"{binary}: not UTF-8 text; save the CSV as UTF-8"
    yaml_file = tmp_path / "gpu.yaml"
    yaml_file.write_bytes(b"name: \xff\n")
    assert (
        error(load_hardware, str(yaml_file))
        == f"{yaml_file}: not UTF-8 text; save the file as UTF-8"
    )


def test_huge_and_deep_inputs_fail_with_their_reason(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 10**30, "output_length": 5}))
    assert "lengths must be at most 16777216" in error(load_trace, trace)
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert error(load_model, str(config)).endswith("not a valid JSON config (nested too deeply)")
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(_gpu_yaml(hbm_bytes_per_s=".inf"))
    assert "field 'hbm_bytes_per_s' must be a finite number >= 0" in error(load_hardware, str(gpu))
    bench = tmp_path / "bench.json"  # fuzz.py's huge kind found this one: 10**400 tok/s
    bench.write_text('{"completed": 8, "total_token_throughput": 1' + "0" * 400 + "}")
    assert error(bench_metrics, bench) == (
        f"{bench}: total_token_throughput is an integer beyond a float's range (1.8e308), not a "
        "measurement; check the file was written by vllm bench serve"
    )


def _gpu_yaml(**changes) -> str:
    fields = {
        "name": "g",
        "display_name": "G",
        "vendor": "nvidia",
        "compute_capability": '"9.0"',
        "hbm_bytes": 85520809984,
        "hbm_bytes_per_s": 3.35e12,
        "flops_per_s": "{bf16: 9.9e14}",
        "nvlink_bytes_per_s": 4.5e11,
        "pcie_bytes_per_s": 6.4e10,
        "sm_count": 132,
        "l2_bytes": 52428800,
    } | changes
    return "".join(f"{k}: {v}\n" for k, v in fields.items())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (float("nan"), "workload.num_requests=nan: expected an integer (a finite number)"),
        (float("inf"), "workload.num_requests=inf: expected an integer (a finite number)"),
        (
            1e12,
            "workload.num_requests=1000000000000: must be <= 10000000 "
            "(every request is simulated and kept in memory)",
        ),
    ],
)
def test_num_requests_nan_inf_and_absurd(value, expected):
    assert error(SimConfig.from_mapping, {"workload": {"num_requests": value}}) == expected


def test_nan_on_the_command_line_is_one_line(tmp_path):
    r = sim("workload.num_requests=nan", f"hydra.run.dir={tmp_path / 'x'}", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == (
        "sim: error: workload.num_requests=nan: expected an integer (a finite number)"
    )


def test_case_file_and_request_file_errors_name_the_file(tmp_path):
    cases = tmp_path / "cases.yaml"
    cases.write_bytes(b"cases:\n- id: \xff\n")
    assert error(load_cases, [cases], SimConfig.from_mapping({})) == (
        f"{cases}: not UTF-8 text; save the case file as UTF-8"
    )
    requests = tmp_path / "requests.jsonl"
    row = {"queued_ts": 1.0, "first_token_ts": 0.5, "last_token_ts": 2.0, "output_toks": 3}
    requests.write_text(json.dumps(row) + "\n")
    assert error(measured_requests, str(requests)) == (
        f"{requests}: request 0's first_token_ts is before its queued_ts"
    )


def test_a_parallel_size_too_large_for_a_float_reads_as_one():
    """A benchmark JSON's tensor_parallel_size of 10**400 (a JSON int no float holds) once
    raised OverflowError from the importers instead of reading as a missing size."""
    from sim.scenarios.validate.importers.fields import count_or_one

    assert count_or_one(10**400) == 1
    assert count_or_one("8") == 8
