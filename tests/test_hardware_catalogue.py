"""Every GPU of the catalogue (hardware/*.yaml) composes from the command line, resolves for vLLM
and SGLang, and simulates a tiny run; GPUs without measured tables say they use the prior."""

from __future__ import annotations

import pytest

from sim.cli import check_overrides
from sim.engines.resolve import resolve
from sim.errors import UserError
from sim.paths import HARDWARE_DIR
from sim.run.simulate import simulate
from sim.specs.hardware import hardware_names, load_hardware
from sim.specs.links import load_link
from sim.specs.model_config import load_model

GPUS = hardware_names()
# GPUs people run long context and upgrade regressions on (issue 25), none with measured tables
ADDED = ("h20", "l4", "a10g", "mi355x", "b300")
# Llama-2-7B: SGLang's static memory fraction on a 24 GB card leaves no KV beside Llama-3.1-8B
MODEL = "llama-2-7b-hf"
TINY = [
    f"model={MODEL}",
    "workload.num_requests=12",
    "workload.rate=4",
    "workload.input_len=256",
    "workload.output_len=8",
    "workload.length_dist=fixed",
    "engine_args.max_model_len=4096",
]


def test_the_catalogue_has_the_gpus_long_context_and_regression_reports_use():
    assert set(ADDED) <= set(GPUS), sorted(set(ADDED) - set(GPUS))


@pytest.mark.parametrize("gpu", GPUS)
def test_every_gpu_resolves_for_vllm_and_sglang_and_simulates(gpu):
    hw, model = load_hardware(gpu), load_model(MODEL)
    for engine in ("vllm", "sglang"):
        settings = resolve(engine, hw, model, 1)
        assert all(settings.rules[key] for key in ("attention_backend", "max_num_seqs"))
        (cfg,) = check_overrides([f"hardware={gpu}", f"engine={engine}", *TINY])
        run = simulate(cfg)
        assert len(run.requests) == 12 and run.requests["finish_s"].notna().all()


@pytest.mark.parametrize("gpu", GPUS)
def test_every_gpu_file_names_its_sources_and_dense_rates(gpu):
    """A datasheet citation in the file; FP8 at about twice BF16, as every dense datasheet
    pairs them (a sparsity figure next to a dense one would be 4x)."""
    assert "Sources:" in (HARDWARE_DIR / f"{gpu}.yaml").read_text(encoding="utf-8")
    rates = load_hardware(gpu).flops_per_s
    if "fp8" in rates:
        assert 1.9 <= rates["fp8"] / rates["bf16"] <= 2.1, dict(rates)


@pytest.mark.parametrize("gpu", ADDED)
def test_the_added_gpus_are_priced_with_the_prior_and_say_so(gpu):
    (cfg,) = check_overrides([f"hardware={gpu}", *TINY])
    sim = simulate(cfg).summary["sim"]
    assert sim["cost_profile"] == "prior" and not sim["cost_profile_calibrated"]
    assert f"no measured profile for {gpu}" in sim["cost_profile_source"]


@pytest.mark.parametrize(
    ("gpu", "vllm_backend", "sglang_backend"),
    [
        ("h20", "FLASH_ATTN_FA3", "FLASH_ATTN_FA3"),  # Hopper: FlashAttention 3, as on H100
        ("l4", "FLASH_ATTN_FA2", "FLASHINFER"),  # Ada
        ("a10g", "FLASH_ATTN_FA2", "FLASHINFER"),  # Ampere
        ("b300", "FLASHINFER", "TRTLLM"),  # Blackwell Ultra, compute capability 10.3
        ("mi355x", "ROCM_ATTN", "FLASHINFER"),  # CDNA 4 (gfx950)
    ],
)
def test_the_added_gpus_get_their_generations_kernels(gpu, vllm_backend, sglang_backend):
    hw, model = load_hardware(gpu), load_model("llama-3.1-8b")
    assert resolve("vllm@0.33.0", hw, model, 1).attention_backend == vllm_backend
    assert resolve("sglang@0.5.23", hw, model, 1).attention_backend == sglang_backend


def test_h20_collectives_come_from_the_h100_fabric():
    """8 x H20 (sglang#5396's setup) shares the H100's NVLink 4 / NVSwitch fabric: its
    all-reduce is priced from the H100's measured tables, the rest from the prior."""
    (cfg,) = check_overrides(
        ["hardware=h20", "parallel.tp=8", "engine=sglang", *TINY, "model=llama-3.1-70b"]
    )
    source = simulate(cfg).summary["sim"]["cost_profile_source"]
    assert "no measured profile for h20" in source
    assert "allreduce" in source and "measured on h100-sxm" in source


def test_b300_servers_have_their_800g_link():
    """HGX/DGX B300 pairs each GPU with a ConnectX-8 (800 Gb/s): KV between B300 pools."""
    b300 = load_hardware("b300")
    assert load_link("infiniband-xdr", b300, b300).bytes_per_s == 1.0e11


@pytest.mark.parametrize("typed", ["H100-SXM", "h100-SXM", " H200 ", "MI300X"])
def test_catalogue_names_are_taken_in_any_case(typed):
    """Issue 41, item 12: `hardware=H100-SXM` was not matched."""
    assert load_hardware(typed).name == typed.strip().lower()
    (cfg,) = check_overrides([f"hardware={typed.strip()}", *TINY])
    assert simulate(cfg).summary["config"]["hardware"] == typed.strip()


def test_a_gpu_the_catalogue_lacks_gets_its_siblings_and_the_way_to_add_it():
    """Issue 41, item 12: `hardware=h100-pcie` got no suggestion. The catalogue has no PCIe
    H100: the error offers the SXM one and names the file and recipe that would add it."""
    with pytest.raises(UserError) as err:
        load_hardware("h100-pcie")
    message = str(err.value)
    assert message.startswith(
        "hardware='h100-pcie' is not in the catalogue (did you mean h100-sxm?)"
    )
    assert message.endswith(
        "to add this GPU, write hardware/h100-pcie.yaml from its datasheet (docs/architecture.md, "
        "recipe 'A new GPU')"
    )
    with pytest.raises(UserError, match=r"\(did you mean a100-40gb or a100-80gb\?\)"):
        load_hardware("A100-PCIe")


def test_links_are_taken_in_any_case_and_a_near_miss_is_named():
    h100 = load_hardware("h100-sxm")
    assert load_link("InfiniBand", h100, h100).name == "infiniband"
    with pytest.raises(UserError, match=r"disagg.link='infinband' .*\(did you mean infiniband\?\)"):
        load_link("infinband", h100, h100)
