"""AIConfigurator's collective tables count `message_size` in elements of their dtype, not in
bytes (its all-reduce collector times a tensor of `message_size` elements; its NCCL collector
runs nccl-tests with `-b` bytes and logs `size // bytes_per_element`; ai-dynamo/aiconfigurator
095f58a, collector/network/collect_all_reduce.py and collect_nccl.py). The reader turns them
into bytes, which the cost model prices (tokens x hidden x 2 for a BF16 all-reduce)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.calibrate.kernel_tables import read_tables
from sim.cost.comm import Topology
from sim.errors import UserError
from sim.run.physics import allreduce_floor_s
from sim.specs.hardware import load_hardware
from tests.conftest import shared_data

BASE = {"framework": "SGLang", "version": "0.5.9", "device": "NVIDIA H200"}


def _write(tmp_path, name: str, rows: dict) -> object:
    folder = tmp_path / "h200_sxm" / "comm" / "sglang" / "0.5.9"
    folder.mkdir(parents=True)
    pd.DataFrame({**BASE, **rows}).to_parquet(folder / name)
    return folder / name


def test_custom_allreduce_message_size_is_bf16_elements(tmp_path):
    path = _write(
        tmp_path,
        "custom_allreduce_perf.parquet",
        {
            "op_name": "all_reduce",
            "kernel_source": "SGLang_CustomAllReduce_graph",
            "allreduce_dtype": "bfloat16",
            "num_gpus": 8,
            "message_size": [4096, 2**26],
            "latency": [0.005, 0.56],
            "backend": "sglang_graph",
        },
    )
    obs = read_tables(path)
    assert obs["nbytes"].tolist() == [8192.0, 2.0**27]


def test_nccl_rows_of_two_dtypes_are_sized_by_their_own_element(tmp_path):
    path = _write(
        tmp_path,
        "nccl_perf.parquet",
        {
            "op_name": ["all_reduce", "all_reduce", "all_gather"],
            "kernel_source": "NCCL",
            "nccl_dtype": ["half", "int8", "half"],
            "num_gpus": 8,
            "message_size": [2**20, 2**20, 2**20],
            "latency": [0.04, 0.03, 0.02],
        },
    )
    obs = read_tables(path)
    assert obs["nbytes"].tolist() == [2.0**21, 2.0**20]  # all_gather rows are not all-reduces


def test_an_unknown_dtype_is_a_one_line_error(tmp_path):
    path = _write(
        tmp_path,
        "custom_allreduce_perf.parquet",
        {
            "op_name": "all_reduce",
            "kernel_source": "x_graph",
            "allreduce_dtype": "float8_e4m3",
            "num_gpus": 2,
            "message_size": [1024],
            "latency": [0.005],
        },
    )
    with pytest.raises(UserError, match="allreduce_dtype='float8_e4m3' is not a known dtype"):
        read_tables(path)


def test_h200_nccl_half_and_int8_agree_once_sized_in_bytes():
    """The measured evidence: at equal message_size, half rows take ~1.5x the int8 rows at
    2^26-2^28 elements (twice the bytes); at equal bytes they agree within 25%, and the
    largest half all-reduce is then as fast as the link allows (the audit's floor), not half."""
    path = shared_data("aiconfigurator/perf_data/h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet")
    obs = read_tables(path)
    obs = obs[obs["num_gpus"] == 8]
    df = pd.read_parquet(path)
    df = df[(df["op_name"] == "all_reduce") & (df["num_gpus"] == 8)]
    half = obs[(df["nccl_dtype"] == "half").to_numpy()].set_index("nbytes")["latency_s"]
    int8 = obs[(df["nccl_dtype"] == "int8").to_numpy()].set_index("nbytes")["latency_s"]
    sizes = [s for s in (2.0**27, 2.0**28) if s in half.index and s in int8.index]
    assert sizes
    for s in sizes:
        assert half[s] / int8[s] == pytest.approx(1.0, abs=0.25)
    big = half.index.max()
    floor = float(allreduce_floor_s(big, 8, Topology(), load_hardware("h200")))
    assert floor <= half[big] < 2.5 * floor
    assert np.isfinite(half.to_numpy()).all()
