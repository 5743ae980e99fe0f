"""Interactive sessions for `blazr run` and `blazr chat`: the whole conversation is re-rendered through the
model's chat template every turn. Ctrl-C stops an answer; Ctrl-C or Ctrl-D at the prompt leaves."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.commands.output import format_stats, note, stream_text

PROMPTS = {"run": "> ", "chat": ">>> "}
HELP = (
    "/clear            forget the conversation\n"
    "/history          show the conversation\n"
    "/system <msg>     set the system message (no message: show it)\n"
    "/exit, /quit      leave (or Ctrl-D)"
)


@dataclass
class Conversation:
    system: str | None = None  # (optional) the system message, kept across /clear
    turns: list[dict[str, str]] = field(default_factory=list)  # user/assistant messages in order

    def messages(self) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.turns


def answer(llm, conversation: Conversation, text: str, sampling: dict[str, Any], show_stats: bool) -> str:
    """Add a user turn, stream the assistant's reply to stdout and add it to the conversation. Ctrl-C stops
    the reply early and keeps what was said."""
    conversation.turns.append({"role": "user", "content": text})
    pieces = llm.chat(conversation.messages(), stream=True, **sampling)
    parts: list[str] = []
    try:
        stream_text(pieces, parts)
    except KeyboardInterrupt:
        note("\n[interrupted]")
    finally:
        pieces.close()  # aborts the request when the reply was cut short
    reply = "".join(parts)
    conversation.turns.append({"role": "assistant", "content": reply})
    if not reply.endswith("\n"):
        sys.stdout.write("\n")
        sys.stdout.flush()
    if show_stats:
        note(format_stats(llm.last_stats))
    return reply


def run_session(
    llm, conversation: Conversation, sampling: dict[str, Any], kind: str, show_stats: bool
) -> None:
    """Read lines until /exit, Ctrl-D or Ctrl-C; each line is a user turn or a slash command."""
    interactive = sys.stdin is not None and sys.stdin.isatty()
    if interactive:
        enable_line_editing(history_file(kind))
        note("Type /help for commands; /exit or Ctrl-D to leave.")
    while True:
        line = read_line(PROMPTS[kind] if interactive else "")
        if line is None:
            return
        line = line.strip()
        if line.startswith("/"):
            if not run_command(line, conversation):
                return
        elif line:
            answer(llm, conversation, line, sampling, show_stats)


def read_line(prompt: str) -> str | None:
    """One line of input; None at end of input or on Ctrl-C."""
    try:
        return input(prompt)
    except EOFError:
        return None
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        return None


def run_command(line: str, conversation: Conversation) -> bool:
    """Run a slash command; False means leave the session."""
    command, _, argument = line.partition(" ")
    argument = argument.strip()
    if command in ("/exit", "/quit", "/bye"):
        return False
    if command == "/clear":
        conversation.turns.clear()
        note("conversation cleared")
    elif command == "/history":
        for turn in conversation.messages():
            print(f"{turn['role']}: {turn['content']}")
    elif command == "/system":
        if argument:
            conversation.system = argument
            note("system message set")
        else:
            note(f"system message: {conversation.system or '(the template default)'}")
    elif command == "/help":
        note(HELP)
    else:
        note(f"unknown command {command}; commands:\n{HELP}")
    return True


def history_file(kind: str) -> Path:
    """<data dir>/blazr/<kind>_history.txt, the data dir being $XDG_DATA_HOME or ~/.local/share."""
    data_dir = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_dir / "blazr" / f"{kind}_history.txt"


def enable_line_editing(path: Path) -> None:
    """Arrow keys and a history file on terminals that have readline (not on Windows)."""
    try:
        import atexit
        import readline
    except ImportError:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            readline.read_history_file(path)
    except OSError:
        return  # history is a convenience; an unwritable data dir must not stop the session
    readline.set_history_length(1000)
    atexit.register(_save_history, readline, path)


def _save_history(readline_module, path: Path) -> None:
    try:
        readline_module.write_history_file(path)
    except OSError:
        pass


def chat(
    model: o.ModelArgument = None,
    system: Annotated[str | None, typer.Option("--system", "-s", help="System message")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Print load time and stats to stderr")
    ] = False,
    max_tokens: o.MaxTokens = None,
    temperature: o.Temperature = None,
    top_p: o.TopP = None,
    top_k: o.TopK = None,
    min_p: o.MinP = None,
    repeat_penalty: o.RepeatPenalty = None,
    repeat_last_n: o.RepeatLastN = None,
    seed: o.Seed = None,
    stop: o.Stop = None,
    device: o.Device = None,
    dtype: o.DType = None,
    num_ctx: o.NumCtx = None,
    kv_cache_type: o.KvCacheType = None,
    chat_template: o.ChatTemplate = None,
    model_dir: o.ModelDir = None,
    speculative: o.Speculative = None,
    draft_model: o.DraftModel = None,
    num_speculative_tokens: o.NumSpeculativeTokens = None,
    lora: o.Lora = None,
) -> None:
    """Multi-turn chat (/clear, /system <msg>, /history, /exit); lines come from the terminal or stdin."""
    settings = o.settings_from_params(locals())
    llm = o.load_llm(
        model,
        settings,
        model_dir,
        verbose=verbose,
        speculation=o.speculation_kwargs(
            speculative, draft_model, num_speculative_tokens, settings, model_dir
        ),
        lora=lora,
    )
    conversation = Conversation(system=system)
    run_session(llm, conversation, o.sampling_kwargs(settings), kind="chat", show_stats=verbose)
