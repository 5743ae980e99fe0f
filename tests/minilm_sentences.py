"""50 varied sentences for the real all-MiniLM-L6-v2 check, and the sentence pairs whose similarity ranking
(an STS-style ordering) blazr must reproduce. Used by tests/parity/make_minilm_reference.py and
tests/test_embed_minilm.py."""

from __future__ import annotations

SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome.",
    "The new movie is so great!",
    "The cat sits outside.",
    "The dog plays in the garden.",
    "I love pasta.",
    "Do you like pizza?",
    "How do I reset my password?",
    "Click 'Forgot password' on the sign-in page to get a reset link by email.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.",
    "The stock market fell 3% on Tuesday after the central bank raised interest rates.",
    "Interest rates went up and shares dropped.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Plants use sunlight to make sugar from carbon dioxide and water.",
    "def add(a, b): return a + b",
    "A Python function that returns the sum of two numbers.",
    "SELECT name FROM users WHERE age > 30;",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "The quick brown fox jumps over the lazy dog.",
    "Le chat est sur la table.",
    "El perro corre en el parque.",
    "東京は日本の首都です。",
    "🙂 great job, thanks!!!",
    "ok",
    "?",
    "1234567890",
    "The meeting was moved to 3:30 PM on 12/05/2026.",
    "Please reschedule the meeting for later this afternoon.",
    "Heavy rain is expected across the region tomorrow.",
    "Tomorrow's forecast: storms and flooding in the area.",
    "She won the marathon despite an injury.",
    "The athlete finished first although she was hurt.",
    "Quantum computers use qubits that can be in superposition.",
    "My laptop battery drains too fast.",
    "The phone's battery life is terrible.",
    "Astronauts repaired the telescope during a spacewalk.",
    "NASA crew fixed Hubble while outside the station.",
    "   leading and trailing spaces   ",
    "UPPER CASE TEXT SHOULD MATCH LOWER CASE TEXT",
    # longer than the model's 256-token limit: truncated to its first 256 tokens as sentence-transformers does
    " ".join(
        ["The history of the region spans many centuries of trade, conflict and cultural exchange."] * 20
    ),
)
assert len(SENTENCES) == 50

# (i, j) pairs whose cosine similarities are ranked: paraphrases, related and unrelated pairs
PAIRS = (
    (0, 1), (0, 2), (3, 6), (4, 7), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16), (17, 18),
    (18, 19), (20, 21), (22, 23), (24, 25), (25, 26), (27, 28), (29, 30), (36, 37), (38, 39), (40, 41),
    (43, 44), (45, 46), (42, 43), (33, 34), (47, 48),
)  # fmt: skip
