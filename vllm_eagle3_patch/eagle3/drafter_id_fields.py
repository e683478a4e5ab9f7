"""Which fields of a drafter's config a vLLM runner reads the EAGLE-3 aux layer ids from, read by structure.

Before it asks the target for its default ids, the runner (V1's ``v1/worker/gpu_model_runner.py``, V2's
``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py``) looks in the drafter's ``hf_config``.  Up to 0.19.x that is
only ``eagle_aux_hidden_state_layer_ids``; later releases also read nested dicts (``dflash_config``,
``eagle_config``) and DFlash/DSpark fields, adding 1 to some of them (those drafters name the layer whose output
they take, vLLM the layer whose input it hands over).  Which fields, in what order and with what shift changes
from release to release and differs between the two runners of one release, so rather than keep a table this
reads the function that does it, with :mod:`ast`, never importing vLLM.

The function is the first whose own body reads ``eagle_aux_hidden_state_layer_ids``.  Its statements are
interpreted in order over a small abstract domain: a local holds the drafter config (or a value read from it, such
as a nested dict), or an ordered list of candidate id fields.  ``if not ids:`` appends what its body finds after
what is already there; ``if <source is there>:`` lets what its body assigns take precedence; a loop over constant
names expands to one read per name; a test that compares something (``model_type == ...``) may only change the
shift of one field.  Anything else that touches ids makes :func:`id_fields` answer None: the caller reports
"unknown" rather than a guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional, Union

from .release import DRAFTER_IDS_FIELD

ID_SUFFIX = "layer_ids"
"""Only fields whose name ends so hold ids; any other field read from the config is a value (a dict, a type)."""

Path = tuple[str, ...]


@dataclass(frozen=True)
class IdField:
    """One place of the drafter's config the runner takes ids from, and what it does to them."""

    path: tuple[str, ...]
    """``("eagle_aux_hidden_state_layer_ids",)`` at the top level; ``("eagle_config", "...")`` in a nested dict."""
    shift: int = 0
    """What vLLM adds to each id read there (1: the drafter names layer outputs, vLLM layer inputs)."""
    unless: Optional[str] = None
    """A condition (source text) under which the shift is not applied, e.g. a ``model_type`` comparison."""

    @property
    def name(self) -> str:
        """``dflash_config.target_layer_ids``: how a message names the field."""
        return ".".join(self.path)


def id_fields(source: str) -> Optional[tuple[IdField, ...]]:
    """The drafter-config fields the file's id-reading function reads, first match first; () where the file
    reads none; None where it reads ids in a way this reader cannot follow."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    function = _reading_function(tree)
    if function is None:
        return ()
    config = _config_of(function)
    if config is None:
        return None
    try:
        return _Reader(config, source).read(function)
    except _CannotFollow:
        return None


class _CannotFollow(Exception):
    """The function reads ids in a way the interpreter below does not model."""


@dataclass(frozen=True)
class _Config:
    """The drafter's config (path ``()``), or a value read from it that holds no ids (a nested dict)."""

    path: Path


@dataclass(frozen=True)
class _Ids:
    """Ids from the first of these fields the drafter sets (``()``: none, e.g. ``None``)."""

    fields: tuple[IdField, ...]


@dataclass(frozen=True)
class _Str:
    """A name a loop binds to a constant, e.g. ``config_name`` in ``for config_name in ("dflash_config", ...)``."""

    text: str


@dataclass(frozen=True)
class _Opaque:
    """Not from the drafter's config: ``self``, the speculative config, a builtin."""


@dataclass(frozen=True)
class _Unknown:
    """From the drafter's config, in a way not modelled: harmless unless it reaches a test or the result."""


_Value = Union[_Config, _Ids, _Str, _Opaque, _Unknown]
_OPAQUE = _Opaque()
_UNKNOWN = _Unknown()
_EMPTY = _Ids(())
_NEGATED: dict[type, str] = {ast.Eq: "!=", ast.NotEq: "==", ast.In: "not in", ast.NotIn: "in"}


@dataclass(frozen=True)
class _Test:
    """What an ``if`` test asks: ``irrelevant`` (nothing of the config), ``absent`` (``not ids``), ``absence``
    (``not hasattr(...)``), ``present`` (sources there), or ``condition`` (anything else, e.g. a comparison)."""

    kind: str
    subject: Optional[str] = None
    prefixes: tuple[Path, ...] = ()
    id_names: frozenset[str] = frozenset()


@dataclass
class _Loop:
    """The id locals a ``if ids: break`` of the loop being read stops on."""

    breaks_on: set[str] = field(default_factory=set)


Env = dict[str, _Value]


class _Reader:
    """Interprets one function's statements in order (see the module's docstring)."""

    def __init__(self, config: ast.expr, source: str) -> None:
        self.config_dump = ast.dump(config)
        self.config_name = config.id if isinstance(config, ast.Name) else None
        self.source = source
        self.result: list[IdField] = []
        self.produced: list[Path] = []
        """Every id field read, in order: a gate constrains only the ones first read after it."""
        self.gates: list[tuple[int, tuple[Path, ...]]] = []

    def read(self, function: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> tuple[IdField, ...]:
        env: Env = {self.config_name: _Config(())} if self.config_name else {}
        self._block(function.body, env, top=True, loop=None)
        if not self.result:
            raise _CannotFollow  # it reads the field but hands back no ids this reader can see
        for start, prefixes in self.gates:
            earlier = set(self.produced[:start])
            for found in self.result:
                if found.path not in earlier and not any(found.path[: len(p)] == p for p in prefixes):
                    raise _CannotFollow  # read only once another field is there: not a precedence
        return tuple(self.result)

    # statements

    def _block(self, statements: list[ast.stmt], env: Env, top: bool, loop: Optional[_Loop]) -> bool:
        """Interpret ``statements``; True where they end in an unconditional return."""
        for index, statement in enumerate(statements):
            if isinstance(statement, ast.If) and _is_break_if(statement):
                stopped_on = self._break_subject(statement.test, env, loop)
                self._absent(stopped_on, statements[index + 1 :], env, loop)  # the rest runs while it is empty
                return False
            if self._statement(statement, env, top, loop):
                return True
        return False

    def _statement(self, statement: ast.stmt, env: Env, top: bool, loop: Optional[_Loop]) -> bool:
        if isinstance(statement, ast.Pass) or (
            isinstance(statement, ast.Expr) and (isinstance(statement.value, ast.Constant) or _is_log(statement.value))
        ):
            return False
        if isinstance(statement, (ast.Break, ast.Continue)):
            raise _CannotFollow
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            self._assign(statement, env)
            return False
        if isinstance(statement, ast.Return):
            return self._return(statement.value, env, top)
        if isinstance(statement, ast.If):
            return self._if(statement, env, top, loop)
        if isinstance(statement, ast.For):
            self._for(statement, env)
            return False
        if self._mentions(statement, env):
            raise _CannotFollow
        return False

    def _assign(self, statement: Union[ast.Assign, ast.AnnAssign], env: Env) -> None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if statement.value is None:
            return
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            name, value = targets[0].id, self._eval(statement.value, env)
            if name == self.config_name:
                if value not in (_OPAQUE, _Config(())):
                    raise _CannotFollow
                value = _Config(())
            env[name] = value
        elif self._mentions(statement, env):
            raise _CannotFollow

    def _return(self, value: Optional[ast.expr], env: Env, top: bool) -> bool:
        if not top:
            raise _CannotFollow  # a return inside a branch or loop: not modelled
        if value is None or _is_none(value):
            return True
        returned = self._eval(value, env)
        if not isinstance(returned, _Ids):
            raise _CannotFollow
        self._found(returned.fields)
        return True

    def _if(self, statement: ast.If, env: Env, top: bool, loop: Optional[_Loop]) -> bool:
        test = self._test(statement.test, env)
        body, orelse = statement.body, statement.orelse
        if len(body) == 1 and isinstance(body[0], ast.Return):
            return self._guarded_return(test, body[0], orelse, env, top)
        if test.kind in ("irrelevant", "condition"):
            self._branches(statement, env)
        elif orelse:
            raise _CannotFollow
        elif test.kind == "absent" and test.subject is not None:
            self._absent(test.subject, body, env, loop)
        elif test.kind == "present":
            self._present(body, env, loop)
        else:
            raise _CannotFollow  # ``if not source:`` guarding anything but an early return
        return False

    def _guarded_return(self, test: _Test, body: ast.Return, orelse: list[ast.stmt], env: Env, top: bool) -> bool:
        """``if T: return None`` (a gate) or ``if ids: return tuple(ids)``, at the function's top level."""
        if not top:
            raise _CannotFollow
        if body.value is None or _is_none(body.value):
            if orelse:
                raise _CannotFollow
            if test.kind in ("absent", "absence"):
                self.gates.append((len(self.produced), test.prefixes))
            elif test.kind != "irrelevant":
                raise _CannotFollow
            return False
        returned = self._eval(body.value, env)
        ends = len(orelse) == 1 and isinstance(orelse[0], ast.Return) and _returns_nothing(orelse[0])
        if test.kind != "present" or not isinstance(returned, _Ids) or (orelse and not ends):
            raise _CannotFollow
        self._found(returned.fields)
        return ends

    def _branches(self, statement: ast.If, env: Env) -> None:
        """Both arms of a comparison: they may differ in the shift of a field, nothing else."""
        then_env, else_env = dict(env), dict(env)
        self._block(statement.body, then_env, top=False, loop=None)
        self._block(statement.orelse, else_env, top=False, loop=None)
        text = self._text(statement.test)
        for name in then_env.keys() | else_env.keys():
            then, other = then_env.get(name), else_env.get(name)
            if then == other and then is not None:
                env[name] = then
            elif isinstance(then, _Ids) and isinstance(other, _Ids):
                env[name] = _either(then, other, text, self._negated(statement.test, text))
            else:
                env[name] = _UNKNOWN

    def _absent(self, subject: str, body: list[ast.stmt], env: Env, loop: Optional[_Loop]) -> None:
        """``if not ids:``: what the body finds comes after what ``ids`` holds."""
        inner = dict(env)
        inner[subject] = _EMPTY
        self._block(body, inner, top=False, loop=loop)
        for name, value in inner.items():
            if name != subject and value != env.get(name):
                env[name] = value if name not in env else _UNKNOWN
        before, after = env.get(subject, _EMPTY), inner[subject]
        if isinstance(before, _Ids) and isinstance(after, _Ids):
            env[subject] = _Ids(_first_each(before.fields + after.fields))
        else:
            env[subject] = _UNKNOWN

    def _present(self, body: list[ast.stmt], env: Env, loop: Optional[_Loop]) -> None:
        """``if source:``: ids the body assigns take precedence over what the local held."""
        inner = dict(env)
        self._block(body, inner, top=False, loop=loop)
        for name, value in inner.items():
            before = env.get(name)
            if value == before:
                continue
            if isinstance(value, _Ids) and (before is None or isinstance(before, _Ids)):
                env[name] = _Ids(_first_each(value.fields + (before.fields if before else ())))
            else:
                env[name] = value if before is None else _UNKNOWN

    def _for(self, statement: ast.For, env: Env) -> None:
        """``for name in ("a_config", "b_config"):``: one pass per name; after ``if ids: break``, the later
        names only while nothing was found."""
        names = _constant_strings(statement.iter)
        if not isinstance(statement.target, ast.Name) or names is None or statement.orelse:
            if self._mentions(statement, env):
                raise _CannotFollow
            return
        loop, entry = _Loop(), dict(env)
        for index, name in enumerate(names):
            env[statement.target.id] = _Str(name)
            if index == 0 or not loop.breaks_on:
                self._block(statement.body, env, top=False, loop=loop)
                continue
            if len(loop.breaks_on) != 1:
                raise _CannotFollow
            (subject,) = loop.breaks_on
            if entry.get(subject, _EMPTY) != _EMPTY:
                raise _CannotFollow  # a later name would override ids found before the loop
            self._absent(subject, statement.body, env, loop)

    def _break_subject(self, test: ast.expr, env: Env, loop: Optional[_Loop]) -> str:
        read = self._test(test, env)
        if loop is None or read.kind != "present" or len(read.id_names) != 1:
            raise _CannotFollow
        (subject,) = read.id_names
        loop.breaks_on.add(subject)
        return subject

    def _found(self, fields: tuple[IdField, ...]) -> None:
        self.result = list(_first_each(tuple(self.result) + fields))

    # tests

    def _test(self, test: ast.expr, env: Env) -> _Test:
        if not self._mentions(test, env):
            return _Test("irrelevant")
        if any(isinstance(n, ast.Name) and env.get(n.id) == _UNKNOWN for n in ast.walk(test)):
            raise _CannotFollow
        operand = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else None
        operand = operand or _compared_to_none(test, ast.Is)
        if operand is not None:
            if isinstance(operand, ast.Name) and isinstance(env.get(operand.id), _Ids):
                ids = env[operand.id]
                assert isinstance(ids, _Ids)
                return _Test("absent", operand.id, tuple(f.path for f in ids.fields))
            prefixes = self._presence(operand, env)
            return _Test("absence", prefixes=prefixes) if prefixes is not None else _Test("condition")
        terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        if any(self._presence(term, env) is None for term in terms):
            return _Test("condition")
        id_names = frozenset(
            n.id for n in ast.walk(test) if isinstance(n, ast.Name) and isinstance(env.get(n.id), _Ids)
        )
        return _Test("present", id_names=id_names)

    def _presence(self, term: ast.expr, env: Env) -> Optional[tuple[Path, ...]]:
        """The paths ``term`` asks to be there (``x``, ``isinstance(x, dict)``, ``hasattr(cfg, "k")``,
        ``x is not None``); None where it asks something else."""
        if isinstance(term, ast.Call) and isinstance(term.func, ast.Name) and len(term.args) == 2:
            if term.func.id == "isinstance":
                return self._presence(term.args[0], env)
            if term.func.id == "hasattr":
                owner, key = self._eval(term.args[0], env), _key(term.args[1], env)
                return ((*owner.path, key),) if isinstance(owner, _Config) and key is not None else None
        compared = _compared_to_none(term, ast.IsNot)
        if compared is not None:
            return self._presence(compared, env)
        if not isinstance(term, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            return None
        value = self._eval(term, env)
        if isinstance(value, _Ids):
            return tuple(f.path for f in value.fields)
        return (value.path,) if isinstance(value, _Config) else None

    # expressions

    def _eval(self, node: ast.expr, env: Env) -> _Value:
        if ast.dump(node) == self.config_dump:
            return env.get(self.config_name, _Config(())) if self.config_name else _Config(())
        if isinstance(node, ast.Name):
            return env.get(node.id, _OPAQUE)
        if isinstance(node, ast.Constant):
            if node.value is None:
                return _EMPTY
            return _Str(node.value) if isinstance(node.value, str) else _OPAQUE
        if isinstance(node, (ast.List, ast.Tuple)) and not node.elts:
            return _EMPTY
        if isinstance(node, ast.Dict) and not node.keys:
            return _EMPTY
        if isinstance(node, ast.Attribute):
            return self._read(self._eval(node.value, env), node.attr)
        if isinstance(node, ast.Subscript):
            return self._read(self._eval(node.value, env), _key(node.slice, env))
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            values = [self._eval(v, env) for v in node.values]
            while len(values) > 1 and values[-1] == _EMPTY:
                values.pop()  # ``x or []``
            if len(values) == 1:
                return values[0]
            if all(isinstance(v, _Ids) for v in values):
                return _Ids(_first_each(tuple(f for v in values if isinstance(v, _Ids) for f in v.fields)))
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
            loop = node.generators[0]
            if isinstance(loop.target, ast.Name) and not loop.ifs and not loop.is_async:
                source, shift = self._eval(loop.iter, env), _shift(node.elt, loop.target.id)
                if isinstance(source, _Ids) and shift is not None:
                    return _shifted(source, shift)
        return self._opaque_or_unknown(node, env)

    def _call(self, node: ast.Call, env: Env) -> _Value:
        """``getattr(x, "k"[, None])``, ``x.get("k"[, None])``, ``list(x)``/``tuple(x)``."""
        func, args = node.func, node.args
        if node.keywords:
            return self._opaque_or_unknown(node, env)
        if isinstance(func, ast.Name) and func.id == "getattr" and len(args) in (2, 3):
            if len(args) == 3 and self._eval(args[2], env) != _EMPTY:
                return self._opaque_or_unknown(node, env)
            return self._read(self._eval(args[0], env), _key(args[1], env))
        if isinstance(func, ast.Attribute) and func.attr == "get" and len(args) in (1, 2):
            owner = self._eval(func.value, env)
            if isinstance(owner, _Config) and (len(args) == 1 or self._eval(args[1], env) == _EMPTY):
                return self._read(owner, _key(args[0], env))
        if isinstance(func, ast.Name) and func.id in ("list", "tuple") and len(args) == 1:
            inner = self._eval(args[0], env)
            if isinstance(inner, _Ids):
                return inner
        return self._opaque_or_unknown(node, env)

    def _read(self, owner: _Value, key: Optional[str]) -> _Value:
        if owner == _OPAQUE:
            return _OPAQUE
        if not isinstance(owner, _Config) or key is None:
            return _UNKNOWN
        path = (*owner.path, key)
        if not key.endswith(ID_SUFFIX):
            return _Config(path)
        self.produced.append(path)
        return _Ids((IdField(path),))

    def _opaque_or_unknown(self, node: ast.AST, env: Env) -> _Value:
        return _UNKNOWN if self._mentions(node, env) else _OPAQUE

    def _mentions(self, node: ast.AST, env: Env) -> bool:
        """Whether ``node`` touches the drafter's config, a value from it, or names an id field."""
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and (n.id == self.config_name or env.get(n.id, _OPAQUE) != _OPAQUE):
                return True
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.endswith(ID_SUFFIX):
                return True
            if isinstance(n, ast.Attribute) and (n.attr.endswith(ID_SUFFIX) or ast.dump(n) == self.config_dump):
                return True
        return False

    def _text(self, test: ast.expr) -> str:
        """The test as written where it fits on a line (``ast.unparse`` otherwise)."""
        segment = ast.get_source_segment(self.source, test)
        return segment if segment and "\n" not in segment else ast.unparse(test)

    def _negated(self, test: ast.expr, text: str) -> str:
        """The test's opposite, for an ``else`` arm that drops the shift."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._text(test.operand)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _NEGATED:
            operator = _NEGATED[type(test.ops[0])]
            return f"{self._text(test.left)} {operator} {self._text(test.comparators[0])}"
        return f"not ({text})"


def _either(then: _Ids, other: _Ids, condition: str, negated: str) -> _Value:
    """One list of fields from two arms that differ only where one applies a shift and the other does not."""
    if len(then.fields) != len(other.fields):
        return _UNKNOWN
    fields = []
    for a, b in zip(then.fields, other.fields):
        if a == b:
            fields.append(a)
        elif a.path != b.path or a.unless or b.unless or (a.shift and b.shift):
            return _UNKNOWN
        elif a.shift == 0:
            fields.append(IdField(a.path, b.shift, condition))
        else:
            fields.append(IdField(a.path, a.shift, negated))
    return _Ids(tuple(fields))


def _shifted(ids: _Ids, shift: int) -> _Value:
    if shift and any(f.unless for f in ids.fields):
        return _UNKNOWN  # the unshifted case would no longer be 0
    return _Ids(tuple(IdField(f.path, f.shift + shift, f.unless) for f in ids.fields))


def _shift(element: ast.expr, variable: str) -> Optional[int]:
    """``i`` -> 0, ``i + 1``/``1 + i`` -> 1, ``i - 1`` -> -1; None for anything else."""

    def is_variable(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == variable

    def constant(node: ast.expr) -> Optional[int]:
        value = node.value if isinstance(node, ast.Constant) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    if is_variable(element):
        return 0
    if isinstance(element, ast.BinOp) and isinstance(element.op, (ast.Add, ast.Sub)):
        if is_variable(element.left) and constant(element.right) is not None:
            amount = constant(element.right)
            assert amount is not None
            return amount if isinstance(element.op, ast.Add) else -amount
        if isinstance(element.op, ast.Add) and is_variable(element.right):
            return constant(element.left)
    return None


def _first_each(fields: tuple[IdField, ...]) -> tuple[IdField, ...]:
    """Fields in order, each path once: a later read of a path is only reached when the first found nothing."""
    seen: set[Path] = set()
    kept = []
    for f in fields:
        if f.path not in seen:
            seen.add(f.path)
            kept.append(f)
    return tuple(kept)


def _key(node: ast.expr, env: Env) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    bound = env.get(node.id) if isinstance(node, ast.Name) else None
    return bound.text if isinstance(bound, _Str) else None


def _constant_strings(node: ast.expr) -> Optional[tuple[str, ...]]:
    if not isinstance(node, (ast.Tuple, ast.List)):
        return None
    texts = tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return texts if len(texts) == len(node.elts) else None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _returns_nothing(statement: ast.Return) -> bool:
    return statement.value is None or _is_none(statement.value)


def _compared_to_none(node: ast.expr, operator: type) -> Optional[ast.expr]:
    """``x`` of ``x is None`` (``operator`` ``ast.Is``) or ``x is not None`` (``ast.IsNot``)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], operator):
        return node.left if _is_none(node.comparators[0]) else None
    return None


def _is_break_if(statement: ast.If) -> bool:
    return len(statement.body) == 1 and isinstance(statement.body[0], ast.Break) and not statement.orelse


def _is_log(node: ast.expr) -> bool:
    """``logger.info(...)``: reading ids to print them changes nothing."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    owner = func.value if isinstance(func, ast.Attribute) else None
    return isinstance(owner, ast.Name) and owner.id in ("logger", "logging")


# finding the function


_Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def _reading_function(tree: ast.Module) -> Optional[_Function]:
    """The first function (by line) whose own body reads ``eagle_aux_hidden_state_layer_ids``."""
    functions = sorted(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
        key=lambda n: (n.lineno, n.col_offset),
    )
    return next((f for f in functions if _field_reads(f)), None)


def _own_nodes(function: _Function) -> list[ast.AST]:
    """The function's nodes, not those of functions, lambdas or classes defined inside it."""
    nodes: list[ast.AST] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))
    return nodes


def _read_of(node: ast.AST) -> Optional[tuple[ast.expr, ast.expr]]:
    """``(owner, key)`` of ``getattr(owner, key, ...)``, ``owner.get(key, ...)`` or ``owner[key]``."""
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) in (2, 3):
            return node.args[0], node.args[1]
        if isinstance(func, ast.Attribute) and func.attr == "get" and len(node.args) in (1, 2):
            return func.value, node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.value, node.slice
    return None


def _field_reads(function: _Function) -> list[ast.expr]:
    """The owners the function reads ``eagle_aux_hidden_state_layer_ids`` from, in source order."""
    owners: list[tuple[int, int, ast.expr]] = []
    for node in _own_nodes(function):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr == DRAFTER_IDS_FIELD:
            owners.append((node.lineno, node.col_offset, node.value))
        read = _read_of(node)
        if read is not None and isinstance(read[1], ast.Constant) and read[1].value == DRAFTER_IDS_FIELD:
            owners.append((read[0].lineno, read[0].col_offset, read[0]))
    return [owner for _, _, owner in sorted(owners, key=lambda o: (o[0], o[1]))]


def _config_of(function: _Function) -> Optional[ast.expr]:
    """The expression holding the drafter's whole config: the owner of the first read of the field, or, where
    that owner is a nested dict (``eagle_config = getattr(hf_config, "eagle_config", None)``), what it was read
    from."""
    owner = _field_reads(function)[0]
    assignments: dict[str, ast.expr] = {}
    for n in sorted(
        (n for n in _own_nodes(function) if isinstance(n, ast.Assign) and len(n.targets) == 1),
        key=lambda n: n.lineno,
    ):
        if isinstance(n.targets[0], ast.Name):
            assignments.setdefault(n.targets[0].id, n.value)  # the first binding
    for _ in range(len(assignments) + 1):
        read = _read_of(assignments[owner.id]) if isinstance(owner, ast.Name) and owner.id in assignments else None
        if read is None or (isinstance(read[1], ast.Constant) and read[1].value == "hf_config"):
            break
        owner = read[0]
    return owner if all(isinstance(n, (ast.Name, ast.Attribute, ast.Load)) for n in ast.walk(owner)) else None


@dataclass(frozen=True)
class IdsRead:
    """What a runner takes from one drafter config: the field it finds first, as written and as vLLM uses it."""

    field: IdField
    written: tuple[int, ...]
    used: Optional[tuple[int, ...]]
    """``written`` shifted as the runner shifts it (None: the shift's condition is one this tool cannot evaluate)."""


def read_ids(fields: tuple[IdField, ...], config: dict[str, object]) -> Optional[IdsRead]:
    """The first of ``fields`` a drafter ``config`` (its ``config.json``) fills with ids, as the runner reads it;
    None where it fills none (the runner then asks the target's getter)."""
    for place in fields:
        value: object = config
        for key in place.path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            written = tuple(value)
            waived = _holds(place.unless, config) if place.unless else False
            shift = None if waived is None else (0 if waived else place.shift)
            return IdsRead(place, written, None if shift is None else tuple(i + shift for i in written))
    return None


def _holds(condition: str, config: dict[str, object]) -> Optional[bool]:
    """``condition`` on the drafter's config, where it compares one of its fields (``getattr(hf_config, "model_type",
    None) == "deepseek_v41"``) with a constant; None for anything else."""
    try:
        test = ast.parse(condition, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    left, right = test.left, test.comparators[0]
    key = _key_read(left)
    if key is None or not isinstance(right, ast.Constant):
        return None
    return (config.get(key) == right.value) is isinstance(test.ops[0], ast.Eq)


def _key_read(node: ast.expr) -> Optional[str]:
    """The config field ``getattr(cfg, "k", ...)`` or ``cfg.k`` reads."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[1].value
    return None
