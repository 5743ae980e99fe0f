"""Go text/template in Python against Go's own: tests/data/go_template/cases.json rendered by Go 1.19's
text/template (reference.go, with Ollama's options and json function) is reference.json; each case must give
the same text here, or fail where Go fails (parse or execution error; the messages are blazr's own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blazr.errors import TemplateError
from blazr.tokenizer import ollama_template
from blazr.tokenizer.go_template import GoTemplate

DATA = Path(__file__).parent / "data" / "go_template"
# JSON numbers decode to float64 in Go's map[string]any: the same here, so eq / printf see the same kinds
CASES = json.loads((DATA / "cases.json").read_text(encoding="utf-8"), parse_int=float)
REFERENCE = json.loads((DATA / "reference.json").read_text(encoding="utf-8"))


def _data(case: dict) -> dict:
    data = dict(case.get("data") or {})
    chat = case.get("chat")
    if chat is not None:
        data["Messages"] = [ollama_template._message(m) for m in chat["messages"]]
        data["Tools"] = ollama_template._tools(chat.get("tools"))
    return data


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_renders_as_go_does(case):
    expected = REFERENCE[case["name"]]
    if "error" in expected:
        with pytest.raises(TemplateError):
            GoTemplate(case["template"], ollama_template.FUNCTIONS).execute(_data(case))
        return
    got = GoTemplate(case["template"], ollama_template.FUNCTIONS).execute(_data(case))
    assert got == expected["output"]


def test_every_case_has_a_reference():
    assert sorted(REFERENCE) == sorted(c["name"] for c in CASES)
