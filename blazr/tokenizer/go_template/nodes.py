"""The parse tree of a Go text/template (text/template/parse's node kinds, as far as execution needs them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Text:
    text: str


@dataclass
class Literal:  # a string, number, bool or character constant, already converted to its Python value
    value: Any


@dataclass
class Nil:
    pass


@dataclass
class Dot:
    pass


@dataclass
class FieldChain:  # .A.B on dot
    names: list[str]


@dataclass
class Variable:  # $x.A.B ($ alone is the data the template was run with)
    name: str
    names: list[str] = field(default_factory=list)


@dataclass
class Function:  # an identifier: a function called with the command's other arguments
    name: str


@dataclass
class Chain:  # (pipeline).A.B
    node: Any
    names: list[str]


@dataclass
class Command:
    args: list[Any]


@dataclass
class Pipeline:
    commands: list[Command]
    declare: list[str] = field(default_factory=list)  # variables it declares (:=) ...
    assign: bool = False  # ... or assigns (=)


@dataclass
class Action:
    pipe: Pipeline


@dataclass
class Branch:  # if / with / range: `orelse` runs when the pipeline's value is empty
    kind: str
    pipe: Pipeline
    body: list[Any]
    orelse: list[Any] | None = None


@dataclass
class Break:
    pass


@dataclass
class Continue:
    pass


@dataclass
class TemplateCall:  # {{template "name" pipeline}}
    name: str
    pipe: Pipeline | None


def field_names(node: Any) -> list[str]:
    """Every field and variable name the tree mentions (Ollama's Template.Vars: which data it reads)."""
    if isinstance(node, list):
        return [name for child in node for name in field_names(child)]
    if isinstance(node, FieldChain):
        return list(node.names)
    if isinstance(node, Variable):
        return [node.name, *node.names]
    # a (pipeline).Field chain adds nothing: Ollama's Identifiers does not look into chains
    if isinstance(node, Action):
        return field_names(node.pipe)
    if isinstance(node, Pipeline):
        return [name for command in node.commands for name in field_names(command.args)]
    if isinstance(node, Branch):
        return field_names(node.pipe) + field_names(node.body) + field_names(node.orelse or [])
    if isinstance(node, TemplateCall):
        return field_names(node.pipe) if node.pipe is not None else []
    return []
