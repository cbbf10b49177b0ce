"""What a sweep over the load alone shows (no setting swept, only `rate` or `concurrency`): the
highest load within the SLOs at p99 when SLOs are set, where p99 TTFT knees (a request rate)
or where throughput stops growing (a concurrency), and the first overloaded rate. The sweep
report (sim/scenarios/sweep/report.py) leads with this sentence in place of a recommendation
between settings."""

from __future__ import annotations

import pandas as pd

from sim.scenarios.sweep.table import fmt_value

KNEE = 2.0  # p99 TTFT knees at the first rate where it passes twice the lightest load's
FLAT = 0.95  # a closed loop's throughput has levelled off once within 5% of the most
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency"}


def load_findings(frame: pd.DataFrame, load: str) -> dict:
    """The findings as a record and a sentence: `sentence`, and per finding the load it
    names (None where the sweep does not reach it)."""
    df = frame.dropna(subset=["p99_ttft_ms"]).sort_values(load, kind="stable")
    df = df.reset_index(drop=True)
    if df.empty:
        return {"sentence": "No run of the sweep has latency figures."}
    parts, record = [], {}
    slo = frame.attrs.get("slo", {})
    if slo:
        sentence, record["highest_load_within_slos"] = _within_slos(df, load, slo)
        parts.append(sentence)
    if load == "rate":
        sentence, record["latency_knee"] = _ttft_knee(df)
        parts.append(sentence)
        if "overloaded" in df:
            sentence, record["first_overloaded"] = _first_overloaded(df)
            parts.append(sentence)
    else:
        sentence, record["throughput_levels_off"] = _throughput_levels(df, load)
        parts.append(sentence)
    return {**record, "sentence": " ".join(p for p in parts if p)}


def _at(load: str, value) -> str:
    return f"{fmt_value(value)} req/s" if load == "rate" else f"{load} {fmt_value(value)}"


def _within_slos(df: pd.DataFrame, load: str, slo: dict) -> tuple[str, object]:
    """The highest load whose p99 meets every SLO set, and what breaks at the next one."""
    targets = " and ".join(f"{NAMES[m]} <= {t:g} ms" for m, t in slo.items() if m in NAMES)
    p99 = {m: df[f"p99_{m}_ms"] / t for m, t in slo.items() if f"p99_{m}_ms" in df}
    if not p99:
        return "", None
    worst = pd.concat(p99, axis=1).max(axis=1)
    meets = (worst <= 1.0).to_numpy()
    # the highest load up to which every lighter one meets them too
    i = len(df) - 1 if meets.all() else int(meets.argmin()) - 1
    if i < 0:
        first = df.iloc[0]
        return (
            f"No load swept meets the SLOs at p99 ({targets}): at the lightest, "
            f"{_at(load, first[load])}, {_p99s(first, slo)}.",
            None,
        )
    best = df.iloc[i]
    sentence = (
        f"The highest {'rate' if load == 'rate' else load} that meets the SLOs at p99 "
        f"({targets}) is {_at(load, best[load])} ({_p99s(best, slo)})"
    )
    if i + 1 < len(df):
        nxt = df.iloc[i + 1]
        m = max(p99, key=lambda k: p99[k].iloc[i + 1])
        at = _at(load, nxt[load])
        sentence += f"; at {at} p99 {NAMES[m]} is {nxt[f'p99_{m}_ms']:,.1f} ms."
    else:
        sentence += ", the highest swept: sweep higher to find the limit."
    return sentence, _plain(best[load])


def _p99s(row, slo: dict) -> str:
    return ", ".join(
        f"p99 {NAMES[m]} {row[f'p99_{m}_ms']:,.1f} ms" for m in slo if f"p99_{m}_ms" in row
    )


def _ttft_knee(df: pd.DataFrame) -> tuple[str, object]:
    """The first rate whose p99 TTFT passes KNEE x the lightest rate's."""
    base = df.iloc[0]
    above = df.index[df["p99_ttft_ms"] > KNEE * base["p99_ttft_ms"]]
    within = f"within {KNEE:g}x the lightest rate's ({base['p99_ttft_ms']:,.0f} ms at " + (
        f"{_at('rate', base['rate'])})"
    )
    if len(above) == 0:
        return f"p99 TTFT stays {within} across every rate swept.", None
    knee, last = df.iloc[int(above[0])], df.iloc[int(above[0]) - 1]
    return (
        f"Latency knees at {_at('rate', knee['rate'])}: p99 TTFT stays {within} up to "
        f"{_at('rate', last['rate'])} and is {knee['p99_ttft_ms']:,.0f} ms at "
        f"{fmt_value(knee['rate'])}.",
        _plain(knee["rate"]),
    )


def _first_overloaded(df: pd.DataFrame) -> tuple[str, object]:
    hit = df[df["overloaded"] == True]  # noqa: E712 (a column of True / False / None)
    if hit.empty:
        return "No rate swept is overloaded (sim.overload in each run's summary.json).", None
    r = hit.iloc[0]
    return (
        f"From {_at('rate', r['rate'])} on the runs are overloaded: {r['served_rate']:.2f} "
        f"req/s served against {r['offered_rate']:.2f} offered.",
        _plain(r["rate"]),
    )


def _throughput_levels(df: pd.DataFrame, load: str) -> tuple[str, object]:
    """A closed loop: the lightest concurrency within FLAT of the most throughput."""
    most = df["request_throughput"].max()
    r = df[df["request_throughput"] >= FLAT * most].iloc[0]
    if r.name == len(df) - 1:
        return (
            f"Request throughput still grows at the highest {load} swept "
            f"({r['request_throughput']:.2f} req/s at {_at(load, r[load])}): sweep higher to "
            "find where it levels off.",
            None,
        )
    return (
        f"Request throughput reaches {r['request_throughput']:.2f} req/s at {_at(load, r[load])}, "
        f"within {1 - FLAT:.0%} of the most swept ({most:.2f} req/s); more {load} beyond it "
        f"adds latency (p99 TTFT {r['p99_ttft_ms']:,.0f} ms there, "
        f"{df['p99_ttft_ms'].iloc[-1]:,.0f} ms at {_at(load, df[load].iloc[-1])}).",
        _plain(r[load]),
    )


def _plain(v):
    return v.item() if hasattr(v, "item") else v
