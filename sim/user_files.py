"""Reading the files users give: one way in, with bounds, so a hostile file costs one line.

Traces, lengths files, case files, GPU files, the link catalogue, model configs, bench
results, the importers' inputs and kernel tables all come through here:

    file_problem(path)      why `path` cannot be read as a file (missing, a directory, a
                            FIFO, a loop of symbolic links, ...) or None; it never opens it
                            (a FIFO would block the run); require_file raises it
    read_text(path)         a whole text file, refused by size before it is read
                            (CONFIG_BYTES, or RESULTS_BYTES for measured results), at its
                            first NUL byte (a sparse file of zeros) and if not UTF-8
    load_json, load_yaml    one whole document: a key twice in a mapping refused; YAML aliases
                            repeat at most ALIAS_EXPANSION values and characters (an alias bomb
                            costs one line, not the machine) and never hold themselves; YAML
                            1.2 floats (4e0, 1e308) are numbers, as OmegaConf reads them
    json_value(text)        one JSON document (a JSONL line), by the same rules
    json_rows(path)         a JSONL file's objects, read line by line through guarded()
    guarded(path)           a binary stream read as it goes (JSONL, CSV through pandas): a NUL
                            byte or a line over LINE_BYTES ends it; binary(path) a file a
                            reader takes whole (parquet), bounded by size
    refuse_duplicate_columns(path)   a CSV header naming a column twice
    yaml_text(data)         YAML that load_yaml reads back to `data`

Every problem is a UserError naming the file.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import yaml

from sim.errors import UserError, shown

CONFIG_BYTES = 16 * 2**20  # GPU files, case files, model configs, the link catalogue
RESULTS_BYTES = 256 * 2**20  # measured results read whole: bench JSON, GuideLLM, kernel tables
LINE_BYTES = 16 * 2**20  # one line of a file read as it goes (a JSONL row, a CSV row)
ALIAS_EXPANSION = 1_000_000  # values and characters YAML aliases may repeat in one document
_SNIFF_BYTES = 64 * 2**10  # read first: a sparse file is refused after this much
_BLOCK_BYTES = 2**20  # the most a guarded stream reads at once


def file_problem(path: str | Path) -> str | None:
    """Why `path` is not a readable regular file ('does not exist', 'is a directory', ...), or
    None. Follows symbolic links; never opens the file."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        return _os_problem(exc)
    return _kind_problem(info.st_mode)


def require_file(path: str | Path, label: str, missing: str = "") -> None:
    """UserError `{label} {problem}` when `path` is not a readable regular file; `missing` is
    added when it does not exist (where to look for it)."""
    problem = file_problem(path)
    if problem is not None:
        raise UserError(f"{label} {problem}{missing if problem == _MISSING else ''}")


def read_text(path: str | Path, noun: str = "file", limit: int = CONFIG_BYTES) -> str:
    """The whole of a UTF-8 text file of at most `limit` bytes (`noun` names it in errors:
    'save the {noun} as UTF-8')."""
    path = Path(path)
    with _open(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise UserError(_too_big(path, size, limit, noun))
        data = fh.read(_SNIFF_BYTES)
        _refuse_nul(path, data, 0)
        data += fh.read(limit + 1 - len(data))  # a file that grew: at most one byte past
    if len(data) > limit:
        raise UserError(_too_big(path, len(data), limit, noun))
    _refuse_nul(path, data, 0)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the {noun} as UTF-8") from None


def load_json(
    path: str | Path, noun: str = "file", limit: int = CONFIG_BYTES, kind: str = "valid JSON"
):
    """A whole JSON file (read_text's bounds); an error says 'not {kind} (why)'."""
    return json_value(read_text(path, noun, limit), path, kind=kind)


def json_value(text: str, path: str | Path, lineno: int = 0, kind: str = "valid JSON"):
    """One JSON document read from `path` (`lineno`: its line in a JSONL file; 0: the whole
    file). NaN and Infinity load as floats (the parsers check their numbers); a key given
    twice in one object is refused."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        where, why = f"{path}:{lineno or exc.lineno}", exc.msg
    except _DuplicateKey as exc:
        where, why = f"{path}{f':{lineno}' if lineno else ''}", exc.args[0]
    except ValueError:  # an integer of thousands of digits
        where, why = f"{path}{f':{lineno}' if lineno else ''}", "a number too long"
    except RecursionError:
        where, why = f"{path}{f':{lineno}' if lineno else ''}", "nested too deeply"
    raise UserError(f"{where}: not {kind} ({why})")


def load_yaml(path: str | Path, noun: str = "file", limit: int = CONFIG_BYTES):
    """A whole YAML file (read_text's bounds), one document, with _Loader's rules."""
    text = read_text(path, noun, limit)
    loader = None
    try:
        loader = _Loader(text)  # (its reader refuses control characters here)
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        why = shown(exc.problem or exc.context or exc.__class__.__name__, 100, text=True)
        raise UserError(f"{where}: not valid YAML ({why})") from None
    except yaml.reader.ReaderError as exc:
        raise UserError(f"{path}: not valid YAML (character #x{exc.character:04x})") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    except RecursionError:
        raise UserError(f"{path}: not valid YAML (nested too deeply)") from None
    except _AliasBomb as exc:
        raise UserError(f"{path}: {exc.args[0]}") from None
    finally:
        if loader is not None:
            loader.dispose()


def yaml_text(data) -> str:
    """`data` as YAML that load_yaml reads back to the same values (text such as '4e0' is
    quoted, since it reads as a number here)."""
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        width=100,
        allow_unicode=True,
        default_flow_style=False,
    )


def json_rows(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSONL file, read as it goes."""
    path = Path(path)
    try:
        with guarded(path, "JSONL file") as raw, io.TextIOWrapper(raw, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    row = json_value(line, path, lineno)
                    if not isinstance(row, dict):
                        raise UserError(f"{path}:{lineno}: expected a JSON object per line")
                    yield lineno, row
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the file as UTF-8") from None


def guarded(path: str | Path, noun: str = "file", limit: int | None = None) -> io.BufferedReader:
    """`path` opened for reading as it goes: reading past a NUL byte or a line longer than
    LINE_BYTES raises a UserError; with `limit`, a file of more bytes is refused (a table
    pandas reads whole)."""
    path = Path(path)
    file = _open(path) if limit is None else binary(path, noun, limit)
    return io.BufferedReader(_Guard(file, path, noun))


def binary(path: str | Path, noun: str = "file", limit: int = RESULTS_BYTES) -> io.FileIO:
    """`path` opened for a reader that takes it whole (a parquet table): refused unless it is
    a regular file of at most `limit` bytes."""
    path = Path(path)
    file = _open(path)
    size = os.fstat(file.fileno()).st_size
    if size > limit:
        file.close()
        raise UserError(_too_big(path, size, limit, noun))
    return file


def refuse_duplicate_columns(path: str | Path) -> None:
    """UserError when a CSV's header names a column twice: pandas would read the first and
    rename the second (`X.1`), silently."""
    path = Path(path)
    try:
        with guarded(path, "CSV") as raw, io.TextIOWrapper(raw, encoding="utf-8-sig") as fh:
            header = next(csv.reader([fh.readline()]), [])
    except (UnicodeDecodeError, csv.Error):
        return  # the CSV reader says what is wrong with it
    seen: set[str] = set()
    for name in header:
        if name in seen and name.strip():
            raise UserError(f"{path}: the column {shown(name)} appears twice in the header")
        seen.add(name)


# ---- files ---------------------------------------------------------------------------------------
_MISSING = "does not exist"
_ERRNO_PROBLEMS = {
    "ENOENT": _MISSING,
    "ENOTDIR": _MISSING,
    "ELOOP": "is a loop of symbolic links",
    "ENAMETOOLONG": "has a name too long for the file system",
    "EACCES": "cannot be read (permission denied)",
}
_KINDS = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISFIFO, "is not a regular file (a FIFO)"),
    (stat.S_ISSOCK, "is not a regular file (a socket)"),
    (stat.S_ISCHR, "is not a regular file (a character device)"),
    (stat.S_ISBLK, "is not a regular file (a block device)"),
)


def _os_problem(exc: Exception) -> str:
    if isinstance(exc, ValueError):  # a NUL character in the name
        return "is not a valid path"
    problem = _ERRNO_PROBLEMS.get(errno.errorcode.get(getattr(exc, "errno", None) or 0, ""))
    return problem or f"cannot be read ({getattr(exc, 'strerror', None) or type(exc).__name__})"


def _kind_problem(mode: int) -> str | None:
    for test, problem in _KINDS:
        if test(mode):
            return problem
    return None if stat.S_ISREG(mode) else "is not a regular file"


def _open(path: Path) -> io.FileIO:
    """`path` opened without blocking (a FIFO would wait for a writer), refused unless it is
    a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} {_os_problem(exc)}") from None
    problem = _kind_problem(os.fstat(fd).st_mode)
    if problem is not None:
        os.close(fd)
        raise UserError(f"{path} {problem}")
    return io.FileIO(fd, "rb", closefd=True)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def _too_big(path: Path, size: int, limit: int, noun: str) -> str:
    return (
        f"{path}: {_size(size)}, more than the {_size(limit)} a {noun} may be (it is read "
        "whole); check the path, or split the file"
    )


def _refuse_nul(path: Path, data: bytes, offset: int) -> None:
    at = data.find(b"\0")
    if at >= 0:
        raise UserError(
            f"{path}: a NUL byte at byte {offset + at:,}: not a text file (binary, or a sparse "
            "file of zeros)"
        )


class _Guard(io.RawIOBase):
    """A file read through blocks of at most _BLOCK_BYTES, each checked for NUL bytes and for
    a line running on past LINE_BYTES."""

    def __init__(self, file: io.FileIO, path: Path, noun: str):
        self._file, self._path, self._noun = file, path, noun
        self._offset = 0  # bytes read so far
        self._line_start = 0  # where the line being read began

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")[:_BLOCK_BYTES]
        n = self._file.readinto(view)
        if not n:
            return n
        block = view[:n].tobytes()
        _refuse_nul(self._path, block, self._offset)
        end = max(block.rfind(b"\n"), block.rfind(b"\r"))
        if end >= 0:
            self._line_start = self._offset + end + 1
        self._offset += n
        if self._offset - self._line_start > LINE_BYTES:
            raise UserError(
                f"{self._path}: a line longer than {_size(LINE_BYTES)} from byte "
                f"{self._line_start:,}; not a {self._noun} of one row per line"
            )
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


# ---- JSON ----------------------------------------------------------------------------------------
class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _DuplicateKey(f"the key {shown(twice, 60)} appears twice in one object")
    return out


# ---- YAML ----------------------------------------------------------------------------------------
# YAML 1.2's floats that YAML 1.1 (PyYAML) reads as text: an exponent without a dot or
# without a sign (4e0, 1e308, 1.5e3)
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")
_FLOAT_FIRST = list("-+0123456789.")
_MERGE = "tag:yaml.org,2002:merge"


class _AliasBomb(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, a key twice refused, and aliases bounded: each alias
    repeats its anchor, so a few lines of nested aliases stand for billions of values
    (PyYAML shares them, but a message quoting one, or a file written from it, has them
    all)."""

    def compose_document(self):
        node = super().compose_document()
        _checked(node)
        return node


class _Dumper(yaml.SafeDumper):
    pass


for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, _FLOAT_FIRST)


def _checked(root: yaml.Node) -> None:
    """Refuses a key twice in one mapping (ConstructorError), an alias inside its own anchor,
    and aliases that repeat more than ALIAS_EXPANSION values and characters (_AliasBomb). A
    node weighs 1 plus its text's length, plus its children; an alias weighs its anchor."""
    weight: dict[int, int] = {}
    own = 0
    open_nodes: set[int] = set()

    def visit(node: yaml.Node) -> int:
        nonlocal own
        if id(node) in weight:
            return weight[id(node)]
        if id(node) in open_nodes:
            raise _AliasBomb("a YAML alias inside its own anchor (a structure that holds itself)")
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, yaml.ScalarNode):
            total += len(node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(visit(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            _unique_scalar_keys(node)
            total += sum(visit(k) + visit(v) for k, v in node.value)
        open_nodes.discard(id(node))
        own += 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
        weight[id(node)] = total
        return total

    repeated = visit(root) - own
    if repeated > ALIAS_EXPANSION:
        raise _AliasBomb(
            f"its YAML aliases repeat {repeated:,} values and characters, more than the "
            f"{ALIAS_EXPANSION:,} allowed (an alias bomb?); write the repeated parts out"
        )


def _unique_scalar_keys(node: yaml.MappingNode) -> None:
    """A key written twice in one mapping (merged keys `<<` may be overridden: not checked)."""
    seen = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE:
            if (key.tag, key.value) in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {shown(key.value, 60)} appears twice", key.start_mark
                )
            seen.add((key.tag, key.value))
