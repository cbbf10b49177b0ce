"""A run dir's `.hydra/` files (config.yaml, hydra.yaml, overrides.yaml) written by libyaml.

Hydra writes the three files of every run, each sweep point's too, through `OmegaConf.to_yaml`,
whose emitter is PyYAML's pure-Python one: 31-33 ms for a sweep point's whole config here.
`install()` makes Hydra write them with the same representation (OmegaConf's containers and
its rule for quoting strings that would read back as another type) emitted by libyaml, the C
emitter PyYAML ships with: 9-15 ms (benchmarks/README.md, issue 24's fifth step).
The bytes are the same: tests/test_hydra_files.py compares both ways on every shipped
scenario's config, Hydra's node included. Where PyYAML was built without libyaml, Hydra's own
writer stays.

Installed by sim/__main__.py for every run and, for a sweep's worker processes (joblib's, Ray's),
when they load the sweep's config loader (sim/scenarios/sweep/compose.py), before their first
point is written.
"""

from __future__ import annotations

from pathlib import Path

import hydra.core.utils
import yaml
from omegaconf import OmegaConf
from omegaconf._utils import OmegaConfDumper

FAST = getattr(yaml, "__with_libyaml__", False)


if FAST:

    class _Dumper(yaml.CDumper):
        """libyaml's emitter, OmegaConf's representation of strings."""

    _Dumper.add_representer(str, OmegaConfDumper.str_representer)


def to_yaml(cfg) -> str:
    """OmegaConf.to_yaml(cfg) (unresolved, keys in order), emitted by libyaml."""
    if not FAST:
        return OmegaConf.to_yaml(cfg)
    container = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    return yaml.dump(
        container, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=_Dumper
    )


def save_config(cfg, filename: str, output_dir: Path) -> None:
    """hydra.core.utils._save_config, with to_yaml above."""
    output_dir.mkdir(parents=True, exist_ok=True)
    text = to_yaml(cfg)
    with open(str(output_dir / filename), "w", encoding="utf-8") as file:
        file.write(text)


def install() -> None:
    """Hydra's run_job writes a run's `.hydra/` files with save_config (this process)."""
    if FAST:
        hydra.core.utils._save_config = save_config
