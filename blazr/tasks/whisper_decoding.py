"""Decoding one 30 s Whisper window (or several at once): greedy, sampled best-of-N, or beam search.

This is openai-whisper's DecodingTask on blazr's decoder: the prompt ([<|startofprev|> previous text]
<|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>]) is fed once per window and copied to the
window's other sequences; then each step feeds one token per live sequence, filters the logits
(blazr.tasks.whisper_filters) and picks. Finished sequences leave the batch (openai-whisper keeps feeding
them EOT). The window's result is the best finished sequence by mean log-probability.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from blazr.tasks.whisper_filters import LogitFilters, log_softmax
from blazr.tasks.whisper_vocab import WhisperVocabulary


@dataclass
class DecodingOptions:
    temperature: float = 0.0
    beam_size: int | None = None  # beam search (temperature 0 only)
    best_of: int | None = None  # independent samples (temperature > 0 only)
    patience: float = 1.0  # beam search: finished candidates to collect = round(beam_size * patience)
    length_penalty: float | None = None  # None: rank by sum / length; else Google NMT's ((5 + n) / 6) ** a
    timestamps: bool = True
    max_initial_timestamp: float | None = 1.0
    suppress_blank: bool = True
    suppress: tuple[int, ...] = ()  # token ids never sampled
    sample_len: int = 224  # tokens sampled at most (half the decoder's 448 positions)
    seed: int | None = None  # sampling: each window's generator is seeded with (seed, its job's seed)

    @property
    def group(self) -> int:
        """Sequences decoded per window."""
        return (self.beam_size if self.temperature == 0 else self.best_of) or 1


@dataclass
class WindowJob:
    window: int  # the cache window holding this audio's encoder output
    prompt: list[int]  # the initial tokens
    sot_index: int  # where <|startoftranscript|> is in the prompt
    seed: int = 0  # the window's own sampling seed: a window samples the same alone or in any batch


@dataclass
class DecodingResult:
    tokens: list[int]  # sampled text and timestamp tokens, no EOT
    text: str
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    sum_logprob: float = 0.0
    finished: bool = True  # False: stopped at sample_len without EOT


def compression_ratio(text: str) -> float:
    """How well the text compresses: a looping transcript compresses far better than speech does."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def initial_tokens(
    vocab: WhisperVocabulary, sot_sequence: list[int], previous: list[int], timestamps: bool, n_ctx: int = 448
):
    """[<|startofprev|> + the last n_ctx / 2 - 1 previous tokens] + sot_sequence [+ <|notimestamps|>], and the
    index of <|startoftranscript|>."""
    prompt = [vocab.sot_prev, *previous[-(n_ctx // 2 - 1) :]] if previous else []
    tokens = prompt + list(sot_sequence) + ([] if timestamps else [vocab.no_timestamps])
    return tokens, len(prompt)


def decode_windows(model, cache, vocab: WhisperVocabulary, jobs: list[WindowJob], opts: DecodingOptions):
    """Decode each job's window (jobs in window order; cache made with opts.group sequences per window)."""
    n, eot = opts.group, vocab.eot
    filters = LogitFilters(
        vocab, opts.suppress, opts.suppress_blank, opts.timestamps, opts.max_initial_timestamp
    )
    rngs = {job.window: np.random.default_rng((opts.seed or 0, job.seed)) for job in jobs}
    firsts = np.array([job.window * n for job in jobs])
    cache.truncate(np.arange(len(cache.lengths)), 0)
    no_speech, step_logits = [], []
    for job, first in zip(jobs, firsts, strict=True):  # one window per prompt call (dense cross-attention)
        logits = model.decode(cache, np.array([first]), [np.array(job.prompt)], all_logits=True)  # (P, V)
        at_sot = log_softmax(logits[job.sot_index][None])[0]
        no_speech.append(float(np.exp(at_sot[vocab.no_speech])))
        step_logits.append(logits[-1])
    step_logits = np.repeat(np.stack(step_logits), n, axis=0)  # (J * n, V)
    seqs = np.array([job.window * n + j for job in jobs for j in range(n)])
    if n > 1:
        cache.reorder(seqs, np.repeat(firsts, n))
    sampled: dict[int, list[int]] = {int(s): [] for s in seqs}
    sums: dict[int, float] = {int(s): 0.0 for s in seqs}
    finished: dict[int, dict[tuple[int, ...], float]] = {job.window: {} for job in jobs}
    live = seqs
    # tokens each window may sample: sample_len, or fewer when its prompt leaves less of the decoder's context
    n_ctx = model.args.max_target_positions
    room = {job.window: min(opts.sample_len, n_ctx - len(job.prompt)) for job in jobs}
    for _ in range(max(room.values())):
        filters.apply(step_logits, [sampled[int(s)] for s in live])
        logprobs = log_softmax(step_logits)  # (B, V)
        if opts.beam_size and opts.temperature == 0:
            live, feed = _beam_step(cache, live, logprobs, sampled, sums, finished, opts, eot)
        else:
            live, feed = _sample_step(
                live, step_logits, logprobs, sampled, sums, finished, opts, eot, rngs, n
            )
        # a sequence that filled its window's room stops unfinished (openai-whisper pads it with EOT)
        full = [len(sampled[int(s)]) >= room[int(s) // n] for s in live]
        feed = [t for t, f in zip(feed, full, strict=True) if not f]
        live = np.array([s for s, f in zip(live, full, strict=True) if not f], dtype=np.int64)
        if not len(live):
            break
        step_logits = model.decode(cache, live, [np.array([t]) for t in feed])
    return [
        _result(job, n, sampled, sums, finished[job.window], no_speech[i], vocab, opts)
        for i, job in enumerate(jobs)
    ]


def _sample_step(live, logits, logprobs, sampled, sums, finished, opts, eot, rngs, n):
    """Greedy (temperature 0) or a sample per sequence; a sequence that picks EOT is finished."""
    if opts.temperature == 0:
        picks = np.argmax(logits, axis=-1)
    else:
        # Gumbel-max: argmax(logits / T + Gumbel noise) is a draw from softmax(logits / T), one vector op
        # per row; each row's noise comes from its window's generator
        noise = np.stack([rngs[int(s) // n].gumbel(size=logits.shape[1]) for s in live]).astype(np.float32)
        picks = np.argmax(logits / np.float32(opts.temperature) + noise, axis=-1)
    keep, feed = [], []
    for row, (seq, token) in enumerate(zip(live, picks, strict=True)):
        seq, token = int(seq), int(token)
        sums[seq] += float(logprobs[row, token])
        if token == eot:
            finished[seq // n][tuple(sampled[seq])] = sums[seq]
        else:
            sampled[seq].append(token)
            keep.append(seq)
            feed.append(token)
    return np.array(keep, dtype=np.int64), feed


def _beam_step(cache, live, logprobs, sampled, sums, finished, opts, eot):
    """openai-whisper's beam search step: per window, the beam_size + 1 best continuations of each beam;
    the best beam_size unfinished ones go on (their caches copied from their sources), finished ones are
    kept until round(beam_size * patience) are collected."""
    beam, n = opts.beam_size, opts.beam_size
    quota = round(beam * opts.patience)
    keep, feed, sources = [], [], []
    new_sampled, new_sums = {}, {}
    for window in sorted({int(s) // n for s in live}):
        rows = [r for r, s in enumerate(live) if int(s) // n == window]
        scores: dict[tuple[int, ...], float] = {}
        origin: dict[tuple[int, ...], int] = {}
        for r in rows:
            seq = int(live[r])
            row = logprobs[r]
            top = np.argpartition(-row, beam)[: beam + 1]
            for token in top[np.lexsort((top, -row[top]))]:  # best first, ties by lower id
                candidate = (*sampled[seq], int(token))
                scores[candidate] = sums[seq] + float(logprobs[r, token])
                origin[candidate] = seq
        done: dict[tuple[int, ...], float] = {}
        slot = 0
        for candidate in sorted(scores, key=scores.get, reverse=True):
            if candidate[-1] == eot:
                done[candidate[:-1]] = scores[candidate]
                continue
            dest = window * n + slot
            new_sampled[dest], new_sums[dest] = list(candidate), scores[candidate]
            keep.append(dest)
            feed.append(candidate[-1])
            sources.append(origin[candidate])
            slot += 1
            if slot == beam:
                break
        for candidate in sorted(done, key=done.get, reverse=True):
            if len(finished[window]) >= quota:
                break
            finished[window][candidate] = done[candidate]
        if len(finished[window]) >= quota:  # this window is done: its beams leave the batch
            drop = set(range(window * n, window * n + n))
            kept = [(k, f, s) for k, f, s in zip(keep, feed, sources, strict=True) if k not in drop]
            keep, feed, sources = (list(x) for x in zip(*kept, strict=True)) if kept else ([], [], [])
            for seq in drop:  # the unfinished ones stay candidates for finalize
                new_sampled.setdefault(seq, sampled.get(seq, []))
    cache.reorder(np.array(keep, dtype=np.int64), np.array(sources, dtype=np.int64))
    for seq in list(sampled):
        if seq in new_sampled:
            sampled[seq], sums[seq] = new_sampled[seq], new_sums.get(seq, sums[seq])
    return np.array(keep, dtype=np.int64), feed


def _result(job, n, sampled, sums, done, no_speech, vocab, opts) -> DecodingResult:
    """The best of the window's finished sequences (unfinished ones count when too few finished)."""
    candidates = dict(done)
    seqs = range(job.window * n, job.window * n + n)
    complete = bool(candidates)
    if len(candidates) < n:
        for seq in sorted(seqs, key=lambda s: sums[s], reverse=True):
            candidates.setdefault(tuple(sampled[seq]), sums[seq])
            if len(candidates) >= n:
                break

    def score(item):
        tokens, logprob = item
        length = len(tokens)
        penalty = length if opts.length_penalty is None else ((5 + length) / 6) ** opts.length_penalty
        return logprob / max(penalty, 1e-9)

    tokens, logprob = max(candidates.items(), key=score)
    text = vocab.decode([t for t in tokens if t < vocab.timestamp_begin]).strip()
    return DecodingResult(
        tokens=list(tokens),
        text=text,
        avg_logprob=logprob / (len(tokens) + 1),
        no_speech_prob=no_speech,
        temperature=opts.temperature,
        compression_ratio=compression_ratio(text),
        sum_logprob=logprob,
        finished=complete,
    )
