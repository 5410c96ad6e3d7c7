"""`python -m selector plan`: the grid a sweep would run, and whether each variant fits a GPU.

Nothing is downloaded and no model loads (selector.plan reads the architecture and estimates the
memory). `--compare <sweep folder>` puts the estimate next to each RunRecord's measured weight bytes.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from selector.config import SelectorConfig
from selector.validate import validate
from selector.errors import UserError
from selector.plan.arch import read_arch
from selector.plan.estimate import GIB, PlanRow, estimate_weights, plan_row, weights_held

DEFAULT_CONTEXT = 4096


def compose_grid(overrides: list[str]) -> list[SelectorConfig]:
    """Every variant a sweep with these overrides would run, composed as the sweep composes them."""
    from selector import compose

    dirs = compose.config_dirs(overrides)[1:]
    return [validate(job_cfg, compose.origin_of(job, choices, dirs)) for job_cfg, choices, job in compose.compose_grid(overrides)]


def default_device(cfg: SelectorConfig, gpu_gib: float | None) -> str:
    if gpu_gib is not None or cfg.device.startswith("cuda"):
        return "cuda"
    if cfg.device == "cpu":
        return "cpu"
    from selector.variant.availability import cuda_available

    return "cuda" if cuda_available() else "cpu"


@dataclass
class Comparison:
    variant: str
    device: str
    estimated_bytes: int | None
    measured_bytes: int
    error_pct: float | None
    layout: str


def compare_records(sweep_dir: Path) -> list[Comparison]:
    """Estimated vs measured weight bytes for every completed RunRecord under a sweep folder."""
    from selector.compose import config_from_dict
    from selector.sweep.judging import gather_records

    if not Path(sweep_dir).exists():
        raise UserError(f"{sweep_dir}: no such folder")
    rows = []
    for record in sorted(gather_records(Path(sweep_dir)), key=lambda r: r.name):
        if record.status != "completed" or record.memory is None:
            continue
        cfg = config_from_dict(record.config)
        device = "cuda" if record.perf and record.perf.device.startswith("cuda") else "cpu"
        arch = read_arch(cfg.model, Path(cfg.cache_dir))
        measured = record.memory.weight_bytes
        if arch is None:
            rows.append(Comparison(record.name, device, None, measured, None, "architecture unknown"))
            continue
        est = estimate_weights(arch, cfg.precision, device, weights_held(cfg), prequantized=cfg.precision.name in cfg.model.prequantized)
        rows.append(Comparison(record.name, device, est.bytes, measured, 100.0 * (est.bytes - measured) / measured,
                               est.layout))
    if not rows:
        raise UserError(f"{sweep_dir}: no completed RunRecords with memory figures (record.json files)")
    return rows


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2**20:.1f} MiB"


def _count(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def render_plan(rows: list[PlanRow], batch: int, context: int, gpu_gib: float | None, device: str,
                reserve_gib: float) -> str:
    head = ["variant", "params", "weights", "KV cache", "activations", "total"]
    head += [f"fits {gpu_gib:g} GiB"] if gpu_gib is not None else []
    body = []
    for r in rows:
        line = [r.variant, _count(r.params), _size(r.weight_bytes), _size(r.kv_bytes), _size(r.activation_bytes),
                _size(r.total_bytes)]
        if gpu_gib is not None:
            line.append("?" if r.fits is None else ("yes" if r.fits else "NO"))
        body.append(line)
    out = [f"{len(rows)} variant(s) on {device}; KV cache and activations at batch {batch} x context {context} "
           f"tokens" + (f"; total adds a {reserve_gib:g} GiB reserve (CUDA context, allocator slack)." if reserve_gib else ".")]
    out.append(_table(head, body))
    sources = dict.fromkeys(f"  {r.variant.split('/')[0]}: {r.arch_source}" for r in rows)
    out += ["", "architecture read from:", *sources]
    notes = dict.fromkeys(f"  {r.variant.split('/', 1)[1]}: {r.layout}" + (f" ({'; '.join(r.notes)})" if r.notes else "")
                          for r in rows if r.layout)
    out += ["", "weights held as:", *notes]
    return "\n".join(out)


def render_comparison(rows: list[Comparison]) -> str:
    def mib(n: int | None) -> str:
        return "?" if n is None else f"{n / 2**20:.1f}"

    body = [[c.variant, c.device, mib(c.estimated_bytes), mib(c.measured_bytes),
             "?" if c.error_pct is None else f"{c.error_pct:+.2f}%", c.layout] for c in rows]
    return "weight memory, estimated vs measured (RunRecord memory.weight_bytes):\n" + _table(
        ["variant", "device", "estimate MiB", "measured MiB", "error", "estimated as"], body)


def _table(head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*head), "  ".join("-" * w for w in widths)]
    return "\n".join(lines + [fmt.format(*row) for row in body])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m selector plan",
        description="Print the grid a sweep would run with estimated weight, KV-cache and activation "
                    "memory per variant, and whether each fits a GPU. Loads no model, downloads nothing.",
        epilog="Examples:\n"
               "  python -m selector plan +sweep=qwen --gpu-mem 24\n"
               "  python -m selector plan model=smollm2-135m precision=bf16,int8 --batch 1 --context 2048\n"
               "  python -m selector plan --compare outputs/sweeps/2026-11-30_10-00-00\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gpu-mem", type=float, metavar="GIB", help="GPU memory in GiB: say whether each variant fits")
    p.add_argument("--batch", type=int, help="sequences held at once (default: engine.batch_size)")
    p.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help=f"tokens per sequence (default {DEFAULT_CONTEXT})")
    p.add_argument("--reserve", type=float, metavar="GIB",
                   help="fixed allowance added to the total: CUDA context, allocator slack (default 1 on cuda, 0 on cpu)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="where the weights would live (default: cuda with --gpu-mem, else this machine)")
    p.add_argument("--compare", type=Path, metavar="SWEEP_DIR", help="estimate vs measured weight memory of a finished sweep")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("overrides", nargs="*", help="the same overrides as a sweep, e.g. +sweep=qwen or precision=bf16,int8")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    for name in ("batch", "context"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UserError(f"command line: --{name} must be at least 1")
    if args.compare is not None:
        comparisons = compare_records(args.compare)
        print(json.dumps([asdict(c) for c in comparisons], indent=2) if args.json else render_comparison(comparisons))
        return 0
    from selector.logs import quiet_libraries

    quiet_libraries()
    cfgs = compose_grid(args.overrides)
    batch = args.batch or cfgs[0].engine.batch_size
    device = args.device or default_device(cfgs[0], args.gpu_mem)
    reserve = args.reserve if args.reserve is not None else (1.0 if device == "cuda" else 0.0)
    rows = [plan_row(c, batch=batch, context=args.context, gpu_gib=args.gpu_mem, device=device,
                     reserve_gib=reserve) for c in cfgs]
    if args.json:
        print(json.dumps({"batch": batch, "context": args.context, "device": device, "gpu_mem_gib": args.gpu_mem,
                          "reserve_gib": reserve, "variants": [asdict(r) for r in rows]}, indent=2))
    else:
        print(render_plan(rows, batch, args.context, args.gpu_mem, device, reserve))
    return 0
