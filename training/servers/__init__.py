"""Inference servers behind one OpenAI-compatible HTTP contract, and the engine's handle on them.

`start_server(config, base_model, log_path)` starts (or attaches to) a server and returns an `InferenceServer`:
its `base_url` is what an OpenAI client needs; `load_adapter` / `unload_adapter` hot-swap LoRA adapters under
versioned names; `client()` / `async_client()` give the OpenAI client to call it with. Kinds: `local`
(training.servers.local), `inprocess` (the same engine inside this process, training.servers.inprocess), `vllm`
(training.servers.vllm), `external` (a URL).
A server this module starts (local, vllm) listens on a loopback host unless the deployment sets
$STUDIO_INFERENCE_TOKEN; with it, the server requires it of every request (vLLM as VLLM_API_KEY, on /v1) and the
clients here send it. An external URL is never sent the token: it is not ours.
Beside them: the local server's batched sampling (`sampling`) and how an engine process ends (`process_exit`).
May import training's top modules and the model and gpu packages; never a run kind.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from training.config import ChatConfig, ServerConfig
from training.servers.serving import TOKEN_ENV, bind_refusal, inference_token
from training.types import TrainingError

log = logging.getLogger(__name__)


async def close_client(client: Any) -> None:
    """Closes an `async_client()` in the event loop it ran in: left to the garbage collector, the OpenAI client's
    close is scheduled on a loop that asyncio.run has already closed ("Event loop is closed" at the end of a run).
    The in-process client closes at once. Called last when a run ends: an error here is only logged."""
    try:
        closing = client.close()
        if hasattr(closing, "__await__"):
            await closing
    except Exception as err:  # noqa: BLE001 - tidying up must not hide the run's own outcome
        log.warning("closing the inference client failed: %s", err)


class InferenceServer:
    """A running OpenAI-compatible server (owned process or external URL)."""

    def __init__(self, base_url: str, model_name: str, process: subprocess.Popen | None = None,
                 log_path: Path | None = None, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")  # ends in /v1
        self.model_name = model_name  # the served name of the base model
        self.process = process
        self.log_path = log_path
        self.token = token  # the deployment's, for a server it started; None for an external URL
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=120.0, headers=self.headers)
        self.sleeps_during_training = False  # vLLM's sleep mode (server.gpu_sharing 'sleep')

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    def models(self) -> list[str]:
        response = self._http.get(f"{self.base_url}/models")
        response.raise_for_status()
        return [m["id"] for m in response.json()["data"]]

    def load_adapter(self, name: str, path: str | Path) -> None:
        response = self._http.post(f"{self.base_url}/load_lora_adapter",
                                   json={"lora_name": name, "lora_path": str(Path(path).resolve())})
        if response.status_code != 200:
            raise TrainingError(f"the inference server refused adapter {name!r} from {path}: {response.text}")
        if name not in self.models():
            raise TrainingError(f"adapter {name!r} was accepted but is not listed by {self.base_url}/models")

    def unload_adapter(self, name: str) -> None:
        response = self._http.post(f"{self.base_url}/unload_lora_adapter", json={"lora_name": name})
        if response.status_code != 200:
            raise TrainingError(f"the inference server could not unload adapter {name!r}: {response.text}")

    def client(self) -> Any:
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.token or "unused", max_retries=0, timeout=600)

    def async_client(self) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.base_url, api_key=self.token or "unused", max_retries=2, timeout=600)

    def sleep(self) -> None:
        """vLLM's sleep mode, level 1: weights to CPU RAM and the KV cache dropped, so the trainer has the GPU."""
        self._post_sleep_endpoint("/sleep?level=1")

    def wake_up(self) -> None:
        """Weights and KV cache back on the GPU; an error unless the server says it is awake."""
        self._post_sleep_endpoint("/wake_up")
        url = f"{self.root_url}/is_sleeping"
        try:
            response = self._http.get(url)
            sleeping = response.json().get("is_sleeping") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError) as err:
            raise TrainingError(f"the inference server did not say whether it woke up (GET {url}): {err}") from None
        if sleeping is not False:
            raise TrainingError(f"the inference server is still asleep after POST {self.root_url}/wake_up "
                                f"(GET {url} answered {response.status_code} {response.text[:200]!r}); "
                                f"see {self.log_path}")

    def _post_sleep_endpoint(self, path: str) -> None:
        url = f"{self.root_url}{path}"
        try:
            response = self._http.post(url)
        except httpx.HTTPError as err:
            raise TrainingError(f"the inference server did not answer POST {url}: {err}") from None
        if response.status_code != 200:
            hint = " (sleep mode needs VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode)" \
                if response.status_code == 404 else ""
            raise TrainingError(f"the inference server refused POST {url}: {response.status_code} "
                                f"{response.text[:300]}{hint}")

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise TrainingError(f"the inference server exited with code {self.process.returncode} while "
                                    f"starting; see {self.log_path}:\n{_tail(self.log_path)}")
            try:
                if self._http.get(f"{self.root_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        self.stop()
        raise TrainingError(f"the inference server at {self.base_url} was not ready after {timeout_s:.0f}s; "
                            f"see {self.log_path}")

    def stop(self) -> None:
        self._http.close()
        if self.process is None or self.process.poll() is not None:
            return
        group = self.process.pid  # started in its own session: its children (vLLM's engine core) share the group
        _signal_group(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(group, signal.SIGKILL)
            self.process.wait()
        # A child may outlive its parent's exit by a moment (or for good, if it ignored SIGTERM): sweep the group.
        deadline = time.monotonic() + 5
        while _signal_group(group, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_group(group, signal.SIGKILL)

    def __enter__(self) -> "InferenceServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(group: int, sig: int) -> bool:
    """Signals a process group; False when no process of it is left."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    return True


def _tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # A server must not outlive the engine that started it, even when the engine is killed with SIGKILL.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def spawn(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)


def start_server(config: ServerConfig, base_model: str, log_path: Path, *, device: str = "cpu",
                 served_name: str = "base", threads: int = 0, env: dict[str, str] | None = None,
                 chat: ChatConfig | None = None) -> Any:
    """An `InferenceServer`, or for `inprocess` an `InProcessServer` with the same interface. `threads`: the
    local server's torch CPU threads (0: torch's default). `env`: the environment a started server gets, its
    $STUDIO_INFERENCE_TOKEN included (default: this process's). `chat`: the run's chat family and reasoning
    setting (local and inprocess servers sample with the family's training template)."""
    chat = chat or ChatConfig()
    if config.kind == "inprocess":
        from training.servers.inprocess import InProcessServer

        return InProcessServer(base_model, served_name, config.max_lora_rank, device, chat_family=chat.family,
                               reasoning=chat.reasoning)
    if config.kind == "external":
        server = InferenceServer(config.url or "", served_name)
        names = server.models()
        if not names:
            raise TrainingError(f"the external server {config.url} serves no model")
        server.model_name = names[0] if served_name not in names else served_name
        return server
    token = inference_token() if env is None else (env.get(TOKEN_ENV) or None)
    if refusal := bind_refusal(config.host, token):  # at once, not after the server's start times out
        raise TrainingError(f"server.host: {refusal}")
    port = config.port or free_port(config.host)
    if config.kind == "vllm":
        from training.model.chat_templates.serving import vllm_chat_template_args
        from training.servers.vllm import vllm_command

        command, vllm_env = vllm_command(config, base_model, port, served_name)
        command += vllm_chat_template_args(base_model, log_path.parent, family=chat.family,
                                           reasoning=chat.reasoning)
        # With `env` given, vLLM's own settings go on top of it (not this process's whole environment).
        env = vllm_env if env is None else {**env, **{k: v for k, v in vllm_env.items() if os.environ.get(k) != v}}
        if token:  # vLLM's own name for it: every /v1 route then requires the Bearer token
            env["VLLM_API_KEY"] = token
    else:
        command = [sys.executable, "-m", "training.servers.local", "--model", base_model, "--served-model-name",
                   served_name, "--host", config.host, "--port", str(port), "--max-lora-rank",
                   str(config.max_lora_rank), "--device", device, "--threads", str(threads),
                   "--reasoning", chat.reasoning] + (["--chat-family", chat.family] if chat.family else [])
        env = dict(os.environ) if env is None else dict(env)
    server = InferenceServer(f"http://{config.host}:{port}/v1", served_name, spawn(command, env, log_path), log_path,
                             token=token)
    # Between rollouts the trainer takes the GPU: the loop puts a sleep-mode vLLM to sleep for each step.
    server.sleeps_during_training = config.kind == "vllm" and config.gpu_sharing == "sleep"
    server.wait_ready(config.startup_timeout_s)
    return server
