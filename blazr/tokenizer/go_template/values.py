"""Go values as a template sees them, held in Python: how they print (fmt's %v), their truth, and Go's JSON.

str, bool, int, float, None (nil), list (a slice), dict (a map with string keys) stand for themselves. Two
kinds carry Go behaviour Python's do not: GoStruct (a struct: fixed fields, an unknown field is an error,
JSON in field order with omitempty) and the Stringer wrappers JsonMap / JsonList (Ollama's template types
whose String() is their JSON, so `{{ .Function.Arguments }}` prints JSON).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from blazr.errors import TemplateError


class GoStruct:
    """A Go struct value: `fields` in declaration order; `json` maps a field to (its JSON name, omitempty);
    a field without an entry is left out of JSON (Go's `json:"-"` or unexported). `stringer` prints it as
    its JSON (a String() method that marshals); `pointer` prints &{...} as fmt does for *T."""

    __slots__ = ("fields", "json", "pointer", "stringer", "type_name")

    def __init__(
        self,
        type_name: str,
        fields: dict[str, Any],
        json: dict[str, tuple[str, bool]] | None = None,
        *,
        pointer: bool = False,
        stringer: bool = False,
    ):
        self.type_name, self.fields, self.pointer, self.stringer = type_name, fields, pointer, stringer
        self.json = json if json is not None else {name: (name, False) for name in fields}

    def field(self, name: str) -> Any:
        if name not in self.fields:
            star = "*" if self.pointer else ""
            raise TemplateError(f"template: can't evaluate field {name} in type {star}{self.type_name}")
        return self.fields[name]


class JsonMap(dict):
    """A map whose String() is its JSON ({} when nil, as Ollama's templateArgs / templateProperties)."""


class GoSlice(list):
    """A slice that may be Go's nil slice: empty and false either way, but JSON null when nil."""

    nil = False

    @classmethod
    def of(cls, items: list[Any] | None) -> GoSlice:
        out = cls(items or [])
        out.nil = items is None
        return out


class JsonList(GoSlice):
    """A slice whose String() is its JSON (Ollama's templateTools): a nil one prints null."""


def type_name(value: Any) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, GoStruct):
        return ("*" if value.pointer else "") + value.type_name
    return {bool: "bool", int: "int", float: "float64", str: "string"}.get(type(value)) or (
        "map[string]interface {}" if isinstance(value, dict) else "[]interface {}"
    )


def is_true(value: Any) -> bool:
    """text/template's truth: false, 0, nil and empty strings, slices and maps are false; structs are true."""
    if value is None:
        return False
    if isinstance(value, (bool, int, float, str, list, dict)):
        return bool(value)
    return True


def _shortest(value: float) -> tuple[str, int]:
    """The shortest digits that round-trip (Python's repr finds the same ones as Go's strconv) and the
    decimal point's place: abs(value) = 0.<digits> * 10**point."""
    if value == 0:
        return "0", 1
    decimal = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, decimal.digits))
    point = len(digits) + decimal.exponent
    stripped = digits.lstrip("0")
    return stripped.rstrip("0") or "0", point - (len(digits) - len(stripped))


def _exponent_form(minus: str, digits: str, exp: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{minus}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _fixed_form(minus: str, digits: str, point: int) -> str:
    if point <= 0:
        return f"{minus}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return minus + digits + "0" * (point - len(digits))
    return f"{minus}{digits[:point]}.{digits[point:]}"


def format_float(value: float, verb: str = "g", precision: int | None = None) -> str:
    """strconv.FormatFloat for verbs e, f, g; precision None is the shortest round-trip form (%v is g)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if precision is not None:
        return f"{value:.{max(precision, 1) if verb == 'g' else precision}{verb}}"
    minus = "-" if math.copysign(1.0, value) < 0 else ""
    digits, point = _shortest(value)
    exp = point - 1
    if verb == "e" or (verb == "g" and (exp < -4 or exp >= 6)):  # shortest %g switches at exponent 6
        return _exponent_form(minus, digits, exp)
    return _fixed_form(minus, digits, point)


def sprint_value(value: Any, top: bool = True) -> str:
    """fmt's %v of one value. A pointer to a struct prints as &{...} at the top (an action prints the struct
    it points to: text/template dereferences first); nested ones print their fields here, where Go would
    print an address."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (JsonMap, JsonList)) or (isinstance(value, GoStruct) and value.stringer):
        return marshal(value)
    if isinstance(value, GoStruct):
        body = " ".join(sprint_value(v, False) for v in value.fields.values())
        return ("&" if value.pointer and top else "") + "{" + body + "}"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{sprint_value(value[k], False)}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(sprint_value(item, False) for item in value) + "]"
    raise TemplateError(f"template: cannot print a value of type {type(value).__name__}")


def sprint(args: list[Any]) -> str:
    """fmt.Sprint: spaces between operands when neither side is a string."""
    out = []
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(sprint_value(arg))
    return "".join(out)


# ---- encoding/json's Marshal ----------------------------------------------------------------------------

_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _json_string(text: str) -> str:
    out = []
    for char in text:
        escaped = _JSON_ESCAPES.get(char)
        if escaped is None and char < " ":
            escaped = f"\\u{ord(char):04x}"
        out.append(escaped or char)
    return '"' + "".join(out) + '"'


def _json_float(value: float) -> str:
    if math.isinf(value) or math.isnan(value):
        raise TemplateError(f"json: unsupported value: {format_float(value)}")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = format_float(value, "e")
        mantissa, _, exp = text.partition("e")
        sign, digits = exp[0], exp[1:].lstrip("0") or "0"
        return f"{mantissa}e{sign if sign == '-' else '+'}{digits}"
    minus = "-" if value < 0 else ""
    return _fixed_form(minus, *_shortest(value))  # plain digits up to 1e21, as encoding/json writes them


def is_empty(value: Any) -> bool:
    """omitempty's empty: false, 0, "", nil, and empty slices and maps."""
    return value is None or (isinstance(value, (bool, int, float, str, list, dict)) and not value)


def marshal(value: Any) -> str:
    """encoding/json.Marshal: compact, map keys sorted, HTML characters escaped, structs in field order."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, GoStruct):
        parts = []
        for name, item in value.fields.items():
            tag = value.json.get(name)
            if tag is not None and not (tag[1] and is_empty(item)):
                parts.append(f"{_json_string(tag[0])}:{marshal(item)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_string(str(k))}:{marshal(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        if isinstance(value, GoSlice) and value.nil:
            return "null"
        return "[" + ",".join(marshal(item) for item in value) + "]"
    raise TemplateError(f"json: unsupported type {type(value).__name__}")
