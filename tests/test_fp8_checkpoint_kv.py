"""An FP8 checkpoint under vLLM keeps its KV cache in the model's dtype unless the run asks for
FP8 KV: vLLM 0.12.0 and 0.19.0 (quantization/modelopt.py reads a ModelOpt checkpoint's
kv_cache_quant_algo for the KV scales only; attention/layer.py sizes the cache from
cache_config.cache_dtype, "auto" = the model's dtype in utils/torch_utils.py). What that is
worth on the H200 rows of nvidia/Llama-3.1-8B-Instruct-FP8 (issue 43): the KV pool and the
KV read of a decode step, each half with --kv-cache-dtype fp8."""

from __future__ import annotations

import pytest

from sim.config import SimConfig
from sim.run.setup import Setup


def setup(release: str = "0.12.0", **args) -> Setup:
    cfg = SimConfig.from_mapping(
        {
            "engine": f"vllm@{release}",
            "hardware": "h200",
            "model": "llama-3.1-8b",
            "dtype": "fp8",
            "engine_args": args,
        }
    )
    return Setup.from_config(cfg)


@pytest.mark.parametrize("release", ["0.12.0", "0.19.0"])
def test_an_fp8_checkpoint_keeps_bf16_kv_unless_asked(release):
    auto = setup(release)
    assert auto.settings.kv_cache_dtype == "auto"
    rule = auto.settings.rules["kv_cache_dtype"]
    assert "kv_cache_quant_algo loads only KV scales" in rule and "modelopt.py" in rule
    assert auto.cost_model().kv_dtype == "bf16"
    fp8 = setup(release, kv_cache_dtype="fp8")
    assert fp8.cost_model().kv_dtype == "fp8"
    # the pool holds twice the tokens (the same bytes, half of them per token)
    assert fp8.memory.num_blocks == pytest.approx(2 * auto.memory.num_blocks, rel=0.01)


def test_older_releases_say_no_more_than_they_were_read_for():
    assert setup("0.11.0").settings.rules["kv_cache_dtype"].endswith("auto (the model's dtype)")


def test_fp8_kv_halves_the_kv_read_of_the_4000x1000_rows_decode_step():
    """128 sequences at 4,500 tokens (the 4000 x 1000 c128 TP1 row's mean context): the
    attention reads 75.5 GB of BF16 KV, about half with FP8 KV; the rest of the step is the
    same."""
    contexts = [4500] * 128
    bf16 = setup().cost_model().cost([], [], contexts)
    fp8 = setup(kv_cache_dtype="fp8").cost_model().cost([], [], contexts)
    assert 0.5 < fp8.attention_decode_s / bf16.attention_decode_s < 0.8
    assert (fp8.linear_s, fp8.cpu_serial_s) == (bf16.linear_s, bf16.cpu_serial_s)
    kv_bytes = 128 * 4500 * 131_072  # 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes
    assert bf16.attention_decode_s >= kv_bytes / 4.8e12  # never faster than the H200's HBM
