"""Go text/template's lexer: template text -> tokens, with the trim markers applied to the text around them.

Follows text/template/parse/lex.go: actions between "{{" and "}}"; "{{- " trims the whitespace before it and
" -}}" the whitespace after it (the dash needs a space on its inner side); comments "{{/* ... */}}" may only
stand alone in their action; inside an action spaces separate operands, which matters for field chains
(".A.B" is one chain, ".A .B" two operands), so each token records whether space came before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from blazr.errors import TemplateError

LEFT, RIGHT = "{{", "}}"
SPACE = " \t\r\n"
KEYWORDS = set("if else end range with define template block break continue".split())
_NUMBER = re.compile(
    r"[+-]?(0[xX][0-9a-fA-F_]*(\.[0-9a-fA-F_]*)?([pP][+-]?[0-9_]+)?|0[bB][01_]+|0[oO][0-7_]+"
    r"|([0-9][0-9_]*)?\.?[0-9_]*([eE][+-]?[0-9_]+)?)i?"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# token kinds
TEXT, OPEN, CLOSE, FIELD, VARIABLE = "text", "{{", "}}", "field", "variable"
IDENT, KEYWORD = "ident", "keyword"
STRING, RAW_STRING, CHAR, NUMBER, BOOL, NIL, DOT = "string", "raw", "char", "number", "bool", "nil", "dot"
PIPE, LPAREN, RPAREN, DECLARE, ASSIGN, COMMA = "|", "(", ")", ":=", "=", ","


@dataclass
class Token:
    kind: str
    value: str
    line: int
    spaced: bool = False  # whitespace came right before it inside the action


class Lexer:
    def __init__(self, source: str):
        self.src = source
        self.pos = 0
        self.tokens: list[Token] = []

    def line(self, pos: int | None = None) -> int:
        return self.src.count("\n", 0, self.pos if pos is None else pos) + 1

    def error(self, message: str, pos: int | None = None) -> TemplateError:
        return TemplateError(f"template line {self.line(pos)}: {message}")

    def run(self) -> list[Token]:
        src = self.src
        while self.pos < len(src):
            start = src.find(LEFT, self.pos)
            if start < 0:
                self._text(src[self.pos :])
                break
            text = src[self.pos : start]
            trim_left = src.startswith("-", start + 2) and start + 3 < len(src) and src[start + 3] in SPACE
            if trim_left:
                text = text.rstrip(SPACE)
            self._text(text)
            self.pos = start + (4 if trim_left else 2)
            self._action(start)
        return self.tokens

    def _text(self, text: str) -> None:
        if text:
            self.tokens.append(Token(TEXT, text, self.line()))

    def _trim_right_at(self, pos: int) -> bool:
        """Whether a right trim marker " -}}" starts at pos (the space is its first character)."""
        return self.src[pos] in SPACE and self.src.startswith("-" + RIGHT, pos + 1)

    def _close(self, after: int, trimmed: bool) -> None:
        """The action ended at `after` (just past "}}"): skip the trimmed whitespace after it."""
        self.pos = after
        if trimmed:
            while self.pos < len(self.src) and self.src[self.pos] in SPACE:
                self.pos += 1

    def _action(self, start: int) -> None:
        src = self.src
        if src.startswith("/*", self.pos):  # a comment fills its action
            end = src.find("*/", self.pos + 2)
            if end < 0:
                raise self.error("unclosed comment", start)
            end += 2
            if src.startswith(RIGHT, end):
                return self._close(end + 2, False)
            if end < len(src) and self._trim_right_at(end):
                return self._close(end + 4, True)
            raise self.error("comment ends before closing delimiter", start)
        self.tokens.append(Token(OPEN, LEFT, self.line(start)))
        spaced, depth = False, 0
        while True:
            if self.pos >= len(src):
                raise self.error("unclosed action", start)
            char = src[self.pos]
            if self._trim_right_at(self.pos):
                self.tokens.append(Token(CLOSE, RIGHT, self.line()))
                return self._close(self.pos + 4, True)
            if src.startswith(RIGHT, self.pos):
                if depth:
                    raise self.error("unclosed left paren", start)
                self.tokens.append(Token(CLOSE, RIGHT, self.line()))
                return self._close(self.pos + 2, False)
            if char in SPACE:
                self.pos += 1
                spaced = True
                continue
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth < 0:
                    raise self.error("unexpected right paren")
            self.tokens.append(self._operand(char, spaced))
            spaced = False

    def _operand(self, char: str, spaced: bool) -> Token:
        src, pos, line = self.src, self.pos, self.line()

        def take(kind: str, end: int) -> Token:
            self.pos = end
            return Token(kind, src[pos:end], line, spaced)

        if src.startswith(":=", pos):
            return take(DECLARE, pos + 2)
        if char in "=|(),":
            return take({"=": ASSIGN, "|": PIPE, "(": LPAREN, ")": RPAREN, ",": COMMA}[char], pos + 1)
        if char == '"':
            return take(STRING, self._quoted(pos, '"'))
        if char == "'":
            return take(CHAR, self._quoted(pos, "'"))
        if char == "`":
            end = src.find("`", pos + 1)
            if end < 0:
                raise self.error("unterminated raw quoted string")
            return take(RAW_STRING, end + 1)
        if char == "$":
            word = _WORD.match(src, pos + 1)
            return take(VARIABLE, word.end() if word else pos + 1)
        if char == "." and pos + 1 < len(src) and (src[pos + 1].isalpha() or src[pos + 1] == "_"):
            return take(FIELD, _WORD.match(src, pos + 1).end())
        if char.isdigit() or (char in "+-." and pos + 1 < len(src) and src[pos + 1].isdigit()):
            number = _NUMBER.match(src, pos)
            return take(NUMBER, number.end())
        if char == ".":
            return take(DOT, pos + 1)
        word = _WORD.match(src, pos)
        if word is not None:
            text = word.group()
            kind = (
                KEYWORD
                if text in KEYWORDS
                else BOOL
                if text in ("true", "false")
                else NIL
                if text == "nil"
                else IDENT
            )
            return take(kind, word.end())
        raise self.error(f"unexpected {char!r} in action")

    def _quoted(self, pos: int, quote: str) -> int:
        i = pos + 1
        while i < len(self.src):
            char = self.src[i]
            if char == "\\":
                i += 2
                continue
            if char == "\n":
                break
            if char == quote:
                return i + 1
            i += 1
        raise self.error("unterminated quoted string" if quote == '"' else "unterminated character constant")


def tokenize(source: str) -> list[Token]:
    return Lexer(source).run()
