"""The engine of our own inference server on transformers + peft: model, adapters, batching, the chat contract.

`training.servers.local` serves it over HTTP and `training.servers.inprocess` inside the training process; both
answer as `vllm serve --enable-lora` does where the training loop depends on it (chat completions with n,
temperature, top_p, max_tokens, stop, seed, tools, logprobs, ignore_eos and return_token_ids; runtime loading
and unloading of LoRA adapters by name; the same error statuses). A request's parameters are checked before
anything is queued (`training.servers.chat_request`: 400 naming the parameter).
Concurrent requests for the same model (base or adapter) are sampled together in one batch, as vLLM batches:
the batch keeps collecting while requests keep arriving (a quiet gap closes it, a cap bounds the wait).
An adapter loaded where an unloaded one of the same shape was is copied into that one's LoRA weights in place,
which is much cheaper than building new peft modules; the served name is still the one the load asked for.
The adapter loaded last is also folded into a plain copy of the model (`training.servers.folded`) and sampled
without peft's per-layer dispatch; the copy shares every weight with the base but the adapted layers'.
"""
from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.model.chat_format import pad_token_id, prompt_ids as chat_prompt_ids
from training.model.chat_templates import install, tool_calls
from training.servers.chat_request import ChatParams, MAX_N, RequestError, chat_params
from training.servers.folded import FoldedCopy, foldable

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
BATCH_GAP_S = 0.01  # the batch closes when no request joined it for this long ...
BATCH_CAP_S = 0.1  # ... or when it has waited this long
FREE_SLOTS = 2  # unloaded adapters whose LoRA modules are kept to be refilled in place


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param  # the request parameter a 400 is about (OpenAI's error `param`)


@dataclass
class Job:
    model: str
    prompt: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    ignore_eos: bool = False
    future: Future = field(default_factory=Future)
    on_token: Callable[[int], None] | None = None  # a streamed choice's: each sampled id, on the worker thread


class Engine:
    """Holds the model and adapters; one worker thread runs every forward pass (and adapter change)."""

    def __init__(self, model_dir: str, served_name: str, max_lora_rank: int, device: str,
                 batch_gap_s: float = BATCH_GAP_S, max_n: int = MAX_N, chat_family: str | None = None,
                 reasoning: str = "keep") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.device = device
        self.base = AutoModelForCausalLM.from_pretrained(model_dir).to(device).eval()
        self.model: Any = self.base  # becomes a PeftModel once an adapter is loaded
        self.plain = FoldedCopy(self.base)  # taken before peft adapts the base's modules in place
        self.folded: str | None = None  # the served name whose adapter `self.plain` computes
        self.served_name = served_name
        self.model_dir = model_dir
        self.batch_gap_s = batch_gap_s
        self.max_n = max_n
        self.max_lora_rank = max_lora_rank
        self.adapters: dict[str, str] = {}  # served name -> path
        # peft module names cannot hold "." (a run name may), so each adapter gets a plain internal name.
        self.peft_names: dict[str, str] = {}
        self.free_slots: list[tuple[str, str]] = []  # (shape signature, peft name) of unloaded adapters
        self.slot_shapes: dict[str, str] = {}  # peft name -> shape signature
        self.slot_params: dict[str, dict[str, Any]] = {}  # peft name -> its LoRA parameters by saved name
        self.loaded_count = 0
        self.jobs: queue.Queue[Job | tuple | None] = queue.Queue()
        self.lock = threading.Lock()
        self.stopped = False
        self.context = getattr(self.base.config, "max_position_embeddings", 2048)
        # A known family samples with its training template (training.model.chat_templates), so each turn's prompt is
        # the one the trainer renders for it; its turns end at its own marker, and its tool calls are its format.
        self.chat_family = install(self.tokenizer, name=chat_family, reasoning=reasoning,  # type: ignore[arg-type]
                                   model_type=getattr(self.base.config, "model_type", None))
        self.stop_ids = {self.tokenizer.eos_token_id}
        self.pad_id = pad_token_id(self.tokenizer)  # EOS where there is no pad token (Llama, Mistral)
        if self.chat_family is not None:
            self.stop_ids.add(self.tokenizer.convert_tokens_to_ids(self.chat_family.end_of_turn))
        self.worker = threading.Thread(target=self._work, daemon=True, name="inference-engine")
        self.worker.start()

    # Adapter changes run on the worker thread so they never race a forward pass.
    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        if threading.current_thread() is self.worker:  # a job of this thread: waiting on the queue would deadlock
            try:
                fut.set_result(fn(*args))
            except Exception as err:  # noqa: BLE001 - handed back through the future, as from the queue
                fut.set_exception(err)
            return fut
        self._put((fn, args, fut))
        return fut

    def call(self, fn, *args) -> Any:
        return self.submit(fn, *args).result()

    def _put(self, item: Job | tuple) -> None:
        with self.lock:  # nothing joins the queue after stop(), so nothing waits there for a thread that has ended
            if self.stopped:
                raise ApiError(503, "the inference engine has stopped")
            self.jobs.put(item)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.jobs.put(None)

    def load_adapter(self, name: str, path: str) -> None:
        # Same statuses as vLLM: 400 for a name in use, 404 for a path without an adapter.
        if name == self.served_name:
            raise ApiError(400, f"The lora adapter '{name}' conflicts with a served base model.")
        if name in self.adapters:
            raise ApiError(400, f"The lora adapter '{name}' has already been loaded.")
        config_file = Path(path) / "adapter_config.json"
        if not config_file.exists():
            raise ApiError(404, f"Loading lora {name} failed: No adapter found for {path}")
        adapter_config = json.loads(config_file.read_text())
        rank = adapter_config.get("r", 0)
        if rank > self.max_lora_rank:
            raise ApiError(400, f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}.")
        shape = json.dumps({k: sorted(v) if isinstance(v := adapter_config.get(k), list) else v for k in (
            "r", "lora_alpha", "target_modules", "use_rslora", "use_dora", "bias", "modules_to_save",
            "rank_pattern", "alpha_pattern", "layers_to_transform")}, sort_keys=True, default=str)
        peft_name = self._refill(shape, Path(path))
        if peft_name is None:
            from peft import PeftModel

            self.loaded_count += 1
            peft_name = f"adapter{self.loaded_count}"
            if self.model is self.base:
                self.model = PeftModel.from_pretrained(self.base, path, adapter_name=peft_name).eval()
            else:
                self.model.load_adapter(path, adapter_name=peft_name)
            self.slot_shapes[peft_name] = shape
            self.plain.find_layers(self.model)
        self.adapters[name] = path
        self.peft_names[name] = peft_name
        self.folded = name if foldable(adapter_config) and self.plain.fold(peft_name) else None

    def _refill(self, shape: str, path: Path) -> str | None:
        """Copies the adapter's weights into a free slot of the same shape; None when there is none."""
        slot = next((peft for s, peft in self.free_slots if s == shape), None)
        if slot is None:
            return None
        from safetensors.torch import load_file

        weights_file = path / "adapter_model.safetensors"
        if not weights_file.exists():
            raise ApiError(404, f"Loading lora failed: No adapter weights found in {path}")
        weights = load_file(weights_file, device=self.device)
        # The slot's parameters under the names the file uses (peft saves them without the adapter's name),
        # found once per slot: walking every parameter of the model costs more than the copy itself.
        if slot not in self.slot_params:
            self.slot_params[slot] = {name.replace(f".{slot}.", "."): p for name, p in self.model.named_parameters()
                                      if f".{slot}." in name}
        params = self.slot_params[slot]
        if params.keys() != weights.keys() or any(params[k].shape != w.shape for k, w in weights.items()):
            return None  # not the same shape after all: it gets modules of its own
        with self.torch.no_grad():
            for key, w in weights.items():
                params[key].copy_(w)
        self.free_slots.remove((shape, slot))
        return slot

    def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.")
        peft_name = self.peft_names.pop(name)
        del self.adapters[name]
        if self.folded == name:
            self.folded = None
        # The name is gone from the served list at once; its LoRA modules wait to be refilled by the next load.
        self.free_slots.append((self.slot_shapes[peft_name], peft_name))
        while len(self.free_slots) > FREE_SLOTS:
            _, oldest = self.free_slots.pop(0)
            keep = next(iter(self.peft_names.values()), None) or self.free_slots[-1][1]
            self.model.set_adapter(keep)  # never delete the active adapter (peft keeps a stale name then)
            self.model.delete_adapter(oldest)
            del self.slot_shapes[oldest]
            self.slot_params.pop(oldest, None)

    def _work(self) -> None:
        while True:
            item = self.jobs.get()
            if item is None:  # stop(): an in-process engine's thread ends with its server
                self._refuse_queued()
                return
            if isinstance(item, tuple):
                fn, args, fut = item
                try:
                    fut.set_result(fn(*args))
                except Exception as err:  # noqa: BLE001 - handed back to the request thread
                    fut.set_exception(err)
                continue
            batch = [item]
            opened = time.monotonic()
            deadline = opened + (self.batch_gap_s if item.seed is None else 0)  # seeded: alone
            while (left := deadline - time.monotonic()) > 0:
                try:
                    nxt = self.jobs.get(timeout=left)
                except queue.Empty:
                    break
                if nxt is None or isinstance(nxt, tuple) or nxt.seed is not None \
                        or (nxt.model, nxt.ignore_eos) != (item.model, item.ignore_eos):
                    self.jobs.put(nxt)  # stop, adapter changes and other models wait for the next round
                    break
                batch.append(nxt)
                deadline = min(time.monotonic() + self.batch_gap_s, opened + BATCH_CAP_S)  # more may be on the way
            try:
                samples = self._sample(batch)
            except Exception as err:  # noqa: BLE001
                for job in batch:
                    job.future.set_exception(err)
                continue
            for job, s in zip(batch, samples):
                job.future.set_result(s)

    def _refuse_queued(self) -> None:
        error = ApiError(503, "the inference engine has stopped")
        while not self.jobs.empty():
            item = self.jobs.get()
            if item is not None:
                (item[2] if isinstance(item, tuple) else item.future).set_exception(error)

    def _sample(self, batch: list[Job]) -> list:
        from training.servers.sampling import sample_batch

        generator = None
        if batch[0].seed is not None:
            generator = self.torch.Generator(self.device).manual_seed(batch[0].seed)
        kwargs = dict(
            prompts=[j.prompt for j in batch], max_tokens=[j.max_tokens for j in batch],
            temperature=[j.temperature for j in batch], top_p=[j.top_p for j in batch],
            stop_ids=set() if batch[0].ignore_eos else set(self.stop_ids),
            pad_id=self.pad_id, generator=generator,
        )
        if any(j.on_token for j in batch):
            def on_step(ids: list[int], live: list[bool]) -> None:
                for job, token, sampling in zip(batch, ids, live):
                    if sampling and job.on_token is not None:
                        job.on_token(token)

            kwargs["on_step"] = on_step
        if batch[0].model == self.served_name:
            # Unloaded adapters keep their LoRA modules (free slots), so the base is always served through
            # disable_adapter(), never through the bare module, which would still apply the active slot.
            if self.model is self.base:
                return sample_batch(self.base, **kwargs)
            with self.model.disable_adapter():
                return sample_batch(self.model, **kwargs)
        if batch[0].model == self.folded:
            return sample_batch(self.plain.model, **kwargs)
        self.model.set_adapter(self.peft_names[batch[0].model])
        return sample_batch(self.model, **kwargs)

    # ---- request handling (request threads) ----

    def models(self) -> dict:
        data = [{"id": self.served_name, "object": "model", "owned_by": "rubric-studio", "root": self.model_dir,
                 "parent": None, "max_model_len": self.context}]
        data += [{"id": n, "object": "model", "owned_by": "rubric-studio", "root": p, "parent": self.served_name}
                 for n, p in self.adapters.items()]
        return {"object": "list", "data": data}

    def chat(self, body: dict) -> dict:
        """Answers a chat completion request, waiting on this (request) thread for its samples."""
        params, prompt_ids, jobs = self._prepare(body)
        return self._response(params, prompt_ids, [job.future.result() for job in jobs])

    async def chat_async(self, body: dict) -> dict:
        """`chat` for an event loop: the wait for the samples holds no thread, so the requests of a batch do not
        each need one (the sampling itself stays on the worker thread)."""
        params, prompt_ids, jobs = self._prepare(body)
        samples = await asyncio.gather(*(asyncio.wrap_future(job.future) for job in jobs))
        return self._response(params, prompt_ids, list(samples))

    def _prepare(self, body: dict, on_token: Callable[[int], Callable[[int], None]] | None = None,
                 ) -> tuple[ChatParams, list[int], list[Job]]:
        """Validates the request, renders its prompt and queues one job per choice; `on_token(i)` (a streamed
        request's, training.servers.streaming) is given choice i's sampled ids as they come."""
        try:
            params = chat_params(body, self.max_n)
        except RequestError as err:
            raise ApiError(400, str(err), err.param) from None
        if params.stream and on_token is None:  # one JSON body would leave an OpenAI client waiting for events
            raise ApiError(400, "`stream`: only the local server's HTTP route streams; send stream: false.", "stream")
        model = params.model
        if not isinstance(model, str) or (model != self.served_name and model not in self.adapters):
            raise ApiError(404, f"The model `{model}` does not exist.")
        try:  # the trainer's own rendering (the family's shaping and template): it trains after these very ids
            prompt_ids = chat_prompt_ids(self.tokenizer, params.messages, params.tools)
        except Exception as err:  # noqa: BLE001 - a malformed message list is the caller's error
            raise ApiError(400, f"cannot apply the chat template: {err}", "messages") from None
        room = self.context - len(prompt_ids)
        # Left out, max_tokens is what the context has left (as vLLM); given, it is at least 1 (chat_params).
        max_tokens = params.max_tokens or params.max_completion_tokens or room
        if room <= 0 or max_tokens > room:
            raise ApiError(400, f"`max_tokens` is {max_tokens}, more than the {max(room, 0)} tokens left: this "
                                f"model's maximum context length is {self.context} tokens and the prompt has "
                                f"{len(prompt_ids)}.", "max_tokens")
        temperature = 1.0 if params.temperature is None else params.temperature
        top_p = 1.0 if params.top_p is None else params.top_p
        jobs = [Job(model, prompt_ids, max_tokens, temperature, top_p,
                    None if params.seed is None else params.seed + i, bool(params.ignore_eos),
                    on_token=on_token(i) if on_token else None)
                for i in range(params.n or 1)]
        for job in jobs:
            self._put(job)
        return params, prompt_ids, jobs

    def _response(self, params: ChatParams, prompt_ids: list[int], samples: list) -> dict:
        stops = [params.stop] if isinstance(params.stop, str) else params.stop or []
        choices = [self._choice(i, s, stops, params.tools, bool(params.logprobs)) for i, s in enumerate(samples)]
        completion_tokens = sum(len(c["token_ids"]) for c in choices)
        response = {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": params.model, "choices": choices,
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": completion_tokens,
                      "total_tokens": len(prompt_ids) + completion_tokens},
        }
        if params.return_token_ids:
            response["prompt_token_ids"] = prompt_ids
        else:
            for c in choices:
                del c["token_ids"]
        return response

    def _choice(self, index: int, sample: Any, stops: list[str], tools: Any, logprobs: bool) -> dict:
        ids, lps, finish = sample.token_ids, sample.logprobs, sample.finish_reason
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        for s in stops:  # OpenAI semantics: cut before the stop string; keep the ids that produced it
            if s and s in text:
                text, finish = text[: text.index(s)], "stop"
                keep = next(k for k in range(1, len(ids) + 1) if s in self.tokenizer.decode(ids[:k]))
                ids, lps = ids[:keep], lps[:keep]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools and self.chat_family is not None:
            # Markers such as Mistral's [TOOL_CALLS] are special tokens: the parser reads them (as vLLM's does).
            raw = self.tokenizer.decode([t for t in ids if t not in self.stop_ids], skip_special_tokens=False)
            content, calls = tool_calls.parse(self.chat_family.tool_format, raw)
            if calls:
                message["content"] = content
                message["tool_calls"] = [{"id": c.get("id") or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                          "function": {"name": c["name"], "arguments": c["arguments"]}}
                                         for c in calls]
                finish = "tool_calls"
        elif tools:
            calls = []
            for raw in TOOL_CALL.findall(text):
                try:
                    parsed = json.loads(raw)
                    calls.append({"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {
                        "name": str(parsed["name"]), "arguments": json.dumps(parsed.get("arguments", {}))}})
                except (ValueError, KeyError, TypeError):
                    continue  # not a well-formed call: it stays in the content, as the model wrote it
            if calls:
                message["tool_calls"] = calls
                message["content"] = TOOL_CALL.sub("", text).strip() or None
                finish = "tool_calls"
        choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": finish, "token_ids": ids}
        if logprobs:
            choice["logprobs"] = {"content": [
                {"token": self.tokenizer.convert_ids_to_tokens(t), "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(ids, lps)]}
        else:
            choice["logprobs"] = None
        return choice
