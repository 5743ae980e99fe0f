"""`blazr generate` (raw completion of a prompt, no chat template) and `blazr run` (one chat turn with -p,
else an interactive session)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from blazr.commands import options as o
from blazr.commands.output import end_line, format_stats, note, stream_text
from blazr.errors import ConfigError

Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Print load time and stats to stderr")]


def generate(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model path or name (default: config default_model)")
    ] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", "-p", help="Prompt text (default: read stdin)")
    ] = None,
    verbose_prompt: Annotated[
        bool, typer.Option("--verbose-prompt", help="Print the prompt's token ids and pieces to stderr")
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
    """Complete a prompt as raw text (no chat template); the text streams to stdout."""
    settings = o.settings_from_params(locals())
    text_prompt = prompt if prompt is not None else read_stdin_prompt()
    llm = o.load_llm(
        model,
        settings,
        model_dir,
        speculation=o.speculation_kwargs(
            speculative, draft_model, num_speculative_tokens, settings, model_dir
        ),
        lora=lora,
    )
    if verbose_prompt:
        print_prompt_tokens(llm, text_prompt)
    text = stream_text(llm.stream(text_prompt, **o.sampling_kwargs(settings)))
    end_line(text)
    note(format_stats(llm.last_stats))


def read_stdin_prompt() -> str:
    """The prompt from a pipe (`echo hi | blazr generate`); on a terminal, --prompt is required."""
    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigError("--prompt/-p is required (or pipe the prompt on stdin)")
    text = sys.stdin.read()
    if not text:
        raise ConfigError("--prompt/-p is required: stdin was empty")
    return text


def print_prompt_tokens(llm, prompt: str) -> None:
    """Like llama-cli's --verbose-prompt: each prompt token id with its text piece."""
    ids = llm.tokenize(prompt)
    note(f"prompt: {len(ids)} tokens")
    for token_id in ids:
        note(f"{token_id:>8} -> {llm.detokenize([token_id])!r}")


def run(
    model: o.ModelArgument = None,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="Answer this one prompt and exit (default: a session)"),
    ] = None,
    verbose: Verbose = False,
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
    """Chat with a model: one answer with --prompt, else an interactive session (/clear, /history, /exit)."""
    from blazr.commands.repl import Conversation, answer, run_session

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
    conversation = Conversation()
    if prompt is not None:
        answer(llm, conversation, prompt, o.sampling_kwargs(settings), show_stats=True)
        return
    run_session(llm, conversation, o.sampling_kwargs(settings), kind="run", show_stats=True)
