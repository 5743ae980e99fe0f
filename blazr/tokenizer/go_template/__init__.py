"""Go's text/template in Python, for Ollama's Modelfile TEMPLATE lines (no maintained Python library reads
them). `GoTemplate(source, functions).execute(data)`; errors are blazr.errors.TemplateError."""

from blazr.tokenizer.go_template.execute import GoTemplate
from blazr.tokenizer.go_template.values import GoSlice, GoStruct, JsonList, JsonMap, marshal

__all__ = ["GoSlice", "GoStruct", "GoTemplate", "JsonList", "JsonMap", "marshal"]
