"""The real llama.cpp server (`llama-server`) on loopback, for tests and benchmarks.

`scripts/llama_engine/build.sh` builds the binary and a tiny model that carries the real
Qwen2 tokenizer and chat template; `scripts/test` exports where they are (LLAMA_SERVER,
LLAMA_MODEL, LLAMA_TOKENIZER). Without those variables the default build location under
`~/.cache/fleetgate-llama` is used. A missing engine is an error, never a skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

_HOME = Path(os.environ.get("FLEETGATE_LLAMA_HOME", Path.home() / ".cache" / "fleetgate-llama"))
ALIAS = "tiny-qwen2tok"  # the model name the engine answers with


class EngineMissing(RuntimeError):
    """The llama.cpp build is not there; `scripts/llama_engine/build.sh` makes it."""


@dataclass(frozen=True, slots=True)
class LlamaBuild:
    server: Path
    model: Path
    tokenizer: Path


def find_llama() -> LlamaBuild:
    """Where the built engine, model and tokenizer.json are; EngineMissing when absent."""
    build = LlamaBuild(
        Path(os.environ.get("LLAMA_SERVER", _HOME / "bin" / "llama-server")),
        Path(os.environ.get("LLAMA_MODEL", _HOME / "model" / "fleetgate-tiny-qwen2tok.gguf")),
        Path(
            os.environ.get(
                "LLAMA_TOKENIZER", _HOME / "model" / "fleetgate-tiny-qwen2tok.tokenizer.json"
            )
        ),
    )
    for path in (build.server, build.model, build.tokenizer):
        if not path.exists():
            raise EngineMissing(
                f"{path} is missing: run scripts/llama_engine/build.sh (scripts/test does)"
            )
    return build


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """One `llama-server` process: `n_ctx` tokens of context, `slots` parallel slots."""

    n_ctx: int = 512
    slots: int = 1
    threads: int = 1
    extra: tuple[str, ...] = ()  # more flags, e.g. ("--embeddings",)
    port: int = 0
    model: Path | None = None  # another model file than the build's
    alias: str = ALIAS  # the model name the engine answers with
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        """The server root (llama.cpp serves /tokenize, /props, /slots, /metrics here)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, as a provider's `base_url`."""
        return self.root + "/v1"

    def start(self, timeout: float = 30.0) -> LlamaServer:
        build = find_llama()
        self.port = self.port or free_port()
        args = [
            str(build.server),
            "-m",
            str(self.model or build.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(self.n_ctx),
            "-np",
            str(self.slots),
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "--alias",
            self.alias,
            "--metrics",
            "--slots",
            "--no-webui",
            *self.extra,
        ]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}: {args}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"llama-server on {self.port} not healthy in {timeout}s")
            time.sleep(0.05)
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.root + "/health", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
