"""A run dir's .hydra/ files written by libyaml (sim/scenarios/hydra_files.py) have the bytes
OmegaConf.to_yaml gives, on every shipped scenario's config, Hydra's node included."""

from __future__ import annotations

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from sim.paths import SCENARIO_DIR
from sim.scenarios import hydra_files

SCENARIOS = sorted(p.stem for p in (SCENARIO_DIR / "scenario").glob("*.yaml"))


@pytest.fixture(scope="module")
def configs():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(SCENARIO_DIR), version_base="1.3"):
        yield {s: compose("config", [f"scenario={s}"], return_hydra_config=True) for s in SCENARIOS}
    GlobalHydra.instance().clear()


def test_libyaml_is_there():
    """CI's PyYAML wheel has libyaml: without it the files are written by Hydra, slower."""
    assert yaml.__with_libyaml__ and hydra_files.FAST


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_three_files_have_omegaconfs_bytes(configs, scenario):
    cfg = configs[scenario]
    task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    for part in (task, cfg.hydra, cfg.hydra.overrides.task, cfg):
        assert hydra_files.to_yaml(part) == OmegaConf.to_yaml(part)


def test_strings_that_read_as_other_types_stay_quoted():
    cfg = OmegaConf.create(
        {"a": "true", "b": "1", "c": "1.5", "d": "null", "e": "héllo\nworld", "f": [1, "2"]}
    )
    text = hydra_files.to_yaml(cfg)
    assert text == OmegaConf.to_yaml(cfg)
    assert OmegaConf.create(text) == cfg


def test_install_makes_hydra_write_with_it(tmp_path, monkeypatch):
    import hydra.core.utils

    # whatever an earlier install in this process left there, install() must set it again
    monkeypatch.setattr(hydra.core.utils, "_save_config", None)
    hydra_files.install()
    assert hydra.core.utils._save_config is hydra_files.save_config
    cfg = OmegaConf.create({"x": "yes", "y": {"z": [1, 2]}})
    hydra.core.utils._save_config(cfg, "config.yaml", tmp_path / ".hydra")
    assert (tmp_path / ".hydra" / "config.yaml").read_text() == OmegaConf.to_yaml(cfg)
