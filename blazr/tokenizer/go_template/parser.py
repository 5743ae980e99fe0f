"""Go text/template's parser: tokens -> a tree of blazr.tokenizer.go_template.nodes (text/template/parse).

What Go checks at parse time is checked here too, so a bad template fails when it is stored, not at the first
chat: undefined variables and functions, {{break}}/{{continue}} outside {{range}}, {{else}}/{{end}} without
their block, operands not separated by spaces, literals as later pipeline stages.
"""

from __future__ import annotations

from typing import Any

from blazr.errors import TemplateError
from blazr.tokenizer.go_template import lexer as lx
from blazr.tokenizer.go_template import nodes as n

_ENDS = (lx.CLOSE, lx.RPAREN)


class Parser:
    def __init__(self, source: str, functions: set[str]):
        self.tokens = lx.tokenize(source)
        self.i = 0
        self.functions = functions
        self.variables = ["$"]
        self.range_depth = 0
        self.templates: dict[str, list[Any]] = {}

    # ---- tokens ----
    def peek(self, ahead: int = 0) -> lx.Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def next(self) -> lx.Token:
        token = self.peek()
        if token is None:
            raise TemplateError("template: unexpected end of input")
        self.i += 1
        return token

    def error(self, token: lx.Token | None, message: str) -> TemplateError:
        line = token.line if token is not None else (self.tokens[-1].line if self.tokens else 1)
        return TemplateError(f"template line {line}: {message}")

    def expect(self, kind: str, context: str) -> lx.Token:
        token = self.next()
        if token.kind != kind:
            raise self.error(token, f"unexpected {token.value!r} in {context}")
        return token

    # ---- lists and actions ----
    def parse(self) -> tuple[list[Any], dict[str, list[Any]]]:
        root: list[Any] = []
        while self.peek() is not None:
            token = self.peek()
            if token.kind == lx.OPEN and self._keyword_at(1) == "define":
                self.i += 2
                self._define()
                continue
            node, stop = self._item()
            if stop is not None:
                raise self.error(token, f"unexpected {{{{{stop}}}}}")
            root.append(node)
        return root, self.templates

    def _keyword_at(self, ahead: int) -> str | None:
        token = self.peek(ahead)
        return token.value if token is not None and token.kind == lx.KEYWORD else None

    def _list(self, context: str) -> tuple[list[Any], str]:
        """Items up to an {{end}} or {{else}}: (items, which one)."""
        items: list[Any] = []
        while True:
            if self.peek() is None:
                raise self.error(None, f"unexpected EOF: {context} has no {{{{end}}}}")
            node, stop = self._item()
            if stop is not None:
                return items, stop
            items.append(node)

    def _item(self) -> tuple[Any, str | None]:
        token = self.next()
        if token.kind == lx.TEXT:
            return n.Text(token.value), None
        if self.peek() is not None and self.peek().kind == lx.KEYWORD:
            word = self.next()
            if word.value in ("end", "else"):
                if word.value == "end":
                    self.expect(lx.CLOSE, "end")
                return None, word.value
            return self._keyword(word), None
        return n.Action(self._pipeline("command")), None

    def _keyword(self, word: lx.Token) -> Any:
        if word.value in ("if", "with", "range"):
            return self._control(word.value)
        if word.value in ("break", "continue"):
            if not self.range_depth:
                raise self.error(word, f"{{{{{word.value}}}}} outside {{{{range}}}}")
            self.expect(lx.CLOSE, word.value)
            return n.Break() if word.value == "break" else n.Continue()
        if word.value in ("template", "block"):
            name = self._literal(self.next())
            if not isinstance(name, str):
                raise self.error(word, f"{word.value}: the template's name must be a string")
            pipe = (
                None
                if self.peek() is not None and self.peek().kind == lx.CLOSE
                else self._pipeline(word.value)
            )
            if pipe is None:
                self.next()
            if word.value == "block":
                self._define_body(name)
            return n.TemplateCall(name, pipe)
        raise self.error(word, f"unexpected {{{{{word.value}}}}}")

    def _define(self) -> None:
        name = self._literal(self.next())
        if not isinstance(name, str):
            raise self.error(self.peek(), "define: the template's name must be a string")
        self.expect(lx.CLOSE, "define")
        self._define_body(name)

    def _define_body(self, name: str) -> None:
        saved, self.variables = self.variables, ["$"]
        body, stop = self._list(f"define {name!r}")
        if stop != "end":
            raise self.error(self.peek(), f"define {name!r}: unexpected {{{{else}}}}")
        self.variables = saved
        self.templates[name] = body

    def _control(self, kind: str) -> n.Branch:
        mark = len(self.variables)  # a control's variables live until its {{end}}
        pipe = self._pipeline(kind)
        self.range_depth += kind == "range"
        body, stop = self._list(kind)
        self.range_depth -= kind == "range"
        orelse = None
        if stop == "else":
            nested = self._keyword_at(0)
            if nested in ("if", "with") and (
                kind == nested
            ):  # {{else if}} / {{else with}}: shares the {{end}}
                self.next()
                orelse = [self._control(nested)]
            else:
                self.expect(lx.CLOSE, "else")
                orelse, stop = self._list(kind)
                if stop == "else":
                    raise self.error(self.peek(), f"{kind}: a second {{{{else}}}}")
        del self.variables[mark:]
        return n.Branch(kind, pipe, body, orelse)

    # ---- pipelines ----
    def _pipeline(self, context: str, end: str = lx.CLOSE) -> n.Pipeline:
        pipe = n.Pipeline([])
        declared = self._declaration(context)
        while True:
            token = self.peek()
            if token is None:
                raise self.error(None, f"unclosed action in {context}")
            if token.kind == end:
                self.next()
                break
            pipe.commands.append(self._command(end))
            if self.peek() is not None and self.peek().kind == lx.PIPE:
                self.next()
        if not pipe.commands:
            raise self.error(token, f"missing value for {context}")
        for stage, command in enumerate(pipe.commands[1:], 2):
            if isinstance(command.args[0], (n.Literal, n.Nil, n.Dot)):
                raise self.error(token, f"non executable command in pipeline stage {stage}")
        if declared is not None:
            pipe.declare, pipe.assign = declared
            if not pipe.assign:
                self.variables.extend(pipe.declare)
        return pipe

    def _declaration(self, context: str) -> tuple[list[str], bool] | None:
        first = self.peek()
        if first is None or first.kind != lx.VARIABLE:
            return None
        after = self.peek(1)
        if after is not None and after.kind in (lx.DECLARE, lx.ASSIGN):
            self.i += 2
            names = [first.value]
        elif after is not None and after.kind == lx.COMMA and context == "range":
            second, op = self.peek(2), self.peek(3)
            if (
                second is None
                or second.kind != lx.VARIABLE
                or op is None
                or op.kind not in (lx.DECLARE, lx.ASSIGN)
            ):
                raise self.error(after, "range can only initialize variables")
            self.i += 4
            names, after = [first.value, second.value], op
        else:
            return None
        assign = after.kind == lx.ASSIGN
        if assign:
            for name in names:
                self._known_variable(name, first)
        return names, assign

    def _command(self, end: str) -> n.Command:
        args = []
        while True:
            token = self.peek()
            if token is None or token.kind in (lx.PIPE, *_ENDS):
                if token is not None and token.kind in _ENDS and token.kind != end:
                    raise self.error(token, f"unexpected {token.value!r} in operand")
                break
            if args and not token.spaced:
                raise self.error(token, f"unexpected {token.value!r} in operand (missing space?)")
            args.append(self._operand())
        if not args:
            raise self.error(self.peek(), "empty command")
        return n.Command(args)

    def _operand(self) -> Any:
        term = self._term()
        names = []
        while self.peek() is not None and self.peek().kind == lx.FIELD and not self.peek().spaced:
            names.append(self.next().value[1:])
        if not names:
            return term
        if isinstance(term, n.FieldChain):
            return n.FieldChain(term.names + names)
        if isinstance(term, n.Variable):
            return n.Variable(term.name, term.names + names)
        if isinstance(term, (n.Literal, n.Nil, n.Dot)):
            raise self.error(self.peek(-1), "unexpected . after term")
        return n.Chain(term, names)

    def _term(self) -> Any:
        token = self.next()
        kind = token.kind
        if kind == lx.IDENT:
            if token.value not in self.functions:
                raise self.error(token, f'function "{token.value}" not defined')
            return n.Function(token.value)
        if kind == lx.DOT:
            return n.Dot()
        if kind == lx.NIL:
            return n.Nil()
        if kind == lx.VARIABLE:
            self._known_variable(token.value, token)
            return n.Variable(token.value)
        if kind == lx.FIELD:
            return n.FieldChain([token.value[1:]])
        if kind == lx.LPAREN:
            return self._pipeline("parenthesized pipeline", lx.RPAREN)
        if kind in (lx.BOOL, lx.NUMBER, lx.STRING, lx.RAW_STRING, lx.CHAR):
            return n.Literal(self._literal(token))
        raise self.error(token, f"unexpected {token.value!r} in operand")

    def _known_variable(self, name: str, token: lx.Token) -> None:
        if name not in self.variables:
            raise self.error(token, f"undefined variable {name!r}")

    def _literal(self, token: lx.Token) -> Any:
        kind, text = token.kind, token.value
        if kind == lx.BOOL:
            return text == "true"
        if kind == lx.RAW_STRING:
            return text[1:-1].replace("\r", "")
        if kind == lx.STRING:
            return unquote(text[1:-1], token, self)
        if kind == lx.CHAR:
            value = unquote(text[1:-1], token, self)
            if len(value) != 1:
                raise self.error(token, f"malformed character constant: {text}")
            return ord(value)
        if kind == lx.NUMBER:
            return number(text, token, self)
        raise self.error(token, f"unexpected {text!r}: expected a constant")


_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
}


def unquote(body: str, token: lx.Token, parser: Parser) -> str:
    """A Go quoted string's body with its escapes (strconv.Unquote): \\x and octal escapes are bytes."""
    out, i = bytearray(), 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode()
            i += 1
            continue
        code = body[i + 1 : i + 2]
        if code in _ESCAPES:
            out += _ESCAPES[code].encode()
            i += 2
        elif code in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = body[i + 2 : i + 2 + width]
            try:
                value = int(digits, 16) if len(digits) == width else -1
            except ValueError:
                value = -1
            if value < 0:
                raise parser.error(token, f"invalid escape \\{code}{digits} in string")
            out += bytes([value]) if code == "x" else chr(value).encode()
            i += 2 + width
        elif code.isdigit():
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            raise parser.error(token, f"invalid escape \\{code} in string")
    return out.decode("utf-8", errors="replace")


def number(text: str, token: lx.Token, parser: Parser) -> int | float:
    """A Go number constant as text/template passes it to an interface{} (idealConstant): int unless the
    text is a decimal float (has . e E p P outside a hex literal)."""
    if text.endswith("i"):
        raise parser.error(token, f"complex constant {text} is not supported")
    clean = text.replace("_", "")
    body = clean.lstrip("+-")
    try:
        if body[:2].lower() == "0x":
            if any(c in body for c in ".pP"):
                return float.fromhex(clean)
            return int(clean, 16)
        if body[:2].lower() in ("0b", "0o"):
            return int(clean, 0)
        if any(c in body for c in ".eE"):
            return float(clean)
        if len(body) > 1 and body.startswith("0"):
            return int(clean, 8)
        return int(clean)
    except ValueError:
        raise parser.error(token, f"bad number syntax: {text!r}") from None


def parse(source: str, functions: set[str]) -> tuple[list[Any], dict[str, list[Any]]]:
    """Template text -> (root list, {defined name: list}); TemplateError naming the line for bad syntax."""
    return Parser(source, functions).parse()
