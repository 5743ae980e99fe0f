"""Speculative decoding: drafters propose tokens (prompt lookup in ngram.py, a smaller model in
draft_model.py), the target model checks them all in one batched forward pass (verify.py), and the scheduler
keeps the KV blocks of accepted tokens only. Import the submodules directly (the runner imports verify.py,
and draft_model.py imports the runner)."""
