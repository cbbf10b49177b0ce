"""python -m tools.engine_changelog --engine ENGINE [--releases R ...] [--out DIR] [--cache DIR]
    [--wheels DIR] [--all]
python -m tools.engine_changelog --engine ENGINE --between BEFORE AFTER [--all]
python -m tools.engine_changelog --coverage | --missing [--all] | --remark [--engine ENGINE]

Reads each published release (sim/engines/published.py's PUBLISHED, from the engine's first
release in range) and writes DIR/ENGINE.yaml; with --releases, only those (each diffed with the
published release before it), merged into the existing changelog, printing what changed.
--between diffs two releases directly (however many lie between) and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.engines.versions import release_key
from sim.errors import UserError
from tools.engine_changelog import changes, coverage
from tools.engine_changelog.engines import ROOT, SPECS, modelled_names
from tools.engine_changelog.release import default_cache, release_facts

OUT = ROOT / "sim" / "engines" / "changelogs"
COMMENT = """The changelog of {engine}, release by release, read from each published release itself:
`pip download {package}==<release> --no-deps` (https://pypi.org/project/{package}/), the files
in read_from parsed with Python's ast (nothing imported), each release diffed with the one
before. Facts only: setting names, default values, conditions. modelled: the simulator's rules
set that setting (EngineSettings, the engine's argument names in sim/engines/{engine}.py,
the environment variables sim/ reads). Written by: python -m tools.engine_changelog --engine
{engine} (tools/engine_changelog/); the cache of parsed facts is not committed."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.engine_changelog", description=__doc__)
    parser.add_argument("--engine", choices=sorted(SPECS))
    parser.add_argument("--releases", nargs="+", help="only these releases (default: all)")
    parser.add_argument(
        "--between", nargs=2, metavar=("BEFORE", "AFTER"), help="diff two releases, write nothing"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="changelog folder")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="parsed facts")
    parser.add_argument("--wheels", type=Path, help="read packages from here, not pip")
    parser.add_argument("--all", action="store_true", help="print unmodelled changes too")
    parser.add_argument("--coverage", action="store_true", help="print the coverage table")
    parser.add_argument(
        "--remark", action="store_true", help="redo the modelled marks from sim/ (no download)"
    )
    parser.add_argument(
        "--missing", action="store_true", help="releases with modelled changes and no rule set"
    )
    args = parser.parse_args(argv)
    try:
        if args.coverage:
            print(coverage.table(args.out))
        elif args.remark:  # the marks and PRs, from sim/ and prs.yaml
            for engine in [args.engine] if args.engine else sorted(SPECS):
                remark(args.out / f"{engine}.yaml", engine)
        elif args.missing:
            for engine, release, names in coverage.without_rule_set(args.out):
                print(f"{engine} {release}: {', '.join(names)}")
                if args.all:
                    entry = changes.read_changelog(args.out / f"{engine}.yaml")["releases"]
                    for c in entry[release]["changes"]:
                        if c["modelled"]:
                            _line(c)
        elif args.engine and args.between:
            between(args)
        elif args.engine:
            run(args)
        else:
            parser.error("give --engine, --coverage or --missing")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def run(args) -> None:
    spec = SPECS[args.engine]
    published = coverage.in_range(spec.engine)
    for release in args.releases or ():
        _check_published(spec, release, published)
    path = args.out / f"{spec.engine}.yaml"
    log = changes.read_changelog(path) if args.releases else {}
    releases, unread = dict(log.get("releases") or {}), dict(log.get("unread") or {})
    modelled, names = modelled_names(spec.engine), _names(spec.engine)
    prs = _prs(args.out, spec.engine)
    previous = None  # the facts of the last release read, in a full run
    for release in sorted(args.releases or published, key=release_key):
        try:
            facts = release_facts(spec, release, args.cache, args.wheels)
        except UserError as err:
            if args.releases:
                raise
            unread[release] = str(err)
            releases.pop(release, None)
            print(f"{spec.engine} {release}: unread: {err}", file=sys.stderr)
            continue
        if args.releases:
            index = published.index(release)
            before = published[index - 1] if index else None
            previous = before and release_facts(spec, before, args.cache, args.wheels)
        found = previous and changes.diff(previous, facts, modelled, names)
        changes.attach_prs(found or [], prs.get(release) or {})
        releases[release] = changes.release_entry(facts, found, previous and previous["release"])
        unread.pop(release, None)
        _print(spec.engine, release, previous, found or [], args.all)
        previous = facts
    header = {"engine": spec.engine, "package": spec.package, "first": spec.first}
    text = COMMENT.format(engine=spec.engine, package=spec.package)
    changes.write_changelog(path, header, releases, unread, text)
    print(f"wrote {path} ({len(releases)} releases read, {len(unread)} unread)")


def between(args) -> None:
    """What changed from one release to another, however many releases lie between."""
    spec = SPECS[args.engine]
    published = coverage.in_range(spec.engine)
    for release in args.between:
        _check_published(spec, release, published)
    before, after = (release_facts(spec, r, args.cache, args.wheels) for r in args.between)
    found = changes.diff(before, after, modelled_names(spec.engine), _names(spec.engine))
    _print(spec.engine, args.between[1], before, found, args.all)


def _check_published(spec, release: str, published: list[str]) -> None:
    if release not in published:
        raise UserError(
            f"{spec.engine} {release} is not a published release from {spec.first} on "
            f"(sim/engines/published.py's PUBLISHED; add a new release there first): "
            f"known {published[0]} .. {published[-1]}"
        )


def remark(path: Path, engine: str) -> None:
    """The changelog's modelled marks and kinds from the simulator's names now."""
    log = changes.read_changelog(path)
    if not log:
        raise UserError(f"no changelog at {path}: run --engine {engine} first")
    modelled, names, prs = modelled_names(engine), _names(engine), _prs(path.parent, engine)
    for release, entry in (log["releases"] or {}).items():
        changes.mark(entry["changes"], modelled, names)
        changes.attach_prs(entry["changes"], prs.get(release) or {})
        if entry["compared_with"] is not None:
            entry["modelled_change"] = any(c["modelled"] for c in entry["changes"])
    header = {k: log[k] for k in ("engine", "package", "first")}
    text = COMMENT.format(engine=engine, package=log["package"])
    changes.write_changelog(path, header, log["releases"] or {}, log["unread"] or {}, text)
    print(f"remarked {path}")


def _prs(folder: Path, engine: str) -> dict:
    """release -> {setting: PR} from prs.yaml beside the changelogs (OUT's when not there)."""
    path = folder / "prs.yaml" if (folder / "prs.yaml").exists() else OUT / "prs.yaml"
    return (changes.read_changelog(path) or {}).get(engine) or {}


def _names(engine: str) -> dict:
    from sim.engines import resolve  # here: only a run needs the rule modules

    return getattr(resolve.ENGINES[engine], "NAMES", {})


def _print(engine: str, release: str, previous: dict | None, found: list, every: bool) -> None:
    if previous is None:
        print(f"{engine} {release}: read (the first: nothing to compare)")
        return
    shown = [c for c in found if c["modelled"] or every]
    print(
        f"{engine} {release} (vs {previous['release']}): {len(found)} changes, "
        f"{sum(c['modelled'] for c in found)} modelled"
    )
    for c in shown:
        _line(c)


def _line(c: dict) -> None:
    mark = "*" if c["modelled"] else " "
    print(f" {mark} {c['kind']:<10} {c['setting']} [{c['where']}]: {c['before']!r} -> "
          f"{c['after']!r} ({c['file']})")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
