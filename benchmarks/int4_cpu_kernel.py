"""Why a GPTQ int4 variant evaluates slower than bf16 on CPU (issue 34's warm run): the int4 kernel
gptqmodel runs on CPU (`torch.ops.aten._weight_int4pack_mm_for_cpu`, called as its TorchFusedLinear
calls it) against a bf16 matmul, one linear layer of Qwen2.5-Coder-1.5B at a time, for M rows (M
tokens of a prompt at once: 1 is a decode step, hundreds a prefill). Beside them, what unpacking
the layer's GPTQ weights to bf16 costs (int32-packed codes, zero points and group scales, as
gptqmodel's own dequantize does), which a prefill path through bf16 weights would pay per call.

    python -m benchmarks.int4_cpu_kernel [--threads 2] [--repeats 20]

Results: benchmarks/results/int4_cpu_kernel.json and .md. Random weights: the kernels' time does
not depend on the values.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from benchmarks.common import machine, say, write_results

# (name, in_features, out_features) of one Qwen2.5-Coder-1.5B decoder layer's linear layers
LAYERS = (("q_proj", 1536, 1536), ("k_proj", 1536, 256), ("gate_proj", 1536, 8960), ("down_proj", 8960, 1536))
ROWS = (1, 8, 64, 256)
GROUP = 128


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # the first call allocates and packs
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def one_layer(k: int, n: int, repeats: int) -> list[dict[str, Any]]:
    import torch

    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)  # gptqmodel's innerKTiles
    scales = torch.rand(k // GROUP, n, dtype=torch.bfloat16) * 0.01
    scales_and_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=2).contiguous()
    dense = torch.randn(n, k, dtype=torch.bfloat16)
    # GPTQ's own layout: 8 codes per int32 along K, one zero point and scale per group and column
    qweight = torch.randint(-2**31, 2**31 - 1, (k // 8, n), dtype=torch.int32)
    zeros = torch.randint(0, 16, (k // GROUP, n), dtype=torch.int8)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32).view(1, 8, 1)

    def unpack() -> Any:
        w = ((qweight.unsqueeze(1) >> shifts) & 15).to(torch.int8).reshape(k, n)
        w = (w.view(k // GROUP, GROUP, n) - zeros.unsqueeze(1)).to(torch.bfloat16) * scales.unsqueeze(1)
        return w.reshape(k, n)

    unpack_ms = median_ms(unpack, repeats)
    rows = []
    for m in ROWS:
        x = torch.randn(m, k, dtype=torch.bfloat16)
        int4 = median_ms(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, scales_and_zeros),
                         repeats)
        bf16 = median_ms(lambda: x @ dense.t(), repeats)
        rows.append({"m": m, "int4_ms": round(int4, 3), "bf16_ms": round(bf16, 3), "unpack_ms": round(unpack_ms, 3),
                     "int4_over_bf16": round(int4 / bf16, 2), "unpack_plus_bf16_over_int4": round((unpack_ms + bf16) / int4, 2)})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = []
    for name, k, n in LAYERS:
        say(f"{name} {k}x{n}")
        results.extend({"layer": name, "in": k, "out": n, **row} for row in one_layer(k, n, args.repeats))
    data = {"machine": machine(args.threads), "group_size": GROUP, "repeats": args.repeats, "results": results}
    lines = ["# gptqmodel's CPU int4 kernel against bf16, per linear layer of Qwen2.5-Coder-1.5B", "",
             f"`python -m benchmarks.int4_cpu_kernel --threads {args.threads} --repeats {args.repeats}`; "
             f"{data['machine']['cpu']}, torch {torch.__version__}, {args.threads} threads; median ms per call.", "",
             "| layer | M rows | int4 kernel | bf16 matmul | int4 / bf16 | unpack to bf16 | (unpack + bf16) / int4 |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['layer']} {r['in']}x{r['out']} | {r['m']} | {r['int4_ms']} | {r['bf16_ms']} | {r['int4_over_bf16']} "
              f"| {r['unpack_ms']} | {r['unpack_plus_bf16_over_int4']} |" for r in results]
    write_results("int4_cpu_kernel", data, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
