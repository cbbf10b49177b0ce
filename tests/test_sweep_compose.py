"""A sweep point's config from a template (sim/scenarios/sweep/compose.py) is Hydra's own."""

from __future__ import annotations

import sys

import pytest
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from sim.paths import SCENARIO_DIR
from sim.scenarios.sweep import compose
from sim.scenarios.sweep.compose import SweepConfigLoader

MASTER = ["scenario=chunked_prefill", "hydra.sweep.dir=/tmp/sweep", "hydra/launcher=joblib"]
POINTS = [
    # the scenario's own sweep: plain values over one group choice
    ["scenario=chunked_prefill", "engine_args.max_num_batched_tokens=512",
     "engine_args.max_num_seqs=64", "workload.rate=4"],
    ["scenario=chunked_prefill", "engine_args.max_num_batched_tokens=2048",
     "engine_args.max_num_seqs=128", "workload.rate=10"],
    # a plain value before the group, strings, floats, null, another workload group
    ["model=llama-3.1-70b", "scenario=chunked_prefill", "parallel.tp=4", "workload=gamma",
     "workload.rate=2.5", "engine_args.max_model_len=null"],
    # composed by Hydra: a +key, a ~key, a list
    ["scenario=chunked_prefill", "+engine_args.extra=1"],
    ["scenario=chunked_prefill", "~engine_args.max_num_seqs"],
    ["scenario=chunked_prefill", "workload.input_len=[100,200]"],
]  # fmt: skip


@pytest.fixture
def loader():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(SCENARIO_DIR), version_base="1.3"):
        yield GlobalHydra.instance().hydra.config_loader
    GlobalHydra.instance().clear()


def test_points_from_a_template_are_hydras_own(loader, monkeypatch):
    monkeypatch.setattr(compose, "_TEMPLATES", {})
    master = loader.load_configuration("config", MASTER, run_mode=RunMode.MULTIRUN)
    hydra_own = [ConfigLoaderImpl.load_sweep_config(loader, master, p) for p in POINTS]
    loader.__class__ = SweepConfigLoader
    ours = [loader.load_sweep_config(master, p) for p in POINTS]
    ours_again = [loader.load_sweep_config(master, p) for p in POINTS]  # from the templates
    assert len(compose._TEMPLATES) == 2  # two choices of groups among the plain ones
    for a, b, c in zip(hydra_own, ours, ours_again, strict=True):
        assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b) == OmegaConf.to_yaml(c)
        assert OmegaConf.is_struct(a) == OmegaConf.is_struct(b)
        assert OmegaConf.is_readonly(a.hydra) == OmegaConf.is_readonly(b.hydra)
        assert OmegaConf.get_type(a.hydra.launcher) is OmegaConf.get_type(c.hydra.launcher)
        assert a.hydra.job.override_dirname == b.hydra.job.override_dirname


def test_a_template_pickles_a_class_its_module_has_since_redefined(monkeypatch):
    """Hydra re-executes plugin modules when it scans for them: a config may hold a class its
    module no longer defines under that name. The template is pickled naming the class, and
    loads as the class the module defines now (pickle itself refuses such a class)."""
    import pickle
    import types
    from dataclasses import dataclass

    module = types.ModuleType("sim_test_stale_plugin")
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def define():
        @dataclass
        class LauncherConf:
            n_jobs: int = 2

        LauncherConf.__module__ = module.__name__
        LauncherConf.__qualname__ = "LauncherConf"
        module.LauncherConf = LauncherConf
        return LauncherConf

    stale = define()
    cfg = OmegaConf.create({"launcher": OmegaConf.structured(stale), "x": 1})
    fresh = define()
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(cfg)
    loaded = pickle.loads(compose._dumps(cfg))
    assert OmegaConf.get_type(loaded.launcher) is fresh
    assert OmegaConf.to_yaml(loaded) == OmegaConf.to_yaml(cfg)


def test_a_wrong_key_is_refused_as_hydra_refuses_it(loader, monkeypatch):
    monkeypatch.setattr(compose, "_TEMPLATES", {})
    master = loader.load_configuration("config", MASTER, run_mode=RunMode.MULTIRUN)
    loader.__class__ = SweepConfigLoader
    with pytest.raises(Exception, match=r"engine_args\.max_num_seq"):
        loader.load_sweep_config(master, ["scenario=chunked_prefill", "engine_args.max_num_seq=1"])


@pytest.mark.parametrize("scenario", ["default", "chunked_prefill", "long_context", "upgrade_diff"])
def test_plain_data_key_by_key_is_the_masked_copys(scenario):
    """sim.cli._plain (to_sim_config's mapping, once per sweep point) reads the config key by
    key: the same data as a resolved copy of the config without Hydra's node."""
    from sim.cli import _plain, compose_config

    cfg = compose_config([f"scenario={scenario}", "workload=closed_loop"])
    keys = [k for k in cfg if k != "hydra"]
    assert _plain(cfg) == OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
