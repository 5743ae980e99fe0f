"""Complete a prompt greedily with the default model (pulled on first use)."""

import blazr

llm = blazr.load("smollm2")
print(llm.generate("The capital of France is", temperature=0, max_tokens=12))
print(llm.last_stats)
