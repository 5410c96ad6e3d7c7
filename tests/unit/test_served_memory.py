"""A served variant's memory and log-probabilities, without a model server: the footprint of a real
process and the KV gauge of a real /metrics page (engines/served/footprint.py), the top-k rows a server
returns (engines/served/running.py top_of), and which precisions a server can load."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from selector.engines.served.running import top_of, unservable
from selector.engines.served.footprint import KV_USAGE_GAUGES, ServerFootprint, gauge
from tests.factories import selector_config

MB = 2**20
METRICS = ('# TYPE vllm:kv_cache_usage_perc gauge\n'
           'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
           'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n')


def test_a_gauge_is_summed_over_its_label_sets_and_the_first_name_present_wins() -> None:
    two = METRICS + 'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5\n'
    assert gauge(two, KV_USAGE_GAUGES) == pytest.approx(0.75)
    assert gauge("vllm:gpu_cache_usage_perc 0.4\n", KV_USAGE_GAUGES) == pytest.approx(0.4)  # older vLLM's name
    assert gauge("vllm:num_requests_running 3\n", KV_USAGE_GAUGES) is None


@dataclass
class Holder:
    """A started process standing in the place of a server: what ServerFootprint reads of one."""

    process: subprocess.Popen  # type: ignore[type-arg]

    def processes(self) -> list[Any]:
        return [self.process]


@pytest.fixture
def metrics_url() -> Iterator[str]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


def test_what_serving_needs_is_the_footprint_with_the_pool_replaced_by_its_used_part(metrics_url: str) -> None:
    """A process holding 200 MB (its 'KV pool' said to be 100 MB, a quarter in use at the peak): the
    footprint is its resident peak, and the variant needs that less three quarters of the pool."""
    holder = Holder(subprocess.Popen([sys.executable, "-c", "import sys, time; x = bytearray(200 * 2**20); "
                                      "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True))
    try:
        assert holder.process.stdout is not None and holder.process.stdout.readline().strip() == "ready"
        footprint = ServerFootprint([holder], [metrics_url], kv_pool_bytes=lambda: 100 * MB)
        footprint.start()
        result = footprint.result(weight_bytes=50 * MB, artifact_bytes=None)
        footprint.stop()
    finally:
        holder.process.kill()
        holder.process.wait()
    held = result.footprint.rss_bytes
    assert 200 * MB < held < 400 * MB  # the bytearray and an interpreter
    assert footprint.kv_usage == [pytest.approx(0.25)]
    assert result.kv_pool_bytes == 100 * MB and result.kv_peak_bytes == 25 * MB
    assert result.serving.rss_bytes == held - 100 * MB + 25 * MB
    assert result.runtime_rss_bytes == max(0, footprint.ready_rss - 100 * MB - 50 * MB)
    assert result.weights_source == "checkpoint" and result.weight_bytes == 50 * MB


def test_a_servers_top_k_rows_become_tensors_most_likely_first() -> None:
    import torch

    rows = [{1: -0.1}, {7: -2.0, 3: -0.5}, {4: -1.0, 5: -0.2, 6: -3.0}]
    top = top_of(rows, positions=2)
    assert top.ids.tolist() == [[3, 7, -1], [5, 4, 6]]  # the first row is not among the last two positions
    assert top.logp[0, :2].tolist() == pytest.approx([-0.5, -2.0]) and top.logp[0, 2] == float("-inf")
    assert torch.equal(top.logp[1], torch.tensor([-0.2, -1.0, -3.0]))


@pytest.mark.parametrize(("precision", "why"), [
    ("bf16", None), ("gptq-int4", None),
    ("int8", "not servable: precision=int8 (bnb) quantizes while loading in transformers"),
])
def test_a_precision_that_exists_only_in_memory_is_not_servable(precision: str, why: str | None, tmp_path) -> None:  # type: ignore[no-untyped-def]
    got = unservable(selector_config(tmp_path, precision=precision))
    assert got == why if why is None else got.startswith(why)
