"""Per-layer operator tables: Vidur's per-model CSVs (QKV, O, MLP up/down, norms... with
model-shape columns; all-reduce and send/recv by bytes) and LLMServingSim layer-profile folders
(meta.yaml naming the model + tpN/dense.csv, attention.csv, per_sequence.csv)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from sim.calibrate.observations import DEVICE_GPU, ELEMENTWISE_KIND, FOLDER_GPU, frame
from sim.engines.resolve import attention_backend, parse_engine_spec
from sim.errors import UserError
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model  # the catalogue gives the profiled shapes
from sim.user_files import load_yaml


def _vidur_where(path: Path) -> tuple[str, str]:
    parts = path.parts
    for i, part in enumerate(parts):
        if part in ("compute", "network") and i + 1 < len(parts):
            return FOLDER_GPU.get(parts[i + 1], parts[i + 1]), parts[i + 1]
    return "", ""


def read_vidur_mlp(df, path):
    gpu, _ = _vidur_where(path)
    tp = df["num_tensor_parallel_workers"].to_numpy(float)
    t = df["num_tokens"].to_numpy(float)
    h, nh, nkv = (df[c].to_numpy(float) for c in ("n_embd", "n_head", "n_kv_head"))
    inter = df["n_expanded_embd"].to_numpy(float)
    gated = df["use_gated_mlp"].astype(bool).to_numpy()
    hd = h / nh
    gemms = {
        "attn_pre_proj": ((nh + 2 * nkv) * hd / tp, h),
        "attn_post_proj": (h, nh * hd / tp),
        "mlp_up_proj": (np.where(gated, 2, 1) * inter / tp, h),
        "mlp_down_proj": (h, inter / tp),
    }
    elementwise = {  # bytes moved per call (bf16 reads and writes)
        "input_layernorm": 2 * h * 2,
        "post_attention_layernorm": 2 * h * 2,
        "add": 3 * h * 2,
        "mlp_act": np.where(gated, 3, 2) * inter / tp * 2,
        "attn_rope": 2 * (nh + nkv) * hd / tp * 2,
        "emb": 2 * h * 2,
    }
    c = {"family": "vidur", "gpu": gpu, "model": path.parent.name, "source": str(path)}
    frames = []
    for label, (n, k) in gemms.items():
        if f"time_stats.{label}.median" not in df:
            continue  # e.g. phi-2 has no separate post-attention norm
        frames.append(
            frame(
                {
                    "op": "gemm",
                    "label": label,
                    "dtype": "bf16",
                    "m": t,
                    "n": n,
                    "k": k,
                    "latency_s": df[f"time_stats.{label}.median"] * 1e-3,
                    **c,
                },
                len(df),
            )
        )
    for label, per_token in elementwise.items():
        if f"time_stats.{label}.median" not in df:
            continue
        frames.append(
            frame(
                {
                    "op": "elementwise",
                    "label": label,
                    "kind": ELEMENTWISE_KIND[label],
                    "nbytes": t * per_token,
                    "latency_s": df[f"time_stats.{label}.median"] * 1e-3,
                    **c,
                },
                len(df),
            )
        )
    return pd.concat(frames, ignore_index=True)


def read_vidur_comm(df, path):
    gpu, node = _vidur_where(path)
    kind = "all_reduce" if path.name == "all_reduce.csv" else "send_recv"
    df = df[df["devices_per_node"] == df["num_workers"]]  # one node, all GPUs on NVLink
    return frame(
        {
            "op": "allreduce" if kind == "all_reduce" else "sendrecv",
            "label": kind,
            "nbytes": df["size"].to_numpy(float),
            "num_gpus": df["num_workers"].to_numpy(float),
            "latency_s": df[f"time_stats.{kind}.median"].to_numpy() * 1e-3,
            "family": "vidur",
            "gpu": gpu,
            "model": node,
            "source": str(path),
        },
        len(df),
    )


def model_name_from_hf_id(hf_id: str) -> str:
    return re.sub(r"^meta-llama-", "", hf_id.split("/")[-1].lower())


def read_layer_profile(folder: Path, only: str | None = None) -> pd.DataFrame:
    meta = load_yaml(folder / "meta.yaml")
    if not isinstance(meta, dict) or "model" not in meta:
        raise UserError(f"{folder / 'meta.yaml'}: expected a mapping with the profiled model")
    model = load_model(model_name_from_hf_id(str(meta["model"])))
    gpu = DEVICE_GPU.get(str(meta.get("gpu", "")), str(meta.get("hardware", "")).lower())
    version = str(meta.get("vllm_version", ""))
    _, _, rule_set = parse_engine_spec(f"vllm@{version}" if version else "vllm")
    backend = attention_backend("vllm", rule_set, load_hardware(gpu), model, "auto")[0]
    family = f"vllm@{meta.get('vllm_version', 'unknown')}"
    frames = []
    for tp_dir in sorted(folder.glob("tp*")):
        tp = int(tp_dir.name[2:])
        c = {"family": family, "gpu": gpu, "model": model.name, "source": str(tp_dir)}
        h, hd = model.hidden_size, model.head_dim
        nh, nkv, inter = (
            model.num_q_heads / tp,
            max(model.num_kv_heads / tp, 1),
            model.intermediate_size / tp,
        )
        if only in (None, "dense.csv") and (tp_dir / "dense.csv").is_file():
            frames.append(_dense(pd.read_csv(tp_dir / "dense.csv"), c, h, hd, nh, nkv, inter))
        if only in (None, "attention.csv") and (tp_dir / "attention.csv").is_file():
            a = pd.read_csv(tp_dir / "attention.csv")
            frames.append(
                frame(
                    {
                        "op": "attention_mixed",
                        "label": "attention",
                        "prefill_chunk": a["prefill_chunk"].to_numpy(float),
                        "kv_prefill": a["kv_prefill"].to_numpy(float),
                        "n_decode": a["n_decode"].to_numpy(float),
                        "kv_decode": a["kv_decode"].to_numpy(float),
                        "heads": nh,
                        "kv_heads": nkv,
                        "head_dim": hd,
                        "window": 0.0,
                        "backend": backend,
                        "kv_dtype": "bf16",
                        "latency_s": a["time_us"].to_numpy() * 1e-6,
                        **c,
                    },
                    len(a),
                )
            )
        if only in (None, "per_sequence.csv") and (tp_dir / "per_sequence.csv").is_file():
            s = pd.read_csv(tp_dir / "per_sequence.csv")
            head = s["layer"] == "lm_head"
            seqs = s["sequences"].to_numpy(float)
            frames.append(
                frame(
                    {
                        "op": np.where(head, "gemm", "elementwise"),
                        "label": s["layer"].to_numpy(),
                        "kind": s["layer"].map(ELEMENTWISE_KIND).to_numpy(),
                        "dtype": "bf16",
                        "m": seqs,
                        "n": model.vocab_size / tp,
                        "k": float(h),
                        "nbytes": seqs * model.vocab_size * 4 * 3,
                        "latency_s": s["time_us"] * 1e-6,
                        **c,
                    },
                    len(s),
                )
            )
    if not frames:
        raise UserError(f"{folder}: no tpN/dense.csv, attention.csv or per_sequence.csv")
    return pd.concat(frames, ignore_index=True)


def _dense(d: pd.DataFrame, c: dict, h, hd, nh, nkv, inter) -> pd.DataFrame:
    t = d["tokens"].to_numpy(float)
    gemm = {
        "qkv_proj": ((nh + 2 * nkv) * hd, h),
        "o_proj": (h, nh * hd),
        "gate_up_proj": (2 * inter, h),
        "down_proj": (h, inter),
    }
    per_token = {
        "act_fn": 3 * inter * 2,
        "layernorm": 4 * h * 2,
        "final_layernorm": 4 * h * 2,
        "rotary_emb": 2 * (nh + nkv) * hd * 2,
        "embedding": 2 * h * 2,
    }
    label = d["layer"].to_numpy()
    known = np.isin(label, list(gemm) + list(per_token))
    is_gemm = np.isin(label, list(gemm))
    n = np.array([gemm[x][0] if x in gemm else np.nan for x in label])
    k = np.array([gemm[x][1] if x in gemm else np.nan for x in label])
    nbytes = np.array([per_token.get(x, np.nan) for x in label]) * t
    rows = frame(
        {
            "op": np.where(is_gemm, "gemm", "elementwise"),
            "label": label,
            "kind": [ELEMENTWISE_KIND.get(x, np.nan) for x in label],
            "dtype": "bf16",
            "m": t,
            "n": n,
            "k": k,
            "nbytes": nbytes,
            "tokens": t,
            "latency_s": d["time_us"].to_numpy() * 1e-6,
            **c,
        },
        len(d),
    )
    return rows[known].reset_index(drop=True)
