"""The engines' changelogs, read from each published release itself.

`python -m tools.engine_changelog --engine sglang [--releases 0.4.3 0.4.5] [--out DIR]`
downloads each release's package (`pip download <pkg>==<ver> --no-deps`), reads only the files
that hold its defaults and derived settings with `ast` (nothing is imported or executed), keeps
the facts in a per-release JSON cache, diffs consecutive releases and writes
sim/engines/changelogs/<engine>.yaml: release -> {read_from, changes: [{setting, before, after,
kind, file, modelled, source, ...}]}. `--coverage` prints docs/engines.md's coverage table.

Modules: engines (what to read per engine, and which names the simulator models), extract (the
AST facts of one file), release (download, open, cache), changes (the diff and the changelog
file), coverage (the markdown table), __main__ (the command line).
"""
