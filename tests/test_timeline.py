"""Each request's phases, the Perfetto trace and the HTML report."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

from sim.report.timeline import trace_events
from sim.run.phases import PHASES
from sim.run.simulate import simulate
from tests.conftest import config

PREEMPTING = {
    "workload": {"kind": "burst", "num_requests": 24, "input_len": 256, "output_len": 400},
    "engine_args": {"num_gpu_blocks_override": 300, "max_model_len": 2048,
                    "enable_prefix_caching": False},
}  # fmt: skip


def test_phases_cover_each_request_from_arrival_to_finish():
    """Per request the phases tile [arrival, finish] with no gap and no overlap, and a request
    preempted k times has k preempted phases."""
    r = simulate(config(trace=True, **PREEMPTING))
    assert r.summary["sim"]["preemptions"] > 0  # the case is one that preempts
    req = r.requests.set_index("request_id")
    for rid, p in r.phases.groupby("request_id"):
        p = p.sort_values("start_s")
        assert set(p["phase"]) <= set(PHASES)
        assert p["start_s"].iloc[0] == pytest.approx(req.loc[rid, "arrival_s"], abs=1e-12)
        assert p["end_s"].iloc[-1] == pytest.approx(req.loc[rid, "finish_s"], abs=1e-12)
        assert np.allclose(p["start_s"].iloc[1:].to_numpy(), p["end_s"].iloc[:-1].to_numpy())
        assert (p["phase"] == "preempted").sum() == req.loc[rid, "num_preemptions"]
        out = p.loc[p["phase"] == "decode", "tokens"].sum()
        first = p.loc[p["phase"] == "prefill"]
        assert first["tokens"].sum() >= req.loc[rid, "prompt_tokens"]  # prompt (and recompute)
        # one token per decode step; the first token, and the one after each recompute,
        # come from the step that ends a prefill
        assert out == req.loc[rid, "output_tokens"] - 1 - req.loc[rid, "num_preemptions"]


def test_tracing_changes_nothing_but_speed():
    """trace=true hands every step to the phase log (fast-forward off): same results."""
    a = simulate(config(**PREEMPTING)).summary
    b = simulate(config(trace=True, **PREEMPTING)).summary
    for s in (a, b):
        for key in ("wall_time_s", "cpu_time_s", "fast_forwarded_steps"):
            s["sim"].pop(key)
        s.pop("config")
    assert a == b


def test_static_batching_holds_done_requests():
    r = simulate(
        config(
            engine="static",
            trace=True,
            workload={
                "kind": "burst",
                "num_requests": 8,
                "length_dist": "uniform",
                "range_ratio": 0.9,
                "output_len": 64,
            },
        )
    )
    held = r.phases[r.phases["phase"] == "held"]
    assert len(held) > 0  # all but the longest of a batch wait for it
    assert (held["end_s"] > held["start_s"]).all()


TRACE_PH = {"X", "C", "M", "B", "E", "i", "I"}


def check_trace_event(e: dict) -> None:
    """The Trace Event Format's required fields, per event type."""
    assert isinstance(e["name"], str) and e["name"]
    assert e["ph"] in TRACE_PH
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    if e["ph"] == "M":
        assert e["name"] in ("process_name", "thread_name", "process_sort_index")
        assert isinstance(e["args"]["name"], str)
        return
    assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
    if e["ph"] == "X":
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
    if e["ph"] == "C":
        assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())


def test_trace_json_follows_the_trace_event_format(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "sim", "trace=true", "workload.num_requests=30",
           f"hydra.run.dir={out}", "output.progress=false"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "trace.json").read_text())
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    events = doc["traceEvents"]
    for e in events:
        check_trace_event(e)
    steps = [e for e in events if e.get("cat") == "step"]
    import pandas as pd

    frame = pd.read_parquet(out / "steps.parquet")
    assert len(steps) == len(frame)  # one slice per step, its batch in args
    assert sum(e["args"]["batch_size"] for e in steps) == frame["batch_size"].sum()
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {f"request {k}" for k in range(30)} <= tracks
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"KV blocks in use", "queue"}
    for name in ("timeline.png", "timeline.svg", "phases.parquet", "report.html"):
        assert (out / name).is_file(), name
    assert "## Timeline (trace=true)" in (out / "report.md").read_text()


def test_trace_events_of_two_runs_stay_apart():
    r = simulate(config(trace=True))
    a = trace_events(r.steps, r.phases, "A", pid_base=0)
    b = trace_events(r.steps, r.phases, "B", pid_base=100)
    assert not {e["pid"] for e in a} & {e["pid"] for e in b}


class Checker(HTMLParser):
    """Balanced tags, and every resource a page loads."""

    VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
            "source", "track", "wbr"})  # fmt: skip

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.sources, self.images = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images += 1
        for key in ("src", "href"):
            if key in a and tag in ("img", "script", "link", "iframe", "source", "embed"):
                self.sources.append(a[key])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):  # <br/>: opens and closes itself
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def check_html(path) -> Checker:
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    c = Checker()
    c.feed(text)
    assert not c.errors and not c.stack, (c.errors, c.stack)
    assert all(s.startswith("data:") for s in c.sources), c.sources  # nothing from outside
    assert "<script" not in text and "<link" not in text
    return c


def test_report_html_is_self_contained(tmp_path):
    from sim.report.html import write_report

    (tmp_path / "a.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    text = "# T\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![plot](a.png)\n\n[csv](x.csv)\n"
    write_report(tmp_path, text)
    c = check_html(tmp_path / "report.html")
    assert c.images == 1
    html = (tmp_path / "report.html").read_text()
    assert "<table>" in html and "<title>T</title>" in html
    assert 'href="x.csv"' in html  # a link to a file beside the report stays a link


def test_traced_run_gives_the_same_bytes_twice(tmp_path):
    """trace.json, the timeline (PNG and SVG) and report.html: same config, same bytes."""
    outs = []
    for k in range(2):
        out = tmp_path / str(k)
        cmd = [sys.executable, "-m", "sim", "trace=true", "workload.num_requests=20",
               f"hydra.run.dir={out}", "output.progress=false"]  # fmt: skip
        assert subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
        outs.append(out)
    for name in ("trace.json", "timeline.png", "timeline.svg", "report.html", "phases.parquet"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
