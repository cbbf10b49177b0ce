"""A sweep worker keeps Hydra's plugin registry from one point to the next.

Hydra's joblib and Ray launchers send each point the launching process's singletons (Hydra's
`Singleton.get_state()`: the config store, Hydra's config, the resolvers), the plugin registry
left out, and `Singleton.set_state` in the worker builds the registry afresh: every plugin
module (the launchers, the sweepers, the shell completions) executed once more, its classes
made anew: 10-12 ms a point here, and eleven classes with their functions left for the
collector (benchmarks/README.md, issue 24's seventh step). The plugins installed do not change
while a worker lives, so `install()` makes set_state keep the registry the worker's first point
built. Installed in a sweep's worker processes when they load the sweep's config loader
(sim/scenarios/sweep/compose.py), before their first point's state is set.
"""

from __future__ import annotations

from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton

# Hydra's own, even where this module is executed again after install()
_hydra_set_state = getattr(Singleton.set_state, "hydra_set_state", Singleton.set_state)


def set_state(state: dict) -> None:
    """Singleton.set_state(state), this process's plugin registry kept where it has one."""
    plugins = Singleton._instances.get(Plugins)
    if plugins is not None and Plugins not in state["instances"]:
        state = {**state, "instances": {**state["instances"], Plugins: plugins}}
    _hydra_set_state(state)


set_state.hydra_set_state = _hydra_set_state


def install() -> None:
    """Singleton.set_state keeps this process's plugin registry (set_state above)."""
    Singleton.set_state = staticmethod(set_state)
