"""`python -m sim [scenario=NAME] [KEY=VALUE ...]`: one run (or a -m sweep), its outputs in the
run dir.

Hydra composes scenarios/; `hydra.run.dir=DIR` chooses where everything goes; `-m` sweeps (on
every core: scenarios/config.yaml makes joblib the launcher). Every run's config is checked
before its run dir is made (sim/cli.py, then the scenario's own check; a sweep's points before
Hydra starts, a single run's as Hydra composes it): a wrong key, a bad value or a model that
does not fit prints one line and exits 2; --debug (or SIM_DEBUG=1) shows the
traceback instead. The run dir (a sweep's dir) is then locked for this process, before Hydra
makes it and writes .hydra/ there (sim/run/rundir.py): a second run into it is refused in one
line naming the first, and a folder that cannot hold a run (a file, read-only, a full disk, a
name too long) is one line too. sim/scenarios/runner.py runs the task. A run dir holds a file
INCOMPLETE while its task runs, and keeps it if the task did not finish (Ctrl-C exits 130, a
sweep's too). `--help`, `--version` and `--list` answer before any of that
(sim/scenarios/listing.py lists).
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.plugins.sweeper import Sweeper
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from sim.cli import MAX_SWEEP_CHECKS, check_overrides, split_argv, to_sim_config
from sim.errors import UserError
from sim.paths import REPO_DIR, SCENARIO_DIR
from sim.scenarios import hydra_files
from sim.specs.model_config import catalogue_name

INFORMATIONAL = {"--hydra-help", "--info", "--cfg", "-c", "--shell-completion"}
# Tasks whose every run fans out simulations on every core (sim/scenarios/fanout.py; each has
# a `jobs` setting): their -m sweeps keep Hydra's basic launcher (_choose_launcher).
SELF_PARALLEL_TASKS = frozenset({"upgrade_diff", "long_context", "capacity", "disagg", "validate"})
HELP = """\
sim {version}: a discrete-event simulator of LLM serving engines (vLLM, SGLang, TensorRT-LLM)

  python -m sim [scenario=NAME] [KEY=VALUE ...]   one run; its outputs in the run dir
  python -m sim -m KEY=A,B [KEY=C,D ...]          a sweep of every combination, on every core
  python -m sim --list [models|gpus|engines|scenarios|workloads]   what the catalogues hold
  python -m sim --version | --help | --hydra-help | --cfg job

The main job: why an upgrade changed latency and throughput, setting by setting:
  python -m sim scenario=upgrade_diff upgrade.before=vllm@0.6.3 upgrade.after=vllm@0.10.2

Every key of scenarios/config.yaml can be set on the command line, e.g.
  model=llama-3.1-70b hardware=h200 parallel.tp=4 engine=vllm@0.8.5 workload.rate=8
  engine_args.max_num_batched_tokens=2048 hydra.run.dir=DIR
--cfg job prints the composed config (every key and its value) without running; a wrong key
or value is one line naming it and what is allowed (exit 2); --debug shows its traceback.
model= takes a catalogue name, a HuggingFace id of one (meta-llama/Llama-3.1-8B-Instruct) or a
path to a config.json; hardware= a catalogue GPU or a path to a .yaml file.
-m runs the points in joblib's worker processes (one at a time for scenarios that fan out on
every core themselves); hydra/launcher=basic runs them one at a time in this process,
hydra/launcher=ray on a Ray cluster.

Docs: README.md; docs/running.md (every scenario), docs/sweeps.md, docs/architecture.md.
Hydra's own flags (--cfg, --info, --multirun, shell completion): python -m sim --hydra-help"""


def fail(message: str) -> None:
    print(f"sim: error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path=str(SCENARIO_DIR), config_name="config", version_base="1.3")
def _hydra_entry(cfg: DictConfig) -> None:
    from sim.scenarios.runner import run_task  # start-up time: see main()

    try:
        run_task(cfg)
    except UserError as exc:
        if _debug():
            raise
        fail(str(exc))
    except KeyboardInterrupt:
        if _debug():
            raise
        sys.exit(130)


def _debug() -> bool:
    return bool(os.environ.get("SIM_DEBUG"))


def main() -> None:
    if "--debug" in sys.argv[1:]:  # tracebacks instead of one-line errors (= SIM_DEBUG=1)
        sys.argv.remove("--debug")
        os.environ["SIM_DEBUG"] = "1"
        os.environ["HYDRA_FULL_ERROR"] = "1"
    if _answered(sys.argv[1:]):
        return
    # start-up time: the runner imports the simulator, pandas and matplotlib, which --help,
    # --version and --list do without
    from sim.scenarios.runner import check, freeze_start_up

    overrides, multirun = split_argv(sys.argv[1:])
    restores = []
    if not any(arg.startswith("-") for arg in sys.argv[1:]):  # one run, overrides only
        restores.append(_check_as_composed(overrides, check))
    elif not INFORMATIONAL & set(sys.argv[1:]):
        try:
            configs = check_overrides(overrides, multirun)
            for cfg in configs:
                check(cfg)
        except UserError as exc:
            if _debug():
                raise
            fail(str(exc))
        _say_models(configs)
        _say_engines(configs)
        if multirun:
            _choose_launcher(overrides, configs)
            _compose_points_from_templates()
            _skip_get_mode()
        if multirun and len(configs) < MAX_SWEEP_CHECKS:  # every point checked here:
            # on the base class: Hydra re-executes its plugins' modules (the basic sweeper's
            # among them) when it scans for plugins, which would undo a patch of the subclass
            Sweeper.validate_batch_is_legal = _checked_already
    held: list = []  # the run dir's claim, or the sweep dir's lock
    if not INFORMATIONAL & set(sys.argv[1:]):
        restores.append(_claim_as_composed(held))
    hydra_files.install()
    _save_config_or_fail()
    freeze_start_up()  # a sweep's own process too: its report, after the points, collects less
    try:
        _hydra_entry()
    except KeyboardInterrupt:  # a sweep's launcher (a single run's task says it itself)
        if _debug():
            raise
        print(_interrupted(held), file=sys.stderr)
        sys.exit(130)
    finally:
        for restore in restores[::-1]:
            restore()


def _claim_as_composed(held: list) -> Callable[[], None]:
    """Lock the run dir (a sweep's dir) as soon as Hydra has composed the config that names it,
    before Hydra makes it and writes its .hydra/ files: a second run into it, which would mix
    its files with the first's, is refused there in one line naming the first (its pid and
    command), exit 2; so is a folder that cannot hold a run (a file in the way, a read-only or
    full disk, a name too long), where Hydra would print its traceback. The claim goes in
    `held`; what is returned lets go of it (and puts Hydra back as it was)."""
    from hydra._internal.hydra import Hydra  # start-up time: only for a run or a sweep

    from sim.run.rundir import DirLock, RunDir  # start-up time (pandas): as above

    compose = Hydra.compose_config
    what = f"python -m sim {shlex.join(sys.argv[1:])}"

    def compose_config(self, *args, **kwargs):
        cfg = compose(self, *args, **kwargs)
        mode = kwargs.get("run_mode", args[2] if len(args) > 2 else None)
        if held or mode not in (RunMode.RUN, RunMode.MULTIRUN):
            return cfg
        key = "hydra.run.dir" if mode == RunMode.RUN else "hydra.sweep.dir"
        try:
            folder = Path(str(OmegaConf.select(cfg, key)))
        except Exception:  # an interpolation it cannot resolve: Hydra says so, as it would
            return cfg
        try:
            if mode == RunMode.RUN:
                held.append(RunDir.claim(folder, what, key))
            else:
                held.append(DirLock(folder, SWEEP_LOCK, what, key))
        except UserError as exc:
            if _debug():
                raise
            fail(str(exc))
        return cfg

    Hydra.compose_config = compose_config

    def restore() -> None:
        Hydra.compose_config = compose
        while held:
            held.pop().release()

    return restore


def _save_config_or_fail() -> None:
    """Hydra writes a run's .hydra/ files before the task runs; a disk that fills up just then
    (the run dir's claim found room for its lock) is one line, exit 2, not Hydra's traceback."""
    import hydra.core.utils  # start-up time: only for a run or a sweep

    from sim.run.outputs import write_error  # start-up time (pandas): as above

    save = hydra.core.utils._save_config
    if getattr(save, "fails_in_one_line", False):
        return

    def save_config(cfg, filename: str, output_dir: Path) -> None:
        try:
            save(cfg, filename, output_dir)
        except OSError as exc:
            if _debug():
                raise
            fail(str(write_error(Path(output_dir) / filename, exc)))

    save_config.fails_in_one_line = True
    hydra.core.utils._save_config = save_config


SWEEP_LOCK = ".sweep.lock"  # in a sweep's dir while the sweep runs (its runs lock their own)


def _interrupted(held: list) -> str:
    """The one line for Ctrl-C outside a task: a sweep's, with what it left to do."""
    from sim.run.outputs import INCOMPLETE  # start-up time (pandas): only for a sweep
    from sim.run.rundir import DirLock  # as above

    sweep = next((h.path.parent for h in held if isinstance(h, DirLock)), None)
    if sweep is None:
        return "sim: interrupted"
    left = len(list(sweep.glob(f"*/{INCOMPLETE}")))
    return (
        f"sim: interrupted; {left} run dir{'s' if left != 1 else ''} of the sweep in {sweep} "
        f"marked {INCOMPLETE}: the same command again runs them and keeps the finished ones"
    )


def _check_as_composed(task_overrides: list[str], check) -> Callable[[], None]:
    """A single run's config is composed once: as Hydra composes it to run the task, checked
    there (to_sim_config, then the task's own check) before Hydra creates the run dir. Hydra
    would otherwise compose it three times (sim/cli.py's check, Hydra's get_mode, its run), a
    third of a second each. A composition that fails (a wrong key or group) is given to
    check_overrides, which names what is wrong in one line, as for a sweep. Returns what puts
    Hydra back as it was (for a caller that goes on in this process: the tests)."""
    from hydra._internal.hydra import Hydra  # start-up time: only for a single run

    compose, get_mode = Hydra.compose_config, Hydra.get_mode
    checked = False

    def compose_config(self, *args, **kwargs):
        nonlocal checked
        cfg_mode = kwargs.get("run_mode", args[2] if len(args) > 2 else None)
        if checked or cfg_mode != RunMode.RUN:
            return compose(self, *args, **kwargs)
        checked = True
        try:
            try:
                cfg = compose(self, *args, **kwargs)
            except Exception:  # Hydra's several lines: check_overrides says it in one
                GlobalHydra.instance().clear()  # check_overrides composes on its own
                check_overrides(task_overrides)
                raise  # nothing found: Hydra's own report (run_and_report)
            sim_cfg = to_sim_config(cfg, task_overrides)
            check(sim_cfg)
        except UserError as exc:
            if _debug():
                raise
            fail(str(exc))
        _say_models([sim_cfg])
        _say_engines([sim_cfg])
        return cfg

    _skip_get_mode()
    Hydra.compose_config = compose_config

    def restore() -> None:
        Hydra.compose_config, Hydra.get_mode = compose, get_mode

    return restore


def _skip_get_mode() -> None:
    """Hydra's get_mode composes the whole config only to read hydra.mode, which no scenario
    sets (tests/test_cli.py): None is what it answers then, and Hydra takes the mode from the
    command line (-m: a sweep; else one run). Answered here without composing."""
    from hydra._internal.hydra import Hydra  # start-up time: only for a run or a sweep

    Hydra.get_mode = lambda self, config_name, overrides: None


def _compose_points_from_templates() -> None:
    """A -m run's points composed from one composition per choice of groups (sim/scenarios/
    sweep/compose.py: the same configs, without Hydra composing each point afresh)."""
    from hydra._internal.hydra import Hydra  # start-up time: only for a sweep

    from sim.scenarios.sweep.compose import install  # start-up time, as above

    multirun = Hydra.multirun
    if getattr(multirun, "installs_sweep_loader", False):
        return

    def wrapped(self, *args, **kwargs):
        install(self)
        return multirun(self, *args, **kwargs)

    wrapped.installs_sweep_loader = True
    Hydra.multirun = wrapped


def _answered(argv: list[str]) -> bool:
    """--version, --help (-h) or --list [SECTION], answered here: True when one was."""
    if "--version" in argv:
        print(
            f"sim {version()} (Hydra {importlib.metadata.version('hydra-core')}, Python "
            f"{sys.version.split()[0]})"
        )
        return True
    if "--help" in argv or "-h" in argv:
        print(HELP.format(version=version()))
        return True
    for i, arg in enumerate(argv):
        if arg == "--list" or arg.startswith("--list="):
            after = argv[i + 1] if i + 1 < len(argv) else "-"
            section = arg.partition("=")[2] or (None if after[:1] == "-" or "=" in after else after)
            _print_listing(section)
            return True
    return False


def _print_listing(section: str | None) -> None:
    from sim.scenarios.listing import listing  # start-up time: only for --list

    try:
        print(listing(section), flush=True)
    except BrokenPipeError:  # `--list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except UserError as exc:
        if _debug():
            raise
        fail(str(exc))


def version(root: Path = REPO_DIR) -> str:
    """sim's version: pyproject.toml's in a checkout, else the installed package's metadata."""
    import tomllib  # start-up time: only --version and --help read it

    try:
        with (root / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        if project.get("name") == "sim":
            return str(project["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass
    try:
        return importlib.metadata.version("sim")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _say_models(configs) -> None:
    """Which catalogue entry a HuggingFace id (or another spelling) selected, once each."""
    for name in sorted({cfg.model for cfg in configs if Path(cfg.model).suffix != ".json"}):
        entry = catalogue_name(name)
        if entry != name:
            print(
                f"sim: model={name} is the catalogue's {entry} (same architecture)", file=sys.stderr
            )


def _say_engines(configs) -> None:
    """Which release's rules stand in for a named release without a rule set of its own (the
    upgrade study's two versions, else the run's engine), once each; a spec the task does not
    use is left to the task."""
    from sim.engines.resolve import stand_in  # start-up time: --help, --version and --list
    # answer without the engines' rules (a run has imported them by now, to check its config)

    specs = set()
    for cfg in configs:
        upgrade = cfg.task == "upgrade_diff"
        specs |= {cfg.upgrade.before, cfg.upgrade.after} if upgrade else {cfg.engine}
    for spec in sorted(str(s) for s in specs if s is not None):
        try:
            note = stand_in(spec)
        except UserError:
            continue
        if note:
            print(f"sim: {note}", file=sys.stderr)


def _choose_launcher(overrides: list[str], configs) -> None:
    """A sweep runs its points in joblib's worker processes (scenarios/config.yaml), unless
    the command line names a launcher or a point's task fans out simulations of its own on
    every core (sim/scenarios/fanout.py): nested in a worker those would share one core, so
    such sweeps take Hydra's basic launcher, one point at a time, each on every core."""
    if any(o.split("=", 1)[0].lstrip("+") == "hydra/launcher" for o in overrides):
        return
    tasks = sorted({cfg.task for cfg in configs} & SELF_PARALLEL_TASKS)
    if tasks:
        sys.argv.append("hydra/launcher=basic")
        print(
            f"sim: task={tasks[0]} runs its simulations on every core itself: its sweep runs one "
            "point at a time (hydra/launcher=joblib runs points at once)",
            file=sys.stderr,
        )


_hydra_validate = Sweeper.validate_batch_is_legal


def _checked_already(self, batch) -> None:
    """Hydra's basic sweeper composes every point's config once more before it launches them
    (validate_batch_is_legal), one after another in this process, to catch composition errors
    early. check_overrides has composed and checked every point of the sweep already, so that
    pass, a third of a short point's cost, is skipped; another sweeper's points (an optimiser's,
    chosen as it goes) were not checked here, and keep Hydra's pass."""
    if type(self).__name__ != "BasicSweeper":
        _hydra_validate(self, batch)


if __name__ == "__main__":
    main()
