"""Fitting cost profiles on small synthetic tables whose answers are known."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sim.calibrate.__main__ import main
from sim.calibrate.gpu import Source, calibrate_gpu
from sim.cost.kernels import AttentionShape, CommTable
from sim.cost.prior import CostProfile
from sim.cost.profiles import GpuProfile
from sim.cost.roofline import decode_shape, gemm_shape
from sim.cost.surface import Surface, grid
from sim.specs.hardware import load_hardware

HW = load_hardware("h100-sxm")
DEVICE = "NVIDIA H100 80GB HBM3"


def gemm_roofline(m, n, k):
    flops, nbytes, _ = gemm_shape(HW, m, n, k, "bf16")
    return np.maximum(flops / HW.peak_flops_per_s("bf16"), nbytes / HW.hbm_bytes_per_s)


def gemm_efficiency(m):
    return 0.85 * m / (m + 48.0)  # small batches waste most of the tensor cores


def decode_seconds(batch, ctx):
    """A known decode kernel: a 9 us launch floor plus 75% of the bandwidth roofline."""
    flops, nbytes, _ = decode_shape(HW, ctx, batch, 32, 8, 128, 0, False, 2.0)
    roof = np.maximum(flops / HW.peak_flops_per_s("bf16"), nbytes / HW.hbm_bytes_per_s)
    return 9e-6 + batch * roof / 0.75


def allreduce_ms(nbytes):
    """A power law: log-log interpolation reproduces it exactly between measured sizes."""
    return 0.005 * (nbytes / 1024) ** 0.5


def write_kernel_tables(root):
    rng = np.random.default_rng(0)
    base = {"framework": "VLLM", "version": "9.9.9", "device": DEVICE}
    folder = root / "h100_sxm"
    m = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], 1500)
    n = rng.choice([1024, 2048, 4096, 8192, 14336], 1500)
    k = rng.choice([1024, 2048, 4096, 8192], 1500)
    lat = gemm_roofline(m, n, k) / gemm_efficiency(m) * 1e3
    gemm = pd.DataFrame(
        {
            **base,
            "op_name": "gemm",
            "kernel_source": "x",
            "gemm_dtype": "bfloat16",
            "m": m,
            "n": n,
            "k": k,
            "latency": lat,
        }
    )
    (folder / "gemm/vllm/9.9.9").mkdir(parents=True)
    gemm.to_parquet(folder / "gemm/vllm/9.9.9/gemm_perf.parquet")
    batch = rng.choice([1, 2, 4, 8, 16, 32, 64, 128], 800)
    step = rng.choice([15, 63, 255, 1023, 4095, 16383], 800)
    dec = pd.DataFrame(
        {
            **base,
            "op_name": "generation_attention",
            "kernel_source": "vllm_flash_attn_fa3",
            "batch_size": batch,
            "isl": 1,
            "num_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "beam_width": 1,
            "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16",
            "step": step,
            "window_size": 0,
            "latency": decode_seconds(batch, step) * 1e3,
        }
    )
    (folder / "attention/vllm/9.9.9").mkdir(parents=True)
    dec.to_parquet(folder / "attention/vllm/9.9.9/generation_attention_perf.parquet")
    ar = pd.DataFrame(
        {
            **base,
            "op_name": "all_reduce",
            "kernel_source": "vLLM_custom_graph",
            "allreduce_dtype": "bfloat16",
            "num_gpus": 2,
            "message_size": 2 ** np.arange(9, 22),  # bf16 elements: 1 KiB to 4 MiB
            "latency": allreduce_ms(2.0 ** np.arange(10, 23)),
            "backend": "vllm_graph",
        }
    )
    (folder / "comm/vllm/9.9.9").mkdir(parents=True)
    ar.to_parquet(folder / "comm/vllm/9.9.9/custom_allreduce_perf.parquet")
    return folder


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_kernel_tables(root)
    out = root / "out"
    report = calibrate_gpu(
        Source("h100-sxm", ("h100_sxm",), (), "vllm@9.9.9"), root, out, log=lambda *_: None
    )
    profile = GpuProfile.load(out / "profiles" / "h100-sxm.json")
    return profile, report


def test_surface_recovers_a_linear_function_exactly():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 8, (400, 2))
    y = 0.3 * x[:, 0] - 0.2 * x[:, 1] + 1.0
    s = grid(("a", "b"), [np.arange(0, 9), np.arange(0, 9, 2)]).fitted(x, y, 1.0)
    assert np.allclose(s(x), y, atol=1e-6)  # linear: no curvature for the penalty to fight
    again = Surface.from_dict(s.to_dict())
    assert np.allclose(again(x), y, atol=2e-3)  # float16 storage
    assert np.allclose(s(np.array([[-5.0, 20.0]])), s(np.array([[0.0, 8.0]])))  # clamped


def test_gemm_profile_predicts_unseen_shapes(fitted):
    profile, _ = fitted
    pricer = profile.pricer(HW, CostProfile.load("prior"), "vllm@9.9.9")
    m = np.array([3, 24, 96, 384, 3000])  # between the measured batch sizes
    n, k = np.full(5, 6144), np.full(5, 3072)  # a shape the table never had
    truth = gemm_roofline(m, n, k) / gemm_efficiency(m)
    assert pricer.gemm_s(m, n, k, "bf16") == pytest.approx(truth, rel=0.05)
    assert pricer.used["gemm"] == "gemm/bf16"


def test_decode_profile_learns_floor_and_efficiency(fitted):
    profile, report = fitted
    pricer = profile.pricer(HW, CostProfile.load("prior"), "vllm@9.9.9")
    shape = AttentionShape(32, 8, 128)
    floor = pricer.attention_floor_s("attention_decode", shape)
    assert 7e-6 < floor < 9.5e-6  # just under the fastest call, as fitted
    batch, ctx = np.array([3.0, 24.0, 96.0]), np.array([100.0, 2000.0, 8000.0])
    got = floor + batch * pricer.decode_s(ctx, batch, shape)
    assert got == pytest.approx(decode_seconds(batch, ctx), rel=0.06)
    errors = {e["op"]: e["mape_pct"] for e in report["families"]["vllm@9.9.9"]}
    assert errors["gemm"] < 3 and errors["attention_decode"] < 5


def test_collectives_interpolate_the_measured_table(fitted):
    profile, _ = fitted
    pricer = profile.pricer(HW, CostProfile.load("prior"), "vllm@9.9.9")
    sizes = np.array([3000.0, 65536.0, 1e6])
    assert pricer.allreduce_s(sizes, 2) == pytest.approx(allreduce_ms(sizes) * 1e-3, rel=1e-4)
    big = pricer.allreduce_s(np.array([2.0**24, 2.0**25]), 2)
    assert big[1] == pytest.approx(2 * big[0])  # beyond the largest size: bandwidth-bound
    four = pricer.allreduce_s(65536, 4)  # an unmeasured GPU count: ring-scaled nearest
    assert four == pytest.approx(allreduce_ms(65536) * 1e-3 * (3 / 4) / (1 / 2), rel=1e-4)
    table = CommTable.from_dict(CommTable(np.array([1.0, 10.0]), np.array([1.0, 2.0])).to_dict())
    assert table(np.sqrt(10.0)) == pytest.approx(np.sqrt(2.0))


def test_profile_json_is_compact_and_names_its_sources(fitted):
    profile, _ = fitted
    family = profile.families["vllm@9.9.9"]
    assert "measured on NVIDIA H100" in family["source"]
    assert len(json.dumps(family)) < 60_000


def test_calibrate_refuses_a_gpu_it_has_no_tables_for(tmp_path, capsys):
    """An unknown --gpu, or no tables at all, fits nothing: exit 2 and leave no (empty) report
    where the committed one would be overwritten."""
    for argv in (["--gpu", "l4"], ["--gpu", "a100-80gb", "--data", str(tmp_path / "none")]):
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--out", str(tmp_path / "out")])
        assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "no table sources listed for it" in err and "no tables found under" in err
    assert not (tmp_path / "out").exists()


def test_held_out_gemm_errors_split_decode_from_prefill_shapes(fitted):
    """The fit report scores decode-shape GEMMs (M <= 256) apart from prefill shapes, per
    weight format, on rows the fit never saw."""
    _, report = fitted
    labels = {e["label"]: e for e in report["families"]["vllm@9.9.9"]}
    decode = labels["bf16, decode shapes (M <= 256)"]
    prefill = labels["bf16, prefill shapes (M > 256)"]
    whole = labels["gemm"]
    assert decode["rows"] + prefill["rows"] == whole["rows"] > 0
    assert decode["mape_pct"] < 5 and prefill["mape_pct"] < 5


def test_tensorrt_llm_tables_fit_their_own_family(tmp_path):
    """TensorRT-LLM's kernel tables become trtllm@<release> families, their attention as the
    TRTLLM backend; a table whose framework column names another engine than its folder (SGLang
    0.5.6.post2's all-reduce says TRTLLM) is left out rather than made a family of its own."""
    folder = write_kernel_tables(tmp_path)
    for kind, name in (("gemm", "gemm_perf"), ("attention", "generation_attention_perf")):
        df = pd.read_parquet(folder / f"{kind}/vllm/9.9.9/{name}.parquet")
        df = df.assign(framework="TRTLLM", version="1.2.0rc5", kernel_source="torch_flow")
        if kind == "gemm":  # a zero-row GEMM, as one of these tables times: left out
            df = pd.concat([df, df.head(1).assign(m=0)], ignore_index=True)
        (folder / f"{kind}/trtllm/1.2.0rc5").mkdir(parents=True)
        df.to_parquet(folder / f"{kind}/trtllm/1.2.0rc5/{name}.parquet")
    ar = pd.read_parquet(folder / "comm/vllm/9.9.9/custom_allreduce_perf.parquet")
    (folder / "comm/sglang/0.5.6.post2").mkdir(parents=True)
    ar.assign(framework="TRTLLM", version="0.5.6.post2").to_parquet(
        folder / "comm/sglang/0.5.6.post2/custom_allreduce_perf.parquet"
    )
    out = tmp_path / "out"
    calibrate_gpu(Source("h100-sxm", ("h100_sxm",), (), "vllm@9.9.9"), tmp_path, out, log=print)
    profile = GpuProfile.load(out / "profiles" / "h100-sxm.json")
    assert set(profile.families) == {"vllm@9.9.9", "trtllm@1.2.0rc5"}
    trt = profile.families["trtllm@1.2.0rc5"]["surfaces"]
    assert {"gemm/bf16", "attention_decode/TRTLLM/bf16"} <= set(trt)
    assert profile.family_for("trtllm", "1.0.0") == "trtllm@1.2.0rc5"  # the nearest measured
    assert profile.family_for("vllm", "0.6.0") == "vllm@9.9.9"


def test_release_order_knows_release_candidates_and_post_releases():
    from sim.engines.versions import release_key

    order = ["0.5.6.post2", "0.5.9", "1.2.0rc5", "1.3.0rc10", "1.3.0rc15", "1.3.0", "1.3.0.post2"]
    assert sorted(reversed(order), key=release_key) == order
    families = {f"trtllm@{v}": {} for v in ("1.2.0rc5", "1.3.0rc10", "1.3.0rc20")}
    profile = GpuProfile("h200", "trtllm@1.3.0rc20", families, None)
    assert profile.family_for("trtllm", "1.3.0rc15") == "trtllm@1.3.0rc10"
    assert profile.family_for("trtllm", "1.4.0") == "trtllm@1.3.0rc20"
