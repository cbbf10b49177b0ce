"""Model catalogue: layer kinds per architecture, and agreement with ../shared model configs."""

from __future__ import annotations

import json

import pytest

from sim.errors import UserError
from sim.specs.model import Attention
from sim.specs.model_config import load_model, model_names, spec_from_config
from tests.conftest import shared_data


def kinds(name):
    return [layer.attention for layer in load_model(name).layers]


def test_layer_kinds():
    gemma = kinds("gemma-3-27b-it")
    assert gemma.count(Attention.FULL) == 10 and gemma.count(Attention.SLIDING) == 52
    assert kinds("gpt-oss-20b")[:2] == [Attention.SLIDING, Attention.FULL]
    qnext = kinds("qwen3-next-80b-a3b")
    assert qnext.count(Attention.LINEAR) == 36 and qnext[3] is Attention.FULL
    scout = load_model("llama-4-scout-17b-16e").layers
    assert [layer.attention for layer in scout[:4]] == [Attention.CHUNKED] * 3 + [Attention.FULL]
    assert scout[0].window_tokens == 8192
    kimi = kinds("kimi-linear-48b-a3b")
    assert kimi.count(Attention.MLA) == 7 and kimi.count(Attention.LINEAR) == 20
    assert set(kinds("mistral-7b-v0.1")) == {Attention.SLIDING}
    assert set(kinds("deepseek-v3")) == {Attention.MLA}
    ds = load_model("deepseek-v3").layers
    assert [layer.moe for layer in ds[:4]] == [False, False, False, True]


def test_windowed_kv_is_bounded_and_linear_state_is_fixed():
    gemma = load_model("gemma-3-27b-it")
    per_token = gemma.kv_bytes_per_token_by_kind()
    short, long = gemma.kv_bytes_for_sequence(1024), gemma.kv_bytes_for_sequence(100_000)
    # beyond the 1,024-token window only the 10 global layers keep growing
    assert long - short == (100_000 - 1024) * per_token["full"]
    qnext = load_model("qwen3-next-80b-a3b")
    assert qnext.linear_state_bytes() > 0
    assert qnext.kv_bytes_for_sequence(10) - qnext.kv_bytes_for_sequence(0) == (
        10 * qnext.kv_bytes_per_token()
    )


def test_checkpoint_formats():
    assert load_model("deepseek-v3").checkpoint_dtype == "fp8_block"
    oss = load_model("gpt-oss-120b")
    assert oss.checkpoint_dtype == "fp4" and oss.quantized_experts_only
    # MXFP4 experts, the rest bf16: about 65 GB rather than 234 GB of bf16
    assert 60e9 < oss.weight_bytes() < 70e9


def test_catalogue_matches_the_shared_configs():
    src = shared_data("model_configs")
    for path in sorted(src.glob("*.json")):
        raw = json.loads(path.read_text())
        if "max_position_embeddings" not in raw.get("text_config", raw):
            continue  # the catalogue adds it; compare the rest below via the catalogue entry
        theirs = spec_from_config(raw, path.stem.lower(), str(path))
        ours = load_model(path.stem.lower())
        assert ours.layers == theirs.layers, path.name
        assert ours.params == theirs.params, path.name
        assert ours.kv_bytes_per_token() == theirs.kv_bytes_per_token(), path.name
    assert len(model_names()) >= len(list(src.glob("*.json")))


def test_bad_configs_fail_clearly(tmp_path):
    with pytest.raises(UserError, match="not in the catalogue"):
        load_model("llama-9")
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2}))
    with pytest.raises(UserError, match="num_attention_heads"):
        load_model(str(f))
    f.write_text("{oops")
    with pytest.raises(UserError, match="not a valid JSON"):
        load_model(str(f))
