"""benchmarks/vidur_side_by_side.py without Vidur: it says why it skips and exits 0; its inputs
for Vidur are in the shape Vidur reads."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "vidur_side_by_side.py"


def load():
    spec = importlib.util.spec_from_file_location("vidur_side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_skips_with_reason_and_setup_when_vidur_is_absent(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDUR_")}
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("skipped: ")
    # without the shared data the reason names it; with it, the missing VIDUR_DIR
    assert "VIDUR_DIR is not set" in lines[0] or "shared data" in lines[0]
    assert "git clone https://github.com/microsoft/vidur" in proc.stdout
    assert json.loads(out.read_text())["skipped"] == lines[0].removeprefix("skipped: ")


def test_find_vidur_names_what_is_wrong(tmp_path):
    module = load()
    assert "VIDUR_DIR is not set" in module.find_vidur({})
    assert "not a checkout" in module.find_vidur({"VIDUR_DIR": str(tmp_path)})
    (tmp_path / "vidur").mkdir()
    (tmp_path / "vidur" / "main.py").write_text("")
    missing = tmp_path / "no-python"
    reason = module.find_vidur({"VIDUR_DIR": str(tmp_path), "VIDUR_PYTHON": str(missing)})
    assert f"VIDUR_PYTHON={missing} does not exist" in reason
    # an interpreter that cannot import vidur.main (an empty package here raises nothing, so
    # the checkout's main.py is made to fail)
    (tmp_path / "vidur" / "main.py").write_text("raise ImportError('no ddsketch')\n")
    reason = module.find_vidur({"VIDUR_DIR": str(tmp_path), "VIDUR_PYTHON": sys.executable})
    assert "cannot import vidur.main" in reason and "no ddsketch" in reason
    # and a checkout it can import is found
    (tmp_path / "vidur" / "main.py").write_text("")
    found = module.find_vidur({"VIDUR_DIR": str(tmp_path), "VIDUR_PYTHON": sys.executable})
    assert found == (Path(sys.executable), tmp_path)


def test_attention_standin_has_the_columns_vidur_filters_and_fits_on(tmp_path):
    df = pd.read_csv(load().attention_standin(tmp_path / "attention.csv"))
    # Vidur keeps the rows of Llama-2-7B (4096 wide, 32 heads), block 16, TP1
    assert set(df["n_embd"]) == {4096} and set(df["n_q_head"]) == {32}
    assert set(df["n_kv_head"]) == {32} and set(df["block_size"]) == {16}
    assert set(df["num_tensor_parallel_workers"]) == {1}
    prefill = df[df["prefill_chunk_size"] > 0]
    decode = df[df["prefill_chunk_size"] == 0]
    assert set(prefill["batch_size"]) == {1} and decode["batch_size"].max() == 128
    assert (prefill["kv_cache_size"] + prefill["prefill_chunk_size"]).max() <= 4096
    # more context, more time; a 128-request decode over 4,096 tokens reads 8.6 GB: ~4.3 ms
    one = decode[decode["batch_size"] == 128].sort_values("kv_cache_size")
    assert one["time_stats.attn_decode.median"].is_monotonic_increasing
    assert 3.5 < one["time_stats.attn_decode.median"].iloc[-1] < 5.0
    assert (df["time_stats.attn_kv_cache_save.median"] > 0).all()
