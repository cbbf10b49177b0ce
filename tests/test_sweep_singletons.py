"""A sweep worker keeps Hydra's plugin registry between its points (sim/scenarios/sweep/
singletons.py): what a joblib or Ray worker does for each point, set Hydra's singletons from the
launching process's state, without scanning for plugins again. Each case runs in a fresh
process, as a worker does: a scan for plugins executes the plugin modules again and registers
their configs anew, which would change what the other tests of this process compose."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PREAMBLE = """
import json, pickle
from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton
from hydra.plugins.launcher import Launcher
from joblib.externals import cloudpickle
from sim.scenarios.sweep import singletons

scans = []
initialize = Plugins._initialize
Plugins._initialize = lambda self: scans.append(1) or initialize(self)
Plugins.instance()  # the launching process's registry, left out of the state it sends
sent = cloudpickle.dumps(Singleton.get_state())  # pickled as joblib sends it to a worker
Singleton._instances.pop(Plugins)  # a fresh worker: no registry yet
scans.clear()
"""


def _run(body: str) -> dict:
    code = PREAMBLE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


POINTS = """
registries = []
for _ in range(3):
    state = pickle.loads(sent)
    Singleton.set_state(state)
    registries.append(Plugins.instance())
rest = all(Singleton._instances[k] is v for k, v in state["instances"].items())
launchers = sorted(c.__name__ for c in registries[-1].discover(Launcher))
print(json.dumps({"scans": len(scans), "same": registries[0] is registries[1] is registries[2],
                  "rest": rest, "launchers": launchers}))
"""


def test_hydra_alone_scans_for_plugins_at_every_point():
    got = _run(POINTS)
    assert got["scans"] == 3 and not got["same"]


def test_a_worker_keeps_the_registry_its_first_point_built():
    got = _run("singletons.install()\n" + POINTS)
    assert got["scans"] == 1 and got["same"]
    assert got["rest"]  # the rest of the state is the point's own
    assert {"BasicLauncher", "JoblibLauncher"} <= set(got["launchers"])  # a registry that works


def test_a_state_with_its_own_registry_keeps_it():
    got = _run("""
        singletons.install()
        Plugins.instance()
        state = pickle.loads(sent)
        own = object.__new__(Plugins)
        state["instances"][Plugins] = own
        scans.clear()
        Singleton.set_state(state)
        print(json.dumps({"own": Plugins.instance() is own, "scans": len(scans)}))
        """)
    assert got == {"own": True, "scans": 0}
