"""One frame of kernel observations, whatever table they came from.

Every measured row becomes: the kernel class (`op`), its shape in the columns the pricing
functions take, `family` (whose kernels were measured: engine@version or a source), `gpu`
(catalogue name), `model` (for per-model tables), `latency_s`, `source` (the file) and `row`
(its position there, where the reader keeps it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DEVICE_GPU = {
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H200": "h200",
    "NVIDIA A100-SXM4-80GB": "a100-80gb",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
}

FOLDER_GPU = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "a100_sxm": "a100-80gb",
    "h100": "h100-sxm",
    "a100": "a100-80gb",
    "a40": "a40",
    "h100_dgx": "h100-sxm",
    "a100_dgx": "a100-80gb",
    "h100_pairwise_nvlink": "h100-sxm",
    "a100_pairwise_nvlink": "a100-80gb",
    "a40_pairwise_nvlink": "a40",
}

ELEMENTWISE_KIND = {  # operator label -> the elementwise kernel kind it is priced as
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "layernorm": "norm",
    "final_layernorm": "norm",
    "add": "add",
    "mlp_act": "act",
    "act_fn": "act",
    "attn_rope": "rope",
    "rotary_emb": "rope",
    "emb": "embedding",
    "embedding": "embedding",
    "sampler": "sampler",
}

DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "int4_wo": "int4",
    "w4a16_mxfp4": "fp4",
    "half": "fp16",
}

COLUMNS = [
    "op",
    "label",
    "kind",
    "family",
    "gpu",
    "model",
    "dtype",
    "m",
    "n",
    "k",
    "batch",
    "q",
    "ctx",
    "heads",
    "kv_heads",
    "head_dim",
    "window",
    "kv_dtype",
    "backend",
    "tokens",
    "hidden",
    "inter",
    "topk",
    "experts",
    "nbytes",
    "num_gpus",
    "prefill_chunk",
    "kv_prefill",
    "n_decode",
    "kv_decode",
    "latency_s",
    "source",
    "row",  # the row's position in its source table (kernel tables), for naming it
]


def frame(rows: dict, n: int, **const) -> pd.DataFrame:
    data = {c: rows.get(c, const.get(c, np.nan)) for c in COLUMNS}
    return pd.DataFrame({c: (v if np.ndim(v) else [v] * n) for c, v in data.items()})
