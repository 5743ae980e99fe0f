"""Stream a chat answer piece by piece, rendered through the model's own chat template."""

import blazr

llm = blazr.load("smollm2")
messages = [{"role": "user", "content": "What is 2+2?"}]
for piece in llm.chat(messages, stream=True, temperature=0, max_tokens=64):
    print(piece, end="", flush=True)
print()
