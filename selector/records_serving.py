"""A record's server (RunRecord.serving: what vLLM was and how it ran the weights) and its answers
against in-process ones (RunRecord.agreement)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from selector.records_strict import StrictModel


class ServingInfo(StrictModel):
    """A server the harness started for the variant (engine=vllm): what it was and how it ran the
    weights, read from its own log (server.log in the variant's folder). The report labels it as
    the record says (`shown`), never assuming which server it was."""

    engine: str  # vllm
    # What the engine calls itself in the report ("vLLM"), as it said when it wrote the record; ""
    # in records from before: the report shows `engine` then.
    label: str = ""
    version: str = ""
    command: list[str] = Field(default_factory=list)
    start_s: float | None = None  # from launch to answering /health (vLLM's first start compiles)
    quantization: str | None = None  # the method vLLM loaded the checkpoint with (None: not quantized)
    kernels: list[str] = Field(default_factory=list)  # the linear kernels it picked, e.g. CPUWNA16LinearKernel
    schemes: list[str] = Field(default_factory=list)  # the quantization schemes those kernels ran
    packed: bool | None = None  # quantized weights served by a kernel that reads them packed (None: not quantized)
    log: str = "server.log"
    instances: int = 1  # servers on this machine, requests spread over them round-robin
    cores: list[str] = Field(default_factory=list)  # each instance's CPU list (VLLM_CPU_OMP_THREADS_BIND); []: vLLM's own
    logs: list[str] = Field(default_factory=list)  # each instance's log, in the variant's folder
    requests: list[int | None] = Field(default_factory=list)  # each instance's finished requests (its /metrics)

    @property
    def shown(self) -> str:
        """The server's name in the report: its own label, else (an older record) its engine."""
        return self.label or self.engine


class EngineAgreement(StrictModel):
    """One task evaluated both in-process (engine=hf) and through the server on the same checkpoint."""

    n: int  # items scored both ways
    differ: int  # items whose answer (or multiple-choice pick) differs
    in_process_value: float
    served_value: float
    examples: list[dict[str, Any]] = Field(default_factory=list)  # {id, in_process, served}, a few
