"""Talk to `blazr serve` through the official OpenAI client (pip install openai): one answer, then a stream.

blazr serve &
python examples/openai_client.py        # BLAZR_URL (default http://127.0.0.1:8080/v1), BLAZR_API_KEY
"""

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("BLAZR_URL", "http://127.0.0.1:8080/v1"),
    api_key=os.environ.get(
        "BLAZR_API_KEY", "no-key"
    ),  # the client needs one; a server without keys ignores it
)
model = client.models.list().data[0].id  # the model the server serves by default
messages = [{"role": "user", "content": "What is 2+2?"}]

reply = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=24)
print(reply.choices[0].message.content)
print(reply.usage)

stream = client.chat.completions.create(
    model=model, messages=messages, temperature=0, max_tokens=24, stream=True
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
print()
