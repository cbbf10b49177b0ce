"""A sweep point's config, composed as Hydra composes it, without composing it afresh each time.

Hydra's launchers compose every point of a sweep from the YAML files up (a new config
repository, the defaults tree, every file parsed and merged): ~0.15 s a point here, the
largest part of a point's overhead beyond its simulation. The points of one sweep differ only
in their overrides, and most of those set plain values (`engine_args.max_num_seqs=64`): the
config groups they choose (`scenario=`, `workload=`) are the same down the sweep. So a point
is composed by Hydra once per choice of groups (the template), and each point is a copy of it
with its own plain values applied by Hydra's own code (`_apply_overrides_to_config`, as its
composition applies them after merging the defaults), its own `hydra.overrides.task` and
`hydra.job.override_dirname` (as its composition sets them). Anything else (a `+key` or
`~key`, a sweep over groups that is not the template's, a package) is composed by Hydra.
tests/test_sweep_compose.py checks the two give the same config, Hydra's node included.

`SweepConfigLoader` stands in for Hydra's config loader of a `-m` run (sim/__main__.py sets
it); the launchers hand the loader to their workers (joblib's processes, Ray's), which then
build their points with it, each worker keeping its own templates.
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, OmegaConf, open_dict

from sim.cli import GROUPS
from sim.scenarios import hydra_files
from sim.scenarios.sweep import singletons

TEMPLATES_MAX = 16  # per process; a sweep has one choice of groups, or a few
# this process's, by (config, hydra overrides, groups): pickled, as a copy is made by loading it
# (4-5 times cheaper than copy.deepcopy of a DictConfig, the same config: Hydra's launchers
# hand configs to their workers pickled)
_TEMPLATES: dict[tuple, bytes] = {}

hydra_files.install()  # a worker process loading this loader writes its points' files so too
singletons.install()  # and keeps its plugin registry from one point to the next


class SweepConfigLoader(ConfigLoaderImpl):
    """Hydra's config loader whose load_sweep_config reuses one composition per choice of
    groups (see the module's note)."""

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]):
        parser = OverridesParser.create()
        parsed = parser.parse_overrides(list(sweep_overrides))
        groups = [o for o in parsed if _group(o)]
        plain = [o for o in parsed if not _group(o)]
        if not all(_plain(o) for o in plain) or not all(_simple(o) for o in groups):
            return super().load_sweep_config(master_config, sweep_overrides)
        hydra_overrides = OmegaConf.to_container(master_config.hydra.overrides.hydra)
        key = (
            master_config.hydra.job.config_name,
            tuple(hydra_overrides),
            tuple(o.input_line for o in groups),
        )
        template = _TEMPLATES.get(key)
        if template is None:
            composed = super().load_sweep_config(master_config, [o.input_line for o in groups])
            template = _dumps(composed)
            if len(_TEMPLATES) >= TEMPLATES_MAX:
                del _TEMPLATES[next(iter(_TEMPLATES))]
            _TEMPLATES[key] = template
        cfg = pickle.loads(template)
        ConfigLoaderImpl._apply_overrides_to_config(plain, cfg)
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in parsed]
            names = cfg.hydra.job.config.override_dirname
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=parsed,
                kv_sep=names.kv_sep,
                item_sep=names.item_sep,
                exclude_keys=names.exclude_keys,
            )
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg


def _dumps(cfg: DictConfig) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(cfg)
    return out.getvalue()


class _Pickler(pickle.Pickler):
    """A config's classes by name, as pickle does, where a class is no longer what its module
    holds under that name: Hydra re-executes its plugins' modules when it scans for plugins,
    so the launcher node's dataclass (JobLibLauncherConf) is an earlier copy of the class its
    module now defines, which pickle refuses. Loaded, such a node has the class as defined now."""

    def reducer_override(self, obj):
        if isinstance(obj, type):
            now = _defined(sys.modules.get(obj.__module__), obj.__qualname__)
            if now is not None and now is not obj:
                return _current_class, (obj.__module__, obj.__qualname__)
        return NotImplemented


def _defined(module, qualname: str):
    """What `module` holds under `qualname` (None: nothing, or no module)."""
    for part in qualname.split("."):
        module = getattr(module, part, None)
    return module


def _current_class(module: str, qualname: str):
    """The class `module` defines as `qualname` now (a pickled template's, when loaded)."""
    return _defined(importlib.import_module(module), qualname)


def _group(o: Override) -> bool:
    return o.key_or_group in GROUPS


def _simple(o: Override) -> bool:
    """A value set (`scenario=chunked_prefill`, `workload.rate=4`): nothing added, deleted,
    moved to a package or swept."""
    return o.type is OverrideType.CHANGE and o.package is None and not o.is_sweep_override()


def _plain(o: Override) -> bool:
    """A plain value for an existing key: what Hydra applies after merging the defaults."""
    if o.is_hydra_override() or not _simple(o):
        return False
    value = o.value()
    return not isinstance(value, (list, dict)) and not (isinstance(value, str) and "${" in value)


def install(hydra) -> None:
    """Make a Hydra instance's config loader this one (a -m run's, before it launches)."""
    if type(hydra.config_loader) is ConfigLoaderImpl:
        hydra.config_loader.__class__ = SweepConfigLoader
