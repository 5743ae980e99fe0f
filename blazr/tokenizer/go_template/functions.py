"""text/template's predefined functions (funcs.go) and fmt's Sprintf, with Go's errors for Go's misuse.

`and` / `or` take their arguments unevaluated (they short-circuit, as Go 1.18+ does); the executor calls
them with thunks. Every other function takes evaluated values.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from blazr.errors import TemplateError
from blazr.tokenizer.go_template.values import (
    GoStruct,
    format_float,
    is_true,
    sprint,
    sprint_value,
    type_name,
)

_BAD_COMPARISON = "incompatible types for comparison"


def _kind(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "other"


def _eq(first: Any, *others: Any) -> bool:
    if not others:
        raise TemplateError("error calling eq: missing argument for comparison")
    for other in others:
        k1, k2 = _kind(first), _kind(other)
        if k1 != k2:
            if first is not None and other is not None:
                raise TemplateError(f"error calling eq: {_BAD_COMPARISON}")
            continue
        if k1 == "other" and (isinstance(first, (list, dict)) or isinstance(other, (list, dict))):
            raise TemplateError(f"error calling eq: non-comparable type {type_name(first)}")
        if first == other if k1 != "other" else first is other:
            return True
    return False


def _ordered(name: str, a: Any, b: Any) -> tuple[Any, Any]:
    k1, k2 = _kind(a), _kind(b)
    if k1 not in ("int", "float", "string") or k2 not in ("int", "float", "string"):
        raise TemplateError(f"error calling {name}: invalid type for comparison")
    if k1 != k2:
        raise TemplateError(f"error calling {name}: {_BAD_COMPARISON}")
    return a, b


def _len(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, (list, dict)):
        return len(value)
    raise TemplateError(
        f"error calling len: len of {'nil pointer' if value is None else 'type ' + type_name(value)}"
    )


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        if item is None:
            raise TemplateError("error calling index: index of untyped nil")
        if isinstance(item, dict):
            if not isinstance(key, str):
                raise TemplateError(f"error calling index: value has type {type_name(key)}; should be string")
            item = item.get(key)
        elif isinstance(item, (list, str)):
            if isinstance(key, bool) or not isinstance(key, int):
                raise TemplateError(
                    f"error calling index: cannot index slice/array with type {type_name(key)}"
                )
            seq = item.encode() if isinstance(item, str) else item
            if not 0 <= key < len(seq):
                raise TemplateError(f"error calling index: index out of range: {key}")
            item = seq[key]
        else:
            raise TemplateError(f"error calling index: can't index item of type {type_name(item)}")
    return item


def _slice(item: Any, *bounds: Any) -> Any:
    if not isinstance(item, (list, str)):
        raise TemplateError(f"error calling slice: can't slice item of type {type_name(item)}")
    if any(isinstance(b, bool) or not isinstance(b, int) for b in bounds) or len(bounds) > (
        2 if isinstance(item, str) else 3
    ):
        raise TemplateError("error calling slice: bad slice indexes")
    seq = item.encode() if isinstance(item, str) else item
    low = bounds[0] if bounds else 0
    high = bounds[1] if len(bounds) > 1 else len(seq)
    if not 0 <= low <= high <= len(seq):
        raise TemplateError(f"error calling slice: index out of range: {high}")
    part = seq[low:high]
    return part.decode("utf-8", errors="replace") if isinstance(item, str) else part


def _text_of(args: tuple[Any, ...]) -> str:
    return args[0] if len(args) == 1 and isinstance(args[0], str) else sprint(list(args))


def _html(*args: Any) -> str:
    table = {"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "\0": "\ufffd"}
    return "".join(table.get(c, c) for c in _text_of(args))


def _js(*args: Any) -> str:
    table = {
        "\\": "\\\\",
        "'": "\\'",
        '"': '\\"',
        "<": "\\u003C",
        ">": "\\u003E",
        "&": "\\u0026",
        "=": "\\u003D",
    }
    out = []
    for char in _text_of(args):
        if char in table:
            out.append(table[char])
        elif char < " " or not char.isprintable():
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return "".join(out)


def _urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(_text_of(args), safe="-_.~")


def _println(*args: Any) -> str:
    return " ".join(sprint_value(arg) for arg in args) + "\n"


# ---- printf --------------------------------------------------------------------------------------------

_VERB = re.compile(r"%([-+# 0]*)(\d+|\*)?(?:\.(\d+|\*)?)?([a-zA-Z%])")


def _quote(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(char)])
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\x{ord(char):02x}" if ord(char) < 0x80 else f"\\u{ord(char):04x}")
    return '"' + "".join(out) + '"'


def _printf_one(flags: str, width: str | None, precision: str | None, verb: str, arg: Any) -> str:
    bad = f"%!{verb}({type_name(arg)}={sprint_value(arg)})"
    prec = int(precision) if precision not in (None, "*") else (0 if precision == "" else None)
    if verb == "v":
        body = sprint_value(arg)
    elif verb == "T":
        body = type_name(arg)
    elif verb == "t":
        if not isinstance(arg, bool):
            return bad
        body = "true" if arg else "false"
    elif verb in "dboxXc" and isinstance(arg, int) and not isinstance(arg, bool):
        body = (
            chr(arg) if verb == "c" else format(arg, {"d": "d", "b": "b", "o": "o", "x": "x", "X": "X"}[verb])
        )
    elif verb in "xX" and isinstance(arg, str):
        body = arg.encode().hex() if verb == "x" else arg.encode().hex().upper()
    elif verb in "eEfFgG" and isinstance(arg, float):
        if prec is None and verb in "eEfF":
            prec = 6  # Go's default precision for %e and %f (%g alone defaults to the shortest form)
        body = format_float(arg, verb.lower() if verb != "F" else "f", prec)
        body = body.upper() if verb in "EG" else body
    elif verb == "s" and isinstance(arg, (str, list, dict, GoStruct)) or verb == "s" and arg is None:
        body = sprint_value(arg) if not isinstance(arg, str) else arg
        body = body[:prec] if prec is not None and isinstance(arg, str) else body
    elif verb == "q" and isinstance(arg, str):
        body = _quote(arg)
    else:
        return bad
    if "+" in flags and verb in "dfeg" and not body.startswith("-"):
        body = "+" + body
    if width not in (None, "*") and len(body) < int(width):
        pad = int(width) - len(body)
        if "-" in flags:
            body += " " * pad
        elif "0" in flags and verb in "dfegxXbo":
            sign = body[0] if body[:1] in "+-" else ""
            body = sign + "0" * pad + body[len(sign) :]
        else:
            body = " " * pad + body
    return body


def _printf(fmt: str, *args: Any) -> str:
    out, used, pos = [], 0, 0
    for match in _VERB.finditer(fmt):
        out.append(fmt[pos : match.start()])
        pos = match.end()
        flags, width, precision, verb = match.groups()
        if verb == "%":
            out.append("%")
            continue
        if used >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(_printf_one(flags, width, precision, verb, args[used]))
        used += 1
    out.append(fmt[pos:])
    if used < len(args):
        extra = ", ".join(f"{type_name(a)}={sprint_value(a)}" for a in args[used:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def _and(*thunks: Callable[[], Any]) -> Any:
    value = None
    for thunk in thunks:
        value = thunk()
        if not is_true(value):
            return value
    return value


def _or(*thunks: Callable[[], Any]) -> Any:
    value = None
    for thunk in thunks:
        value = thunk()
        if is_true(value):
            return value
    return value


LAZY = {"and": _and, "or": _or}  # called with thunks, at least one argument
BUILTINS: dict[str, Callable[..., Any]] = {
    "not": lambda value: not is_true(value),
    "len": _len,
    "index": _index,
    "slice": _slice,
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": lambda a, b: _ordered("lt", a, b)[0] < b,
    "le": lambda a, b: _ordered("le", a, b)[0] <= b,
    "gt": lambda a, b: _ordered("gt", a, b)[0] > b,
    "ge": lambda a, b: _ordered("ge", a, b)[0] >= b,
    "print": lambda *args: sprint(list(args)),
    "printf": _printf,
    "println": _println,
    "html": _html,
    "js": _js,
    "urlquery": _urlquery,
}
