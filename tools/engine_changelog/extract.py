"""The facts of one engine source file, read with `ast` (never imported or executed).

Three kinds of fact, each a flat mapping of strings so that two releases compare key by key:
- defaults: "Class.field" -> the default's expression (dataclass and pydantic fields with their
  `field(default=...)` / `Field(default=...)`, `__init__` keyword defaults, and `self.x = value`
  at the top of `__init__`);
- env: "NAME" -> the default of an engine environment variable read with os.getenv,
  os.environ.get, get_bool_env_var and the like, or declared as a class attribute
  (`SGLANG_X = EnvBool(False)`);
- rules: "setting" -> {"Func.qualname | cond1 | cond2": value}: each assignment to a watched
  setting (or a name ending in `_<setting>`), under the chain of `if` tests that leads to it
  (`not (test)` on an else branch), and each return of a selector function.
Values and conditions are `ast.unparse` text, shortened to MAX_TEXT characters; a value that
names a module-level constant of the same file (DEFAULT_MAX_NUM_SEQS = 128) is that constant.
"""

from __future__ import annotations

import ast
import re

from tools.engine_changelog.engines import ENV_RE

MAX_TEXT = 160
ENV_READERS = {"getenv", "get", "get_bool_env_var", "get_int_env_var", "get_env", "getenv_bool"}
FIELD_CALLS = {"field", "Field", "PrivateAttr"}


def text(node: ast.AST | None) -> str:
    if node is None:
        return "None"
    out = re.sub(r"\s+", " ", ast.unparse(node))
    return out if len(out) <= MAX_TEXT else out[: MAX_TEXT - 3] + "..."


def file_facts(
    source: str,
    classes: frozenset[str] = frozenset(),
    watch: frozenset[str] = frozenset(),
    returns: tuple[tuple[str, str], ...] = (),
    rules: bool = True,
) -> dict:
    """{"defaults": {...}, "env": {...}, "rules": {...}} of one file's source text."""
    tree = ast.parse(source)
    facts = {"defaults": defaults(tree, classes), "env": env_flags(tree), "rules": {}}
    if rules:
        visitor = _Rules(watch, [(re.compile(p), s) for p, s in returns])
        visitor.visit(tree)
        facts["rules"] = visitor.found
    consts = constants(tree)  # DEFAULT_MAX_NUM_SEQS -> 128: the value, not the name
    facts["defaults"] = {k: consts.get(v, v) for k, v in facts["defaults"].items()}
    for found in facts["rules"].values():
        found.update({k: consts.get(v, v) for k, v in found.items()})
    return facts


def constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = literal assignments (upper-case names)."""
    out = {}
    for stmt in tree.body:
        name, value = _field(stmt)
        if name and name.isupper() and value is not None:
            try:
                ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            out[name] = text(value)
    return out


def defaults(tree: ast.Module, classes: frozenset[str]) -> dict[str, str]:
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or node.name not in classes:
            continue
        for stmt in node.body:
            name, value = _field(stmt)
            if name and not name.startswith("_"):
                out[f"{node.name}.{name}"] = _default(value)
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                out.update({f"{node.name}.{k}": v for k, v in _init_defaults(stmt).items()})
    return out


def _field(stmt: ast.stmt) -> tuple[str | None, ast.AST | None]:
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value  # a field without a default: value None -> "required"
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
    ):
        return stmt.targets[0].id, stmt.value
    return None, None


def _default(value: ast.AST | None) -> str:
    """The default a field declares: `field(default=x)` -> x; `Field(x, ...)` -> x;
    `field(default_factory=f)` -> "factory: f"; none -> "required"."""
    if value is None:
        return "required"
    if isinstance(value, ast.Call) and _call_name(value) in FIELD_CALLS:
        kw = {k.arg: k.value for k in value.keywords}
        if "default" in kw:
            return text(kw["default"])
        if "default_factory" in kw:
            return "factory: " + text(kw["default_factory"])
        return text(value.args[0]) if value.args else "required"
    if isinstance(value, ast.Call) and _call_name(value) == "get_field" and len(value.args) == 2:
        cls, name = value.args
        if isinstance(name, ast.Constant):
            return f"{text(cls)}.{name.value}"  # a reference: release.resolve_references
    return text(value)


def _init_defaults(fn: ast.FunctionDef) -> dict[str, str]:
    out = {}
    args = fn.args.args[len(fn.args.args) - len(fn.args.defaults) :]
    for arg, value in zip(args, fn.args.defaults, strict=True):
        out[arg.arg] = text(value)
    for arg, value in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
        if value is not None:
            out[arg.arg] = text(value)
    for stmt in fn.body:  # self.x = <not an argument>, unconditionally
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target = stmt.targets[0]
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and not target.attr.startswith("_")
            and target.attr not in out
            and not isinstance(stmt.value, ast.Name)
        ):
            out[target.attr] = text(stmt.value)
    return out


def env_flags(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in ENV_READERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and ENV_RE.match(str(first.value)):
                kw = {k.arg: k.value for k in node.keywords}
                default = node.args[1] if len(node.args) > 1 else kw.get("default")
                out.setdefault(first.value, text(default))
        name, value = _field(node) if isinstance(node, ast.stmt) else (None, None)
        if name and ENV_RE.match(name) and isinstance(value, ast.Call) and value.args:
            out.setdefault(name, text(value.args[0]))  # class Envs: SGLANG_X = EnvBool(False)
    return out


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


class _Rules(ast.NodeVisitor):
    """Watched settings' assignments and selector returns, under their if-conditions."""

    def __init__(self, watch: frozenset[str], returns: list[tuple[re.Pattern, str]]):
        self.watch = watch
        self.returns = returns
        self.where: list[str] = []
        self.functions = 0  # how many functions enclose the node: only their bodies hold rules
        self.conds: list[str] = []
        self.found: dict[str, dict[str, str]] = {}

    def _scoped(self, node, name: str):
        saved = self.conds
        self.where.append(name)
        self.conds = []
        self.generic_visit(node)
        self.where.pop()
        self.conds = saved

    def visit_ClassDef(self, node):
        self._scoped(node, node.name)

    def visit_FunctionDef(self, node):
        self.functions += 1
        self._scoped(node, node.name)
        self.functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node):
        test = text(node.test)
        self.visit(node.test)
        for branch, cond in ((node.body, test), (node.orelse, f"not ({test})")):
            self.conds.append(cond)
            for stmt in branch:
                self.visit(stmt)
            self.conds.pop()

    def _record(self, setting: str, value: ast.AST | None, target: str):
        key = " | ".join([".".join(self.where) or "<module>", *self.conds])
        shown = text(value) if target == setting else f"{target} = {text(value)}"
        self.found.setdefault(setting, {})[key] = shown

    def _target(self, target: ast.AST, value: ast.AST | None):
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
        if isinstance(target, ast.Subscript):
            return self._target(target.value, value)
        setting = self._watched(name)
        if setting is None or not self.functions:
            return
        if isinstance(value, (ast.Name, ast.Attribute)) and self._watched(_last(value)):
            return  # a pass-through: x = self.x
        self._record(setting, value, name)

    def _watched(self, name: str | None) -> str | None:
        if not name:
            return None
        if name in self.watch:
            return name
        ends = [w for w in self.watch if len(w) >= 8 and name.endswith("_" + w)]
        return max(ends, key=len) if ends else None

    def visit_Assign(self, node):
        for target in node.targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                self._target(t, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self._target(node.target, node.value)

    def visit_AugAssign(self, node):
        self._target(node.target, node)

    def visit_Return(self, node):
        name = self.where[-1] if self.where else ""
        for pattern, setting in self.returns:
            if node.value is not None and pattern.search(name):
                self._record(setting, node.value, setting)


def _last(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
