"""Reading measured kernel tables into one frame of observations, whatever their format.

Three formats, as in ../shared/data:
  * per-kernel parquet tables (aiconfigurator): gemm_perf, context_attention_perf,
    generation_attention_perf, moe_perf, custom_allreduce_perf, nccl_perf; ms per call;
  * per-layer operator CSVs with model-shape columns (Vidur mlp.csv: QKV, O, MLP up/down,
    norms...) and collective CSVs (all_reduce.csv, send_recv.csv); ms;
  * layer-profile folders (LLMServingSim: meta.yaml + tpN/dense.csv, attention.csv,
    per_sequence.csv); us, shapes from the model named in meta.yaml.
Every row becomes one observation (sim/calibrate/observations.py): the kernel class (`op`),
its shape in the columns the pricing functions take, `family` (whose kernels were measured),
`gpu`, `model`, `latency_s`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pyarrow import ArrowException

from sim.calibrate.layer_tables import read_layer_profile, read_vidur_comm, read_vidur_mlp
from sim.calibrate.observations import DEVICE_GPU, DTYPES, FOLDER_GPU, frame
from sim.cost.routing import ROUTING
from sim.errors import UserError, shown
from sim.paths import shared_data_missing
from sim.user_files import RESULTS_BYTES, binary, guarded, refuse_duplicate_columns


def read_tables(path: str | Path) -> pd.DataFrame:
    """Every observation in a table file or, recursively, in a folder of them."""
    path = Path(path)
    try:
        found = path.exists()
    except OSError:  # a name too long for the file system
        found = False
    if not found:
        raise UserError(f"kernel table {path} does not exist{shared_data_missing(path)}")
    if path.is_dir() and (path / "meta.yaml").is_file():
        return read_layer_profile(path)
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.suffix in (".parquet", ".csv") and p.parent.name != "processed_traces"
        )
        frames = []
        for f in files:
            if (f.parent / "meta.yaml").is_file() or (f.parent.parent / "meta.yaml").is_file():
                continue  # layer profiles are read as a whole below
            frame = _read_file(f, strict=False)
            if frame is not None:
                frames.append(frame)
        for meta in sorted(path.rglob("meta.yaml")):
            if list(meta.parent.glob("tp*/dense.csv")):
                frames.append(read_layer_profile(meta.parent))
        if not frames:
            raise UserError(f"{path}: no supported kernel tables inside")
        return pd.concat(frames, ignore_index=True)
    if path.suffix == ".csv" and (path.parent.parent / "meta.yaml").is_file():
        return read_layer_profile(path.parent.parent, only=path.name)
    frame = _read_file(path, strict=True)
    return frame


# The columns each table's reader takes: numbers that must be > 0, numbers that may be 0
# (optional ones end in "?"), and labels (read as text).
_AIC_ATTENTION = ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "latency")
_AIC_MOE = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "latency")
_AIC = {
    "gemm_perf.parquet": (("m", "n", "k", "latency"), (), ("gemm_dtype",)),
    "context_attention_perf.parquet": (
        (*_AIC_ATTENTION, "isl"),
        ("window_size?",),
        ("op_name", "kv_cache_dtype", "kernel_source"),
    ),
    "generation_attention_perf.parquet": (
        _AIC_ATTENTION,
        ("step", "window_size?"),
        ("op_name", "kv_cache_dtype", "kernel_source"),
    ),
    "moe_perf.parquet": (
        (*_AIC_MOE, "moe_tp_size", "moe_ep_size"),
        (),
        ("moe_dtype", "distribution"),
    ),
    "custom_allreduce_perf.parquet": (
        ("message_size", "num_gpus", "latency"),
        (),
        ("kernel_source", "allreduce_dtype"),
    ),
    "nccl_perf.parquet": (("message_size", "num_gpus", "latency"), (), ("op_name", "nccl_dtype")),
}
_VIDUR_MLP = ("num_tensor_parallel_workers", "num_tokens", "n_embd", "n_head", "n_kv_head")
_VIDUR_MLP += ("n_expanded_embd",)
_VIDUR_COMM = ("devices_per_node", "num_workers", "size")


def _read_file(path: Path, strict: bool) -> pd.DataFrame | None:
    name = path.name
    try:
        if path.suffix == ".parquet" and name in _AIC:
            readers = {
                "gemm_perf.parquet": _aic_gemm,
                "context_attention_perf.parquet": _aic_prefill,
                "generation_attention_perf.parquet": _aic_decode,
                "moe_perf.parquet": _aic_moe,
                "custom_allreduce_perf.parquet": _aic_allreduce,
                "nccl_perf.parquet": _aic_nccl,
            }
            with binary(path, "kernel table") as fh:
                df = pd.read_parquet(fh)
            if name == "gemm_perf.parquet" and "m" in df.columns:
                # zero-row GEMMs (H100 TensorRT-LLM 1.2.0rc5 times 882 of them): nothing to price
                df = df[df["m"].ne(0)]
            df = _checked(df, path, *_AIC[name])
            return readers[name](df, path)
        if name == "mlp.csv":
            df = _read_csv(path)
            times = [
                c for c in df.columns if str(c).startswith("time_stats.") and c.endswith(".median")
            ]
            if not times:
                raise UserError(f"{path}: no time_stats.*.median columns; not a Vidur mlp.csv")
            df = _checked(df, path, (*_VIDUR_MLP, *times), (), ())
            df["use_gated_mlp"] = _flags(df, path, "use_gated_mlp")
            return read_vidur_mlp(df, path)
        if name in ("all_reduce.csv", "send_recv.csv"):
            kind = name.removesuffix(".csv")
            df = _checked(
                _read_csv(path), path, (*_VIDUR_COMM, f"time_stats.{kind}.median"), (), ()
            )
            return read_vidur_comm(df, path)
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text; save the table as UTF-8") from exc
    except (KeyError, ValueError, TypeError, OSError, ArrowException) as exc:
        why = str(exc).replace(f"'{path}'", "").splitlines()[0][:100] if str(exc) else ""
        why = why or exc.__class__.__name__
        raise UserError(f"{path}: not a readable kernel table ({why})") from exc
    if strict:
        raise UserError(
            f"{path}: unsupported kernel table; supported: gemm_perf / context_attention_perf / "
            "generation_attention_perf / moe_perf / custom_allreduce_perf / nccl_perf parquet, "
            "Vidur mlp.csv / all_reduce.csv / send_recv.csv, or a layer-profile folder"
        )
    return None


def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV table, read whole (sim/user_files.py's bounds: size, NUL bytes, a column twice)."""
    refuse_duplicate_columns(path)
    with guarded(path, "kernel table", RESULTS_BYTES) as fh:
        return pd.read_csv(fh)


_SMALLEST = 1e-30  # the least positive value a table holds (ms, or a shape)
# the largest: no measured shape, size or time comes near it (a 2^40-token batch, 10^15 ms),
# and shapes multiplied into bytes and FLOPs stay finite below it
_LARGEST = 1e15


def _checked(df: pd.DataFrame, path: Path, positive, nonneg, labels) -> pd.DataFrame:
    """The table with its numeric columns as finite floats (> 0, or >= 0) and its labels as
    text; a missing column or a bad value names the column and the row."""
    df = df.copy()
    specs = [(c, True) for c in positive] + [(c, False) for c in nonneg]
    specs += [(c, None) for c in labels]
    for col, strictly_positive in specs:
        optional = col.endswith("?")
        col = col.removesuffix("?")
        if col not in df.columns:
            if optional:
                continue
            raise UserError(f"{path}: no column {col!r}; a {path.name} table needs it")
        if strictly_positive is None:
            df[col] = df[col].map(str)
            continue
        if df[col].dtype.kind in "iuf":  # int, unsigned, float columns
            values = df[col].to_numpy(dtype=float, na_value=np.nan)
        else:
            values = np.array([_number(v) for v in df[col]], dtype=float)
        # a positive value below _SMALLEST is no measurement (5e-324 ms is 0 s once scaled)
        low = values < _SMALLEST if strictly_positive else values < 0
        bad = ~np.isfinite(values) | low | (values > _LARGEST)
        if bad.any():
            row = int(np.argmax(bad))
            raise UserError(
                f"{path}: column {col} is {shown(df[col].iloc[row])} in row {row}; expected "
                f"a finite number {f'>= {_SMALLEST:g}' if strictly_positive else '>= 0'} "
                f"and <= {_LARGEST:g}"
            )
        df[col] = values
    return df


def _flags(df: pd.DataFrame, path: Path, col: str) -> np.ndarray:
    words = {True: True, False: False, "True": True, "False": False, "true": True}
    words |= {"false": False, 1: True, 0: False}
    if col not in df.columns:
        raise UserError(f"{path}: no column {col!r}; a {path.name} table needs it")
    out = []
    for row, v in enumerate(df[col]):
        key = v.item() if isinstance(v, np.generic) else v
        if not isinstance(key, (bool, int, float, str)) or key not in words:
            raise UserError(
                f"{path}: column {col} is {shown(v)} in row {row}; expected True or False"
            )
        out.append(words[key])
    return np.array(out, dtype=bool)


def _number(value) -> float:
    """A cell as a float; NaN where it is not a number."""
    if isinstance(value, bool | np.bool_ | str | bytes):
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan
    except OverflowError:  # an integer beyond float's range
        return np.inf


def _aic_common(df: pd.DataFrame, path: Path) -> dict:
    """family (framework@version), gpu and source of an aiconfigurator table."""
    first = df.iloc[0] if len(df) else {}
    engine_folder = path.parents[1].name if len(path.parents) > 1 else ""
    framework = str(first.get("framework", engine_folder)).lower()
    version = path.parent.name  # the release folder (rows may carry a dev build string)
    device = str(first.get("device", ""))
    folder = path.parents[3].name if len(path.parents) > 3 else ""
    gpu = DEVICE_GPU.get(device) or FOLDER_GPU.get(folder, folder)
    return {"family": f"{framework}@{version}", "gpu": gpu, "model": "", "source": str(path),
            "row": df.index.to_numpy()}  # fmt: skip


def _backend(kernel: pd.Series, gpu: str, family: str = "") -> np.ndarray:
    if family.startswith("trtllm@"):  # TensorRT-LLM's own attention kernels, whatever the flow
        return np.full(len(kernel), "TRTLLM", dtype=object)
    names = {
        "vllm_flash_attn_fa3": "FLASH_ATTN_FA3",
        "vllm_flash_attn_fa4": "FLASH_ATTN_FA4",
        "vllm_flash_attn_fa2": "FLASH_ATTN_FA2",
    }
    legacy = "FLASH_ATTN_FA3" if gpu in ("h100-sxm", "h200") else "FLASH_ATTN_FA2"
    return kernel.map(lambda k: names.get(k, legacy if k == "vllm_flash_attn" else k)).to_numpy()


def _aic_gemm(df, path):
    c = _aic_common(df, path)
    return frame(
        {
            "op": "gemm",
            "label": "gemm",
            "dtype": df["gemm_dtype"].map(DTYPES).to_numpy(),
            "m": df["m"].to_numpy(float),
            "n": df["n"].to_numpy(float),
            "k": df["k"].to_numpy(float),
            "latency_s": df["latency"].to_numpy() * 1e-3,
            **c,
        },
        len(df),
    )


def _aic_attention(df, path, op):
    c = _aic_common(df, path)
    window = df["window_size"].to_numpy(float) if "window_size" in df else np.zeros(len(df))
    rows = {
        "op": op,
        "label": df["op_name"].to_numpy(),
        "batch": df["batch_size"].to_numpy(float),
        "heads": df["num_heads"].to_numpy(float),
        "kv_heads": df["num_key_value_heads"].to_numpy(float),
        "head_dim": df["head_dim"].to_numpy(float),
        "window": window,
        "kv_dtype": df["kv_cache_dtype"].map(DTYPES).to_numpy(),
        "backend": _backend(df["kernel_source"], c["gpu"], c["family"]),
        "latency_s": df["latency"].to_numpy() * 1e-3,
        **c,
    }
    if op == "attention_prefill":
        rows |= {"q": df["isl"].to_numpy(float), "ctx": np.zeros(len(df))}
    else:
        rows |= {"ctx": df["step"].to_numpy(float), "q": np.ones(len(df))}
    return frame(rows, len(df))


def _aic_prefill(df, path):
    return _aic_attention(df, path, "attention_prefill")


def _aic_decode(df, path):
    return _aic_attention(df, path, "attention_decode")


def _aic_moe(df, path):
    """Gated (SwiGLU) experts under the routing the cost model prices served batches at
    (sim/cost/routing.py ROUTING: AIConfigurator's power law of exponent 1.2), without expert
    parallelism. Non-gated
    experts (two matrices, kernel_source *_nongated) are another kernel than the catalogue's
    models run. An expert-parallel rank (moe_ep_size > 1) runs num_experts / ep whole experts
    on the 1/ep of the pairs routed to them: read at those features, its rows run slower than
    a tensor-parallel slice of every expert at the same ones, and fitted together they raise
    every MoE price (H100 gpt-oss-20b TPOT +7%, further from the measured runs), so they are
    left out until a feature tells the two apart; the cost model prices an EP rank at its
    own shape (sim/cost/step.py, roofline.experts_touched's spread)."""
    gated = True
    if "kernel_source" in df:
        gated = ~df["kernel_source"].astype(str).str.contains("nongated")
    df = df[(df["distribution"] == ROUTING) & gated & (df["moe_ep_size"] == 1)]
    c = _aic_common(df, path) if len(df) else {}
    return frame(
        {
            "op": "moe",
            "label": "moe",
            "dtype": df["moe_dtype"].map(DTYPES).to_numpy(),
            "tokens": df["num_tokens"].to_numpy(float),
            "hidden": df["hidden_size"].to_numpy(float),
            "inter": (df["inter_size"] / df["moe_tp_size"]).to_numpy(float),
            "topk": df["topk"].to_numpy(float),
            "experts": df["num_experts"].to_numpy(float),
            "latency_s": df["latency"].to_numpy() * 1e-3,
            **c,
        },
        len(df),
    )


# Bytes per element of a collective table's dtype. AIConfigurator's `message_size` counts
# elements, not bytes: its all-reduce collector times a tensor of `message_size` elements of
# `allreduce_dtype` (collector/network/collect_all_reduce.py, get_input_shape_and_comm_size),
# its NCCL collector runs nccl-tests with `-b` bytes and logs `size // bytes_per_element`
# (collect_nccl.py), and its models query both with tokens x hidden elements (sdk/operations/
# communication.py, CustomAllReduce(..., h, tp)); ai-dynamo/aiconfigurator 095f58a. The H200's
# NCCL table shows it: int8 and half rows of equal message_size take 0.71 and 1.05 ms at 2^27.
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "int8": 1, "fp8": 1, "float32": 4}


def _message_bytes(df: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """A collective table's message sizes in bytes: `message_size` elements of `column`'s dtype."""
    unknown = sorted(set(df[column]) - set(ELEMENT_BYTES))
    if unknown:
        raise UserError(
            f"{path}: {column}={unknown[0]!r} is not a known dtype; "
            f"choose one of: {', '.join(ELEMENT_BYTES)}"
        )
    return df["message_size"].to_numpy(float) * df[column].map(ELEMENT_BYTES).to_numpy(float)


def _aic_allreduce(df, path):
    graph = df["kernel_source"].str.contains("graph")
    if graph.any():  # vLLM replays its custom all-reduce inside CUDA graphs
        df = df[graph]
    c = _aic_common(df, path)
    return frame(
        {
            "op": "allreduce",
            "label": "custom_allreduce",
            "nbytes": _message_bytes(df, "allreduce_dtype", path),
            "num_gpus": df["num_gpus"].to_numpy(float),
            "latency_s": df["latency"].to_numpy() * 1e-3,
            **c,
        },
        len(df),
    )


def _aic_nccl(df, path):
    df = df[df["op_name"] == "all_reduce"]
    gpu = FOLDER_GPU.get(path.parents[3].name, "") if len(path.parents) > 3 else ""
    return frame(
        {
            "op": "allreduce",
            "label": "nccl_all_reduce",
            "nbytes": _message_bytes(df, "nccl_dtype", path),
            "num_gpus": df["num_gpus"].to_numpy(float),
            "latency_s": df["latency"].to_numpy() * 1e-3,
            "family": f"nccl@{path.parent.name}",
            "gpu": gpu,
            "model": "",
            "source": str(path),
        },
        len(df),
    )
