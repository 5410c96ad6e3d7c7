"""The in-process engine's fast path: a static KV cache and a torch.compile'd decode step.

transformers' default generate (a dynamic cache that grows every step, one Python-launched kernel
per op) is launch-bound on a GPU: a 7B model at batch 1 took 19-26 ms per token on an H200 against
the 3.5 ms its weights' bytes over the memory bandwidth allow. A static cache gives every decode
step the same tensor shapes, so the step can be compiled once (inductor) and, on CUDA, replayed as
a CUDA graph ("reduce-overhead"): 7.9 ms there. That is the speed a serving stack reaches, so it is
the figure worth reporting.

Compiling takes long (tens of seconds on a GPU) and happens again for every new shape (rows x
cache length). So:
- cache lengths are rounded up to a multiple of BUCKET, giving few shapes;
- the first call at each shape is timed as compile time (`compile_s`), never as a latency figure:
  measurement warms every shape it times before timing it (`warm`);
- the caches of the last few shapes are kept and reused, so a timed run allocates nothing and a
  CUDA graph replays on the same addresses.

Greedy outputs are the same with it on and off (tests/integration/test_engine_fast.py): only the
cache layout and kernel fusion change, as between batch compositions.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from selector.errors import ConfigError

log = logging.getLogger("selector.engines.inprocess.fast")

SETTINGS = ("auto", "on", "off")
BUCKET = 128  # cache lengths are rounded up to this: fewer shapes, fewer compiles
MAX_CACHES = 2  # static caches kept for reuse (latency at batch 1, throughput at one batch size, ...)


class CompileError(RuntimeError):
    """engine.compile=on, and compiling the decode step failed here (the cause is in the message).
    A variant that raises it is recorded as failed with that reason; the sweep goes on."""


def compile_setting(value: Any) -> str:
    """auto | on | off. YAML 1.1 reads a bare `on`/`off` as a boolean, so true/false mean on/off."""
    text = str(value).strip().lower()
    text = {"true": "on", "false": "off", "1": "on", "0": "off", "yes": "on", "no": "off"}.get(text, text)
    if text not in SETTINGS:
        raise ConfigError("engine", field="compile", problem=f"must be one of {', '.join(SETTINGS)}, got {value!r}")
    return text


def bucket(length: int) -> int:
    return -(-length // BUCKET) * BUCKET


class FastPath:
    """Runs `model.generate` on a static cache with a compiled decode step, or plainly when off.

    setting: auto (on for CUDA, off for CPU) | on | off. With `on`, a model transformers will not
    compile, or a compile that fails, raises CompileError; with `auto` it falls back to the plain
    path, logs why and says so in `note`.
    """

    def __init__(self, model: Any, setting: Any = "off") -> None:
        import torch

        self.model, self.setting = model, compile_setting(setting)
        self.device = next(model.parameters()).device
        cuda = self.device.type == "cuda"
        self.active = self.setting == "on" or (self.setting == "auto" and cuda)
        self.compile_s = 0.0  # first calls at each new shape: dominated by compiling
        self.note = "" if self.active else f"engine.compile={self.setting} on {self.device.type}: plain generate"
        self._caches: OrderedDict[tuple[int, int], Any] = OrderedDict()
        self._warm: set[tuple[int, int]] = set()
        self._torch = torch
        if self.active:
            from transformers import CompileConfig

            # CUDA graphs remove the per-kernel launch cost that dominates decoding on a GPU;
            # on CPU there are none, and transformers only compiles there when told to.
            # fullgraph: a step that does not compile whole (a graph break, a module wrapper that
            # recompiles per layer, as compressed-tensors' offload hooks do) fails at once, rather
            # than running partly eager and slower than not compiling at all (measured: 121 ms
            # against 4.8 ms per token for a tiny compressed-tensors model on CPU).
            self.config = CompileConfig(fullgraph=True, dynamic=None, mode="reduce-overhead" if cuda else "default")
            if not cuda:
                # transformers declares this private flag `= None` without a type: mypy reads it as None only
                self.config._compile_all_devices = True  # type: ignore[assignment]
            quantizer = getattr(model, "hf_quantizer", None)
            if quantizer is not None and not quantizer.is_compileable:
                self._give_up(f"transformers does not compile models quantized with {type(quantizer).__name__}")

    # ---- generation ------------------------------------------------------------------------
    def generate(self, **kwargs: Any) -> Any:
        """`model.generate(**kwargs)`; on the fast path with a static cache sized to the call's bucket."""
        if not self.active:
            return self.model.generate(**kwargs)
        key = self._key(kwargs["input_ids"], kwargs["max_new_tokens"])
        first = key not in self._warm
        cache = self._cache(key)
        t0 = time.perf_counter()
        try:
            out = self.model.generate(**kwargs, past_key_values=cache, cache_implementation=None,
                                      compile_config=self.config)
        except Exception as e:
            if not (first and _is_compile_failure(e)):
                raise
            self._give_up(f"torch.compile failed on {self.device.type}: {_one_line(e)}", e)
            return self.model.generate(**kwargs)  # auto: the plain path, which is what ran before
        if first:
            self._sync()
            self.compile_s += time.perf_counter() - t0
            self._warm.add(key)
            if getattr(self.model, "_compiled_call", None) is None:  # transformers declined to compile
                self._give_up("transformers ran the decode step uncompiled (see its warning in the log)")
            else:
                log.info("compiled the decode step for %d rows x %d cached tokens (%.1f s so far)",
                         key[0], key[1], self.compile_s)
        return out

    def warm(self, input_ids: Any, max_new_tokens: int, pad_id: int) -> None:
        """Compile for this shape now, so that timing it later measures only the run."""
        if not self.active or self._key(input_ids, max_new_tokens) in self._warm:
            return
        with self._torch.inference_mode():
            self.generate(input_ids=input_ids, attention_mask=self._torch.ones_like(input_ids),
                          max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                          num_beams=1, pad_token_id=pad_id)

    # ---- helpers ---------------------------------------------------------------------------
    def _key(self, ids: Any, max_new_tokens: int) -> tuple[int, int]:
        return int(ids.shape[0]), bucket(int(ids.shape[1]) + int(max_new_tokens))

    def _cache(self, key: tuple[int, int]) -> Any:
        from transformers import StaticCache

        cache = self._caches.pop(key, None)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=key[1])
        else:
            cache.reset()  # same tensors, zeroed: a CUDA graph replays on the same addresses
        self._caches[key] = cache
        while len(self._caches) > MAX_CACHES:
            self._caches.popitem(last=False)
        return cache

    def _give_up(self, why: str, cause: BaseException | None = None) -> None:
        self.active, self._caches = False, OrderedDict()
        if self.setting == "on":
            raise CompileError(f"engine.compile=on: {why}") from cause
        self.note = f"engine.compile=auto fell back to plain generate: {why}"
        log.warning("%s", self.note)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)


def _is_compile_failure(e: BaseException) -> bool:
    from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException

    return isinstance(e, (TorchDynamoException, FailOnRecompileLimitHit))


def _one_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:300]}" if lines else type(e).__name__
