"""The benchmark as it may have been run: where a case's source does not say how its clients
started, whether the server's prefix cache was warm or whether the first wave of a closed loop
was counted, every plausible setting is simulated and the prediction becomes a band [lowest,
highest] over them (issue 23, item 4; issue 43, item 3).

The settings are {clients started together, spread over one request lifetime
(workload.stagger)} x {prefix cache cold, warm from an earlier run of the same prompts
(workload.cache_warm)}, and for a closed loop one more, clients together and cache cold with its
first wave treated the other way: counted (workload.warmup_requests=0) where the case leaves a
warm-up out, left out (one wave more sent first, workload.warmup_requests=concurrency) where the
case counts it, as AIConfigurator's silicon cases do (importers/silicon.py, from its benchmark
runners); and for a case whose engine arguments an importer assumed (its `launch`: the silicon
rows' servers as AIConfigurator's generator launches them), clients together and cache cold
with the engine's default launch instead; and for a closed loop whose case does not state its
server's front end, clients together and cache cold with each request reaching the engine 1 ms
after its send (workload.frontend_ms; FRONT_END_MS below). `vllm bench serve` starts every
client of its measured run at once and counts every request of it (its --num-warmups requests
run before, apart: vllm/benchmarks/serve.py, vllm-project/vllm commit 009e6d4a), so the burst
of the first wave is in its means; AIPerf leaves a warm-up out only when asked
(--warmup-request-count). A setting the case's workload states is kept as stated (a stated
warm-up is an importer's choice, not the source's, so it is still varied); the client start
only changes a closed loop, so an open-loop case runs the cache settings alone and the
same result stands for both client starts. `SettingsBand` holds each setting's results, the
median absolute error per setting and metric, and each banded case's band per metric
(Validation.bands, validation.csv's band_low/band_high); `inside_band` is the share of
measured values that fall inside their band."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from sim.scenarios.validate.cases import Case
from sim.scenarios.validate.runs import CaseResult, run_all
from sim.scenarios.validate.targets import VLLM_ROWS, MedianError, select_rows
from sim.scenarios.validate.validation import Accuracy, Row, accuracy, rows

# (workload.stagger, workload.cache_warm), with a third item: True for the first wave counted,
# False for it left out, LAUNCH_DEFAULTS for the engine's default launch
Setting = tuple[bool | str, ...]
LAUNCH_DEFAULTS = "engine defaults"
FIRST_WAVE: Setting = (False, False, True)  # together, cold, workload.warmup_requests=0
# together, cold, one more wave sent first and left out (workload.warmup_requests=concurrency)
FIRST_WAVE_OUT: Setting = (False, False, False)
# together, cold, the server launched with the engine's defaults instead of the launch arguments
# an importer assumed (a case's `launch`: AIConfigurator's generator for the silicon rows)
DEFAULT_LAUNCH: Setting = (False, False, LAUNCH_DEFAULTS)
# together, cold, each request reaching the engine FRONT_END_MS after its client sent it
FRONT_END = "front end"
FRONT_END_SETTING: Setting = (False, False, FRONT_END)
# A served request's way to the engine: the client's HTTP request, the API server's JSON and
# tokenisation (10-21 us per token measured for a 131-token prompt, tenstorrent/
# tt-inference-server#2173), the hand-over to the engine process. With none (the main run) a
# closed loop's next request reaches the engine at the very end of the step that finished the
# previous one and joins the next step; with any delay shorter than a step it misses it and
# waits for the step after. Which of the two happens is what the setting varies, not the delay's
# size: 0.5, 2 and 5 ms gave the same share of the vLLM silicon rows' TTFT inside the band.
FRONT_END_MS = 1.0
SETTINGS: tuple[Setting, ...] = (
    (False, False),
    (True, False),
    (False, True),
    (True, True),
    FIRST_WAVE,
    FIRST_WAVE_OUT,
    DEFAULT_LAUNCH,
    FRONT_END_SETTING,
)
SPREAD_COLD: Setting = (True, False)  # the former client-start sensitivity
SENSITIVITY_METRICS = ("mean_tpot_ms", "output_throughput", "mean_ttft_ms")


def setting_name(setting: Setting) -> str:
    stagger, warm = setting[:2]
    return (
        f"clients {'spread' if stagger else 'together'}, prefix cache {'warm' if warm else 'cold'}"
        + (", first wave counted" if _counted(setting) else "")
        + (", first wave left out" if _left_out(setting) else "")
        + (", the engine's default launch" if _defaults(setting) else "")
        + (f", a {FRONT_END_MS:g} ms front end" if _front_end(setting) else "")
    )


def plausible(case: Case) -> list[Setting]:
    """The settings (stagger, cache_warm, first wave counted) a case may have run under, as
    SETTINGS keys: a setting its workload states stays as stated; an open loop has no client
    start to vary, so both client starts stand for its one run per cache setting; a closed
    loop that may have started together, cold, may also have treated its first wave the other
    way (counted it where the case leaves a warm-up out, left it out where the case counts it)."""
    body = next(iter(case.data["workload"].values()))
    stated = body if isinstance(body, dict) else {}
    wl = case.config.workload
    if wl.kind != "closed_loop":
        starts = [False, True]
    else:
        starts = [wl.stagger] if "stagger" in stated else [False, True]
    warms = [wl.cache_warm] if "cache_warm" in stated else [False, True]
    out: list[Setting] = [(s, w) for s in starts for w in warms]
    if wl.kind == "closed_loop" and (False, False) in out:
        out.append(FIRST_WAVE if wl.warmup_requests else FIRST_WAVE_OUT)
    if _launched(case) and (False, False) in out:
        out.append(DEFAULT_LAUNCH)
    if wl.kind == "closed_loop" and (False, False) in out and not _front_end_stated(stated, wl):
        out.append(FRONT_END_SETTING)
    return out


def _front_end_stated(stated: dict, wl) -> bool:
    """Whether the case states its server's front end (then it is kept as stated)."""
    keys = ("frontend_ms", "frontend_us_per_token")
    return any(k in stated for k in keys) or bool(wl.frontend_ms or wl.frontend_us_per_token)


def _launched(case: Case) -> dict:
    """The engine arguments an importer assumed for the case's server (`launch.engine_args`,
    not recorded by the source), or an empty mapping."""
    launch = case.data.get("launch")
    args = launch.get("engine_args") if isinstance(launch, dict) else None
    return args if isinstance(args, dict) else {}


def _counted(setting: Setting) -> bool:
    return len(setting) > 2 and setting[2] is True


def _left_out(setting: Setting) -> bool:
    return len(setting) > 2 and setting[2] is False


def _defaults(setting: Setting) -> bool:
    return len(setting) > 2 and setting[2] == LAUNCH_DEFAULTS


def _front_end(setting: Setting) -> bool:
    return len(setting) > 2 and setting[2] == FRONT_END


def _run_key(case: Case, setting: Setting) -> Setting:
    """The setting actually simulated for a SETTINGS key (an open loop keeps its stagger)."""
    if case.config.workload.kind != "closed_loop":
        return (case.config.workload.stagger, setting[1])
    return setting


def _base(case: Case) -> Setting:
    """The setting of the case as its file states it (its main run)."""
    return (case.config.workload.stagger, case.config.workload.cache_warm)


def _variant(case: Case, key: Setting) -> Case:
    workload = replace(case.config.workload, stagger=key[0], cache_warm=key[1])
    if _counted(key):
        workload = replace(workload, warmup_requests=0)
    elif _left_out(key):  # a wave more, sent first and left out: the steady state alone
        c = workload.concurrency
        workload = replace(workload, num_requests=workload.num_requests + c, warmup_requests=c)
    if _front_end(key):
        workload = replace(workload, frontend_ms=FRONT_END_MS)
    config = replace(case.config, workload=workload)
    if _defaults(key):  # the assumed launch arguments dropped: the engine's own defaults
        assumed = _launched(case)
        args = {k: v for k, v in case.config.engine_args.items() if k not in assumed}
        config = replace(config, engine_args=args)
    return replace(case, config=config)


@dataclass(frozen=True, slots=True)
class SettingsBand:
    """Every chosen case simulated under each of its plausible settings."""

    cases: tuple[Case, ...]  # the chosen cases, as their case files state them
    results: dict[Setting, dict[str, CaseResult]]  # setting -> case id -> its result
    num_runs: int  # the extra simulations (beyond the main pass)
    num_failed: int  # extra simulations that failed (their setting has no prediction)
    extra: tuple[CaseResult, ...] = ()  # those simulations' results, in the order they ran

    def table(self, setting: Setting) -> list[Row]:
        """The rows of the cases for which `setting` is plausible, under it."""
        got = self.results.get(setting, {})
        chosen = [c for c in self.cases if c.id in got]
        return rows(chosen, [got[c.id] for c in chosen])

    def accuracy(self, setting: Setting) -> Accuracy:
        return accuracy(self.table(setting))

    @property
    def bands(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Case id -> metric -> (lowest, highest) finite prediction over the case's plausible
        settings; only cases with two settings or more."""
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for case in self.cases:
            runs = [got[case.id] for got in self.results.values() if case.id in got]
            if len({id(r) for r in runs}) < 2:
                continue
            for metric in case.measured:
                values = [
                    v
                    for r in runs
                    if not r.error
                    and (v := r.predicted.get(metric)) is not None
                    and math.isfinite(v)
                ]
                if values:
                    out.setdefault(case.id, {})[metric] = (min(values), max(values))
        return out

    def client_sensitivity(self) -> dict[str, MedianError]:
        """The vLLM silicon rows with their clients spread and the cache cold: the median
        absolute error per metric (summary.json's `client_sensitivity`, as before)."""
        table = select_rows(self.table(SPREAD_COLD), VLLM_ROWS)
        out = {}
        for metric in SENSITIVITY_METRICS:
            errs = [abs(r.error_pct) for r in table if r.metric == metric and _finite(r)]
            if errs:
                out[metric] = MedianError(float(np.median(errs)), len(errs))
        return out

    def summary(self, table: Sequence[Row]) -> dict:
        """summary.json's `settings_band`: each setting's accuracy, and how many measured
        values of `table` (the main table, with bands) fall inside their band."""
        settings = []
        for s in SETTINGS:
            acc = self.accuracy(s)
            settings.append(
                {
                    "name": setting_name(s),
                    "stagger": s[0],
                    "cache_warm": s[1],
                    "first_wave_counted": _counted(s),
                    "first_wave_left_out": _left_out(s),
                    "engine_defaults": _defaults(s),
                    "front_end_ms": FRONT_END_MS if _front_end(s) else 0.0,
                    "num_cases": len(self.results.get(s, {})),
                    **acc.summary,
                }
            )
        return {
            "num_cases": len(self.cases),
            "num_banded": len(self.bands),
            "num_extra_runs": self.num_runs,
            "num_extra_failed": self.num_failed,
            "settings": settings,
            "inside_band": {
                m: {"fraction": f, "num_values": n} for m, (f, n) in inside_band(table).items()
            },
        }


def _finite(r: Row) -> bool:
    return r.error_pct is not None and math.isfinite(r.error_pct)


def inside_band(table: Sequence[Row]) -> dict[str, tuple[float, int]]:
    """Metric -> (share of its comparable measured values inside [band_low, band_high], how
    many rows have a band)."""
    hits: dict[str, list[bool]] = {}
    for r in table:
        if r.band_low is None or r.band_high is None or not _finite(r):
            continue
        hits.setdefault(r.metric, []).append(r.band_low <= r.measured <= r.band_high)
    return {m: (sum(h) / len(h), len(h)) for m, h in sorted(hits.items())}


def run_settings(
    cases: Sequence[Case],
    results: Sequence[CaseResult],
    jobs: int | None,
    chosen: Callable[[Case], bool],
    progress: Callable[[int, int], None] | None = None,
) -> SettingsBand:
    """Simulate each chosen, simulated case under its other plausible settings (its main
    result stands for the setting it ran under) and collect them per setting."""
    picked = [(c, r) for c, r in zip(cases, results, strict=True) if not r.error and chosen(c)]
    todo: list[tuple[Case, Setting]] = []
    for c, _ in picked:
        base = _base(c)
        keys = {_run_key(c, s) for s in plausible(c)} - {base}
        todo += [(c, k) for k in sorted(keys, key=repr)]
    ran = run_all([_variant(c, k) for c, k in todo], jobs, progress=progress)
    by_run: dict[tuple[str, Setting], CaseResult] = {
        (c.id, k): r for (c, k), r in zip(todo, ran, strict=True)
    }
    out: dict[Setting, dict[str, CaseResult]] = {s: {} for s in SETTINGS}
    for c, main in picked:
        base = _base(c)
        for s in plausible(c):
            key = _run_key(c, s)
            out.setdefault(s, {})[c.id] = main if key == base else by_run[(c.id, key)]
    failed = sum(1 for r in ran if r.error)
    return SettingsBand(tuple(c for c, _ in picked), out, len(todo), failed, tuple(ran))
