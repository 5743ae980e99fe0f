"""Running a parsed Go text/template over Python data (text/template/exec.go, with missingkey=zero).

Variables live on one stack: a control structure marks it and pops back to the mark at its {{end}}; range
sets its declared variables per element and drops the body's own after each one. A missing map key is nil,
which an action prints as "<no value>" (as Go prints a nil interface) and print prints as "<nil>".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from blazr.errors import TemplateError
from blazr.tokenizer.go_template import nodes as n
from blazr.tokenizer.go_template.functions import BUILTINS, LAZY
from blazr.tokenizer.go_template.parser import parse
from blazr.tokenizer.go_template.values import GoStruct, is_true, sprint_value, type_name

MAX_TEMPLATE_DEPTH = 100  # nested {{template}} calls (Go allows 100,000; a prompt needs a handful)
_NO_ARG = object()  # no value piped in from the previous command


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class GoTemplate:
    """A parsed template; `functions` adds to the predefined ones (Ollama adds json, currentDate, ...)."""

    def __init__(self, source: str, functions: dict[str, Callable[..., Any]] | None = None):
        self.source = source
        self.functions = {**BUILTINS, **(functions or {})}
        self.root, self.templates = parse(source, set(self.functions) | set(LAZY))
        self._arity = {name: inspect.signature(fn) for name, fn in self.functions.items()}

    def field_names(self) -> set[str]:
        """Lower-cased names of every field and variable the template (and its definitions) mentions."""
        names = n.field_names(self.root)
        for body in self.templates.values():
            names += n.field_names(body)
        return {name.lower() for name in names}

    def execute(self, data: Any, root: list[Any] | None = None) -> str:
        state = _State(self, data)
        state.walk(data, self.root if root is None else root)
        return "".join(state.out)


class _State:
    def __init__(self, template: GoTemplate, data: Any):
        self.template = template
        self.vars: list[list[Any]] = [["$", data]]
        self.out: list[str] = []
        self.depth = 0

    # ---- variables ----
    def lookup(self, name: str) -> Any:
        for var_name, value in reversed(self.vars):
            if var_name == name:
                return value
        raise TemplateError(f"template: undefined variable: {name}")

    def assign(self, name: str, value: Any) -> None:
        for entry in reversed(self.vars):
            if entry[0] == name:
                entry[1] = value
                return
        raise TemplateError(f"template: undefined variable: {name}")

    # ---- statements ----
    def walk(self, dot: Any, items: list[Any]) -> None:
        for node in items:
            if isinstance(node, n.Text):
                self.out.append(node.text)
            elif isinstance(node, n.Action):
                value = self.pipeline(dot, node.pipe)
                if not node.pipe.declare:
                    self.out.append("<no value>" if value is None else sprint_value(value, top=False))
            elif isinstance(node, n.Branch):
                mark = len(self.vars)
                try:
                    self.branch(dot, node)
                finally:
                    del self.vars[mark:]
            elif isinstance(node, n.Break):
                raise _Break
            elif isinstance(node, n.Continue):
                raise _Continue
            elif isinstance(node, n.TemplateCall):
                self.call_template(dot, node)

    def branch(self, dot: Any, node: n.Branch) -> None:
        value = self.pipeline(dot, node.pipe)
        if node.kind == "range":
            return self.range(dot, node, value)
        if is_true(value):
            self.walk(value if node.kind == "with" else dot, node.body)
        elif node.orelse is not None:
            self.walk(dot, node.orelse)

    def range(self, dot: Any, node: n.Branch, value: Any) -> None:
        if value is None:
            items: list[tuple[Any, Any]] = []
        elif isinstance(value, dict):
            items = [(key, value[key]) for key in sorted(value)]
        elif isinstance(value, list):
            items = list(enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [(i, i) for i in range(value)]
        else:
            raise TemplateError(f"template: range can't iterate over {sprint_value(value)}")
        if not items:
            if node.orelse is not None:
                self.walk(dot, node.orelse)
            return
        declared = node.pipe.declare  # the pipeline pushed (or found) them: set the innermost of each name
        for index, element in items:
            if declared:
                self.assign(declared[-1], element)
                if len(declared) > 1:
                    self.assign(declared[0], index)
            mark = len(self.vars)
            try:
                self.walk(element, node.body)
            except _Break:
                break
            except _Continue:
                continue
            finally:
                del self.vars[mark:]

    def call_template(self, dot: Any, node: n.TemplateCall) -> None:
        body = self.template.templates.get(node.name)
        if body is None:
            raise TemplateError(f'template: no such template "{node.name}"')
        if self.depth >= MAX_TEMPLATE_DEPTH:
            raise TemplateError(f"template: exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})")
        value = self.pipeline(dot, node.pipe) if node.pipe is not None else None
        saved, self.vars = self.vars, [["$", value]]
        self.depth += 1
        try:
            self.walk(value, body)
        finally:
            self.vars, self.depth = saved, self.depth - 1

    # ---- expressions ----
    def pipeline(self, dot: Any, pipe: n.Pipeline) -> Any:
        value = _NO_ARG
        for command in pipe.commands:
            value = self.command(dot, command, value)
        for name in pipe.declare:
            if pipe.assign:
                self.assign(name, value)
            else:
                self.vars.append([name, value])
        return value

    def command(self, dot: Any, command: n.Command, final: Any) -> Any:
        first, rest = command.args[0], command.args[1:]
        if isinstance(first, n.Function):
            return self.call(dot, first.name, rest, final)
        if rest or final is not _NO_ARG:
            raise TemplateError(f"template: can't give argument to non-function {_describe(first)}")
        if isinstance(first, n.Nil):
            raise TemplateError("template: nil is not a command")
        return self.argument(dot, first)

    def argument(self, dot: Any, node: Any) -> Any:
        if isinstance(node, n.Literal):
            return node.value
        if isinstance(node, n.Dot):
            return dot
        if isinstance(node, n.Nil):
            return None
        if isinstance(node, n.FieldChain):
            return self.fields(dot, node.names)
        if isinstance(node, n.Variable):
            return self.fields(self.lookup(node.name), node.names)
        if isinstance(node, n.Pipeline):
            return self.pipeline(dot, node)
        if isinstance(node, n.Function):
            return self.call(dot, node.name, [], _NO_ARG)
        if isinstance(node, n.Chain):
            return self.fields(self.argument(dot, node.node), node.names)
        raise TemplateError(f"template: cannot evaluate {node!r}")

    def fields(self, value: Any, names: list[str]) -> Any:
        for name in names:
            if value is None:
                raise TemplateError(f"template: nil pointer evaluating interface {{}}.{name}")
            if isinstance(value, GoStruct):
                value = value.field(name)
            elif isinstance(value, dict):
                value = value.get(name)
            else:
                raise TemplateError(f"template: can't evaluate field {name} in type {type_name(value)}")
        return value

    def call(self, dot: Any, name: str, nodes: list[Any], final: Any) -> Any:
        if name in LAZY:
            thunks = [lambda node=node: self.argument(dot, node) for node in nodes]
            if final is not _NO_ARG:
                thunks.append(lambda: final)
            if not thunks:
                raise TemplateError(f"template: wrong number of args for {name}: want at least 1 got 0")
            return LAZY[name](*thunks)
        args = [self.argument(dot, node) for node in nodes] + ([] if final is _NO_ARG else [final])
        try:
            self.template._arity[name].bind(*args)
        except TypeError:
            raise TemplateError(f"template: wrong number of args for {name}: got {len(args)}") from None
        return self.template.functions[name](*args)


def _describe(node: Any) -> str:
    if isinstance(node, n.Literal):
        return repr(node.value)
    if isinstance(node, n.FieldChain):
        return "." + ".".join(node.names)
    if isinstance(node, n.Variable):
        return ".".join([node.name, *node.names])
    return type(node).__name__.lower()
