"""Trace and result-file parsers: each format on a small file, the real files when present,
and clear errors for malformed input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.config import WorkloadConfig
from sim.errors import UserError
from sim.workload.generate import generate
from sim.workload.traces import load_trace
from tests.conftest import shared_data


def test_azure_csv(tmp_path):
    f = tmp_path / "azure.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.5,374,44\n2023-11-16 18:15:50.0,396,109\n"
    )
    t = load_trace(f)
    assert t.format == "azure2023"
    assert t.arrival_s.tolist() == pytest.approx([0.0, 3.5])
    assert t.prompt_len.tolist() == [374, 396] and t.output_len.tolist() == [44, 109]


def test_vidur_csv_with_and_without_times(tmp_path):
    f = tmp_path / "v.csv"
    f.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n1.5,20.0,6\n")
    t = load_trace(f)
    assert t.format == "vidur" and t.arrival_s.tolist() == [0.0, 1.5]
    g = tmp_path / "lengths.csv"
    g.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens\n10,5,15\n")
    assert load_trace(g).arrival_s is None


def test_mooncake_jsonl_keeps_prefix_hashes(tmp_path):
    f = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 250, "input_length": 700, "output_length": 5, "hash_ids": [0, 2]},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    t = load_trace(f)
    assert t.format == "mooncake" and t.hash_block_tokens == 512
    assert t.arrival_s.tolist() == [0.0, 0.25]
    w = generate(
        WorkloadConfig(kind="trace", path=str(f), num_requests=None), np.random.default_rng(0)
    )
    a, b = w.request(0), w.request(1)
    assert a.content_ids[0] == b.content_ids[0] == 0 and a.content_ids[1] != b.content_ids[1]


def test_llmservingsim_requests(tmp_path):
    f = tmp_path / "requests.jsonl"
    f.write_text(
        json.dumps({"request_id": "a", "input_toks": 5, "output_toks": 3, "arrival_time": 1000.5})
        + "\n"
        + json.dumps({"request_id": "b", "input_toks": 6, "output_toks": 4, "arrival_time": 1000.0})
        + "\n"
    )
    t = load_trace(f)
    assert t.format == "llmservingsim"
    assert t.arrival_s.tolist() == [0.0, 0.5] and t.prompt_len.tolist() == [6, 5]  # sorted


def test_bench_json_drives_arrivals(tmp_path):
    f = tmp_path / "bench.json"
    f.write_text(
        json.dumps(
            {
                "input_lens": [100, 200, 300],
                "output_lens": [10, 20, 30],
                "request_rate": 2.0,
                "burstiness": 1.0,
                "max_concurrency": 2,
                "errors": ["", "", ""],
            }
        )
    )
    w = generate(
        WorkloadConfig(kind="bench_json", path=str(f), num_requests=None, rate=None),
        np.random.default_rng(0),
    )
    assert w.prompt_len.tolist() == [100, 200, 300] and w.concurrency == 2
    f.write_text(json.dumps({"input_lens": [1], "output_lens": [1], "request_rate": "inf"}))
    w = generate(
        WorkloadConfig(kind="bench_json", path=str(f), num_requests=None, rate=None),
        np.random.default_rng(0),
    )
    assert w.arrival_s.tolist() == [0.0]


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01,-3,4\n", "integers >= 1"),
        ("b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nnot-a-date,3,4\n", "date-time"),
        ("c.csv", "x,y\n1,2\n", "unknown CSV columns"),
        ("d.csv", "", "not a readable CSV"),
        ("e.jsonl", '{"timestamp": 0, "input_length": 5}\n', "unknown JSONL fields"),
        ("f.jsonl", "{not json\n", "not valid JSON"),
        ("g.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": "NaN"}\n', "integers"),
        ("h.json", '{"input_lens": [1, 2], "output_lens": [1]}', "same length"),
        ("i.txt", "hello", "unknown trace format"),
    ],
)
def test_malformed_files_fail_clearly(tmp_path, name, text, match):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(UserError, match=match):
        load_trace(f)


@pytest.mark.parametrize(
    ("relpath", "fmt", "rows"),
    [
        ("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure2023", 19_366),
        ("vidur/processed_traces/splitwise_conv.csv", "vidur", 19_366),
        ("traces/mooncake_fast25/conversation_trace.jsonl", "mooncake", 12_031),
        (
            "LLMServingSim/bench_examples/RTX4090/Llama-3.1-8B/vllm/requests.jsonl",
            "llmservingsim",
            300,
        ),
    ],
)
def test_real_traces_load(relpath, fmt, rows):
    t = load_trace(shared_data(relpath))
    assert t.format == fmt and len(t) == rows
    assert np.all(np.diff(t.arrival_s) >= 0)


def test_trace_replayed_at_a_chosen_rate(tmp_path):
    """workload.rate on a trace scales its times to that mean rate, keeping the pattern."""
    f = tmp_path / "t.csv"
    stamps = ["00:00.0", "00:01.0", "00:01.5", "00:04.0"]
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:{s},100,10\n" for s in stamps)
    )
    own = generate(WorkloadConfig(kind="trace", path=str(f), num_requests=None, rate=None),
                   np.random.default_rng(0))  # fmt: skip
    assert own.arrival_s.tolist() == [0.0, 1.0, 1.5, 4.0]  # 3 gaps in 4 s: 0.75 req/s
    fast = generate(WorkloadConfig(kind="trace", path=str(f), num_requests=None, rate=3.0),
                    np.random.default_rng(0))  # fmt: skip
    assert fast.arrival_s == pytest.approx([0.0, 0.25, 0.375, 1.0])  # 4x faster, same shape
    assert "at 3 req/s" in fast.description
    one = tmp_path / "one.csv"
    one.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,5,5\n")
    with pytest.raises(UserError, match="no rate to scale"):
        generate(WorkloadConfig(kind="trace", path=str(one), num_requests=None, rate=2.0),
                 np.random.default_rng(0))  # fmt: skip
