"""One release's facts: its package downloaded (or found in a folder of wheels), the files of
engines.EngineSpec read from it, the package deleted, the facts cached as JSON.

The cache (default ~/.cache/sim/engine_changelog/<engine>/<release>.json, or --cache DIR) is not
committed; a rerun reads only releases it does not hold, or whose facts an older version of
the extractor wrote (FACTS_VERSION).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from fnmatch import fnmatch
from pathlib import Path

from sim.errors import UserError
from tools.engine_changelog.engines import EngineSpec, watched_names
from tools.engine_changelog.extract import file_facts

FACTS_VERSION = 2


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sim" / "engine_changelog"


def release_facts(spec: EngineSpec, release: str, cache: Path, wheels: Path | None) -> dict:
    """The cached facts of `release`, reading its package when the cache lacks them."""
    path = cache / spec.engine / f"{release}.json"
    if path.exists():
        facts = json.loads(path.read_text())
        if facts.get("version") == FACTS_VERSION and facts.get("spec") == fingerprint(spec):
            return facts
    with tempfile.TemporaryDirectory(prefix="changelog-") as tmp:
        archive = _local(spec, release, wheels) if wheels else _download(spec, release, tmp)
        facts = archive_facts(spec, release, archive)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(facts, indent=1, sort_keys=True))
    return facts


def fingerprint(spec: EngineSpec) -> str:
    """What the facts were read with: a changed file list or class set re-reads that engine's
    releases only. (The watched names are those sim/ held when a release was read: a derived
    rule of a name added since is read after deleting the engine's cache folder.)"""
    what = (spec.files, sorted(spec.classes), spec.rules, spec.returns, spec.extra_watch)
    return hashlib.sha1(repr(what).encode()).hexdigest()[:12]


def _download(spec: EngineSpec, release: str, into: str) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", f"{spec.package}=={release}", "--no-deps"]
    cmd += ["--only-binary", ":all:", "--no-cache-dir", "-d", into, "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    found = list(Path(into).iterdir())
    if done.returncode or not found:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")] or [
            (done.stderr.strip().splitlines() or ["no output"])[-1]
        ]
        raise UserError(
            f"{spec.engine} {release}: `pip download {spec.package}=={release} --no-deps` "
            f"found no wheel ({lines[-1].strip()}); {spec.unread_why or 'is the index reachable?'}"
        )
    return found[0]


def _local(spec: EngineSpec, release: str, wheels: Path) -> Path:
    stem = re.sub(r"[-_.]+", "_", spec.package)
    for pattern in (f"{stem}-{release}-*.whl", f"{stem}-{release}.tar.gz"):
        found = sorted(wheels.glob(pattern))
        if found:
            return found[0]
    raise UserError(f"{spec.engine} {release}: no {stem}-{release}-*.whl in {wheels}")


def archive_facts(spec: EngineSpec, release: str, archive: Path) -> dict:
    """The facts of the spec's files in a wheel (zip) or sdist (tar.gz)."""
    sources = dict(_members(spec, archive))
    if not sources:
        raise UserError(
            f"{spec.engine} {release}: {archive.name} holds none of {', '.join(spec.files)}"
        )
    watch = watched_names(spec)
    facts = {"version": FACTS_VERSION, "spec": fingerprint(spec), "release": release}
    facts["archive"] = archive.name
    facts |= {"read_from": sorted(sources), "defaults": {}, "env": {}, "rules": {}}
    for name in sorted(sources):
        rules = any(fnmatch(name, p) for p in spec.rules)
        try:
            found = file_facts(sources[name], spec.classes, watch, spec.returns, rules)
        except SyntaxError as err:
            raise UserError(f"{spec.engine} {release}: {name} does not parse: {err}") from err
        for kind in ("defaults", "env"):
            for key, value in found[kind].items():
                facts[kind].setdefault(key, {"value": value, "file": name})
        for setting, rules_found in found["rules"].items():
            for key, value in rules_found.items():
                facts["rules"].setdefault(setting, {})[key] = {"value": value, "file": name}
    resolve_references(facts["defaults"])
    return facts


def resolve_references(defaults: dict) -> None:
    """A default that names another class's field (EngineArgs.max_num_seqs =
    SchedulerConfig.max_num_seqs) takes that field's value."""
    for _ in range(3):
        for fact in defaults.values():
            target = defaults.get(fact["value"])
            if target is not None and target is not fact:
                fact["value"] = target["value"]


def _members(spec: EngineSpec, archive: Path):
    """(package-relative path, source text) of each wanted file."""
    top = spec.files[0].split("/")[0] + "/"
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if _wanted(spec, name):
                    yield name, zf.read(name).decode("utf-8", "replace")
        return
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            cut = member.name.find("/" + top)
            name = member.name[cut + 1 :] if cut >= 0 else member.name
            if member.isfile() and _wanted(spec, name):
                yield name, tf.extractfile(member).read().decode("utf-8", "replace")


def _wanted(spec: EngineSpec, name: str) -> bool:
    return name.endswith(".py") and any(fnmatch(name, p) for p in spec.files)
