"""Several requests at once through the AsyncEngine (the API the HTTP server builds on)."""

import asyncio

import blazr
from blazr.engine import AsyncEngine
from blazr.engine.request import SamplingParams


async def main() -> None:
    llm = blazr.load("smollm2", max_seqs=4)
    engine = AsyncEngine(llm.engine)
    prompts = ["The capital of France is", "Water boils at", "The largest planet is"]

    async def complete(prompt: str) -> str:
        ids = llm.tokenize(prompt)
        pieces = [
            out.text async for out in engine.generate(ids, SamplingParams(temperature=0, max_tokens=12))
        ]
        return prompt + "".join(pieces)

    for text in await asyncio.gather(*(complete(p) for p in prompts)):
        print(repr(text))
    engine.shutdown()


asyncio.run(main())
