"""Smoke-test a built archive as a new user would get it: in a clean directory, with no Python on PATH and
HOME an empty directory, `blazr --version`, `blazr pull smollm2`, `blazr generate` and `blazr serve` with one
chat request must work. Prints the archive's size and each step's wall time (the first generate compiles the
CPU kernels inside the archive; a second one shows the cached start).

    python packaging/smoke_test.py dist/blazr-linux-x64.tar.gz
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path


def run(binary: Path, env: dict, *args: str, timeout: float = 900) -> tuple[str, float]:
    start = time.monotonic()
    done = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"blazr {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout, seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_one_chat(binary: Path, env: dict) -> float:
    """Seconds from `blazr serve` to the first chat reply."""
    port = free_port()
    start = time.monotonic()
    server = subprocess.Popen(
        [str(binary), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        while time.monotonic() - start < 600:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        body = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 16}
        request = urllib.request.Request(
            f"{url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as r:
            reply = json.loads(r.read())["choices"][0]["message"]["content"]
        if not reply.strip():
            raise SystemExit("serve: an empty chat reply")
        print(f"serve + one chat: {time.monotonic() - start:.1f} s -> {reply!r}")
        return time.monotonic() - start
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    archive = Path(sys.argv[1]).resolve()
    print(f"{archive.name}: {archive.stat().st_size / 2**20:.0f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with tarfile.open(archive) as t:
            t.extractall(root / "app", filter="data")
        binary = root / "app" / "blazr" / "blazr"
        (root / "home").mkdir()
        (root / "bin").mkdir()  # PATH holds nothing: no Python, no tools
        env = {"HOME": str(root / "home"), "PATH": str(root / "bin"), "LANG": "C.UTF-8"}
        out, seconds = run(binary, env, "--version")
        print(f"--version: {out.strip()} ({seconds:.1f} s)")
        out, seconds = run(binary, env, "pull", "smollm2")
        print(f"pull smollm2: {out.strip()} ({seconds:.1f} s, kernels compiled by its warm-up)")
        prompt = ["-p", "The capital of France is", "--max-tokens", "8", "--temperature", "0"]
        out, seconds = run(binary, env, "generate", *prompt)
        print(f"generate: {out.strip()!r} ({seconds:.1f} s from process start)")
        if "Paris" not in out:
            raise SystemExit("generate did not answer Paris")
        serve_one_chat(binary, env)


if __name__ == "__main__":
    main()
