"""`python -m selector plan`: the grid a sweep would run, and whether each variant fits a GPU.

Nothing is downloaded and no model loads: the architecture comes from a config.json (the model's
`arch_config`, a converted copy in the cache, a local folder, the local Hugging Face cache) or from
a GGUF file's metadata. Weight memory is counted per tensor the way each precision backend stores
it (packed int4 + group scales/zeros, int8 + 16-bit outlier path, embeddings and lm_head left in
16 bit), because "params x bits" is wrong for small models (FINDINGS.md). The KV cache is sized
at a batch and context; activations and a fixed reserve are rough allowances, stated as such.
`--compare <sweep folder>` puts the estimate next to each RunRecord's measured weight bytes.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from selector.config import CONF_DIR, ModelConfig, PrecisionConfig, SelectorConfig
from selector.errors import ConfigError, UserError
from selector.precisions.groups import pick_group_size

GIB = 2**30
REPO_ROOT = CONF_DIR.parent
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DEFAULT_CONTEXT = 4096


# ---- architecture facts -------------------------------------------------------------------


@dataclass(frozen=True)
class ArchFacts:
    """What weight and KV-cache sizes depend on, as a transformers config.json states it."""

    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()  # "full_attention" / "sliding_attention" per layer, when mixed
    source: str = ""  # where the facts were read

    @classmethod
    def from_config(cls, cfg: dict[str, Any], source: str) -> ArchFacts:
        text = cfg.get("text_config") or cfg  # multimodal configs nest the language model
        try:
            hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
            model_type = str(text.get("model_type", ""))
            return cls(
                model_type=model_type,
                hidden_size=hidden,
                num_layers=int(text["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(text.get("num_key_value_heads") or heads),
                head_dim=int(text.get("head_dim") or hidden // heads),
                vocab_size=int(text["vocab_size"]),
                intermediate_size=int(text["intermediate_size"]),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
                # Qwen2 always has q/k/v biases; Llama-style configs say so in attention_bias.
                attention_bias=bool(text.get("attention_bias", model_type == "qwen2")),
                sliding_window=text.get("sliding_window"),
                layer_types=tuple(text.get("layer_types") or ()),
                source=source,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(source, field=str(e).strip("'"), problem="not a usable transformers config.json "
                              "(needs hidden_size, num_hidden_layers, num_attention_heads, vocab_size, "
                              "intermediate_size)") from None

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in_features, out_features) of every quantizable Linear in one decoder layer."""
        h, i = self.hidden_size, self.intermediate_size
        return [(h, self.q_dim), (h, self.kv_dim), (h, self.kv_dim), (self.q_dim, h),  # q k v o
                (h, i), (h, i), (i, h)]  # gate up down

    def param_groups(self) -> dict[str, int]:
        """Parameter counts by how precisions treat them."""
        h = self.hidden_size
        gemma = self.model_type.startswith("gemma")
        qk_norm = self.model_type.startswith(("gemma3", "qwen3"))
        linear = self.num_layers * sum(a * b for a, b in self.linear_shapes())
        per_layer_small = (4 if gemma else 2) * h  # RMSNorm weights
        per_layer_small += (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        per_layer_small += 2 * self.head_dim if qk_norm else 0
        return {
            "embed": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
            "linear": linear,
            "small": self.num_layers * per_layer_small + h,  # + the final norm
        }

    @property
    def params(self) -> int:
        return sum(self.param_groups().values())

    def kv_tokens_per_layer(self, context: int) -> list[int]:
        """Cached tokens per layer: sliding-window layers keep at most their window."""
        if self.layer_types and self.sliding_window:
            return [min(context, int(self.sliding_window)) if t == "sliding_attention" else context
                    for t in self.layer_types]
        return [context] * self.num_layers


def read_arch(model: ModelConfig, cache_dir: Path) -> ArchFacts | None:
    """The model's architecture from the first place that has it, without network or conversion."""
    for source in _config_candidates(model, Path(cache_dir).expanduser()):
        if source.suffix == ".gguf":
            return _arch_from_gguf(source)
        return ArchFacts.from_config(json.loads(source.read_text()), _shown(source))
    return None


def _config_candidates(model: ModelConfig, cache_dir: Path) -> Iterable[Path]:
    from selector.models.cache import CacheLayout, converted_dir, safe_name

    if model.arch_config:
        path = Path(model.arch_config).expanduser()
        path = path if path.is_absolute() else REPO_ROOT / path
        if not path.is_file():
            raise ConfigError(f"conf/model/{model.name}.yaml", "arch_config", f"{_shown(path)}: no such file")
        yield path
    src = model.source
    cache = CacheLayout(cache_dir)
    folder = converted_dir(cache, model.name, src.sha256)  # a GGUF source converted once
    if folder is None:  # no configured sha256: the newest converted copy under this name
        found = sorted(cache.root.glob(f"models/{safe_name(model.name)}-*/manifest.json"),
                       key=lambda p: p.stat().st_mtime)
        folder = found[-1].parent if found else None
    if folder is not None and (folder / "config.json").is_file():
        yield folder / "config.json"
    if src.kind == "local" and src.path and (Path(src.path).expanduser() / "config.json").is_file():
        yield Path(src.path).expanduser() / "config.json"
    if src.kind == "hub" and src.repo_id:
        from selector.models.hub import cached_file

        hit = cached_file(src.repo_id, "config.json", src.revision)
        if hit:
            yield Path(hit)
    for gguf in (cache.gguf_file(model.name), Path(src.path).expanduser() if src.kind == "gguf" and src.path else None):
        if gguf is not None and gguf.is_file():
            yield gguf


def _arch_from_gguf(path: Path) -> ArchFacts:
    """Facts from GGUF metadata (llama.cpp's key names), for a model not converted yet."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))

    def get(key: str, default: Any = None) -> Any:
        f = reader.fields.get(key)
        return f.contents() if f is not None else default

    arch = get("general.architecture")
    hidden, heads = int(get(f"{arch}.embedding_length")), int(get(f"{arch}.attention.head_count"))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = get(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else 0)
    return ArchFacts(
        model_type={"gemma3": "gemma3_text"}.get(arch, arch),
        hidden_size=hidden,
        num_layers=int(get(f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=int(get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(get(f"{arch}.attention.key_length", hidden // heads)),
        vocab_size=int(vocab),
        intermediate_size=int(get(f"{arch}.feed_forward_length")),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        attention_bias=any(t.name == "blk.0.attn_q.bias" for t in reader.tensors),
        source=f"{_shown(path)} (GGUF metadata)",
    )


# ---- memory estimates ---------------------------------------------------------------------


@dataclass
class WeightEstimate:
    bytes: int
    layout: str  # how the linear weights are held, in words
    notes: list[str] = field(default_factory=list)


def estimate_weights(arch: ArchFacts, precision: PrecisionConfig, device: str, prequantized: bool = False) -> WeightEstimate:
    """Bytes the loaded weights occupy on `device` ("cpu" or "cuda") at this precision."""
    g = arch.param_groups()
    dtype = DTYPE_BYTES.get(precision.dtype, 2)
    rest = (g["embed"] + g["lm_head"] + g["small"]) * dtype  # never quantized by these backends
    shapes = [s for _ in range(arch.num_layers) for s in arch.linear_shapes()]
    backend, method, bits = precision.backend, precision.method, precision.bits or 16
    # Backends lower the group size to one that divides every layer's width (SmolLM2: 128 -> 64).
    group = pick_group_size((i for i, _ in arch.linear_shapes()), int(precision.params.get("group_size", 128) or 0))
    if backend == "native":
        return WeightEstimate(arch.params * dtype, f"{precision.dtype}")
    if backend == "bnb" and method == "int8":
        # int8 weights; per-row fp32 scales (SCB) live beside them; lm_head stays 16-bit.
        linear = sum(i * o + 4 * o for i, o in shapes)
        return WeightEstimate(linear + rest, "int8 (LLM.int8), lm_head/embeddings 16-bit",
                              ["bitsandbytes keeps row scales outside parameters: measured bytes miss them"])
    if backend == "bnb" and method == "nf4":
        linear = sum(i * o // 2 + 4 * math.ceil(i * o / 64) for i, o in shapes)  # absmax per 64 weights
        return WeightEstimate(linear + rest, "nf4 (block 64, fp32 absmax), lm_head/embeddings 16-bit")
    if backend == "torchao":
        if bits >= 8:
            return WeightEstimate(sum(i * o + 2 * o for i, o in shapes) + rest, "int8 weight-only, per-row scales")
        return WeightEstimate(sum(_packed(i, o, bits, group, scale=2, zero=2) for i, o in shapes) + rest,
                              f"int{bits} weight-only, group {group}")
    packed_here = backend == "gptqmodel" or prequantized or device.startswith("cuda")
    if backend in ("gptqmodel", "llmcompressor") and packed_here:
        # GPTQ/AWQ formats: int32-packed weights, fp16 scales and packed zeros per group (+ g_idx for GPTQ).
        gidx = 4 if method == "gptq" and (backend == "gptqmodel" or prequantized) else 0
        linear = sum(_packed(i, o, bits, group, scale=2, zero=bits / 8) + gidx * i for i, o in shapes)
        return WeightEstimate(linear + rest, f"{method} int{bits} packed, group {group}, lm_head/embeddings 16-bit")
    if backend == "llmcompressor":
        # transformers unpacks compressed-tensors checkpoints to the load dtype on CPU (FINDINGS.md).
        return WeightEstimate(arch.params * dtype, f"{precision.dtype} (compressed-tensors unpacked on CPU)",
                              ["on a GPU the same checkpoint stays packed"])
    return WeightEstimate(arch.params * dtype, f"{precision.dtype} (unknown backend {backend!r}: unquantized)")


def _packed(in_f: int, out_f: int, bits: int, group: int, scale: float, zero: float) -> int:
    groups = math.ceil(in_f / group) if group > 0 else 1  # group <= 0: one scale per output row
    return int(in_f * out_f * bits / 8 + out_f * groups * (scale + zero))


def kv_cache_bytes(arch: ArchFacts, batch: int, context: int, dtype: str) -> int:
    """Keys and values of every layer for `batch` sequences of `context` tokens."""
    per_token = 2 * arch.kv_dim * DTYPE_BYTES.get(dtype, 2)
    return batch * per_token * sum(arch.kv_tokens_per_layer(context))


def activation_bytes(arch: ArchFacts, batch: int, context: int, dtype: str) -> int:
    """A rough allowance for the largest prefill transients (one layer's MLP and attention inputs,
    fp32 logits of the last position): an order of magnitude, not a measurement."""
    width = 4 * arch.hidden_size + 3 * arch.intermediate_size
    return batch * context * width * DTYPE_BYTES.get(dtype, 2) + batch * arch.vocab_size * 4


# ---- the grid -----------------------------------------------------------------------------


@dataclass
class PlanRow:
    variant: str
    params: int | None
    weight_bytes: int | None
    kv_bytes: int | None
    activation_bytes: int | None
    total_bytes: int | None
    fits: bool | None
    layout: str
    arch_source: str
    notes: list[str] = field(default_factory=list)


def compose_grid(overrides: list[str]) -> list[SelectorConfig]:
    """Every variant a sweep with these overrides would run, composed as the sweep composes them."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from selector import preflight

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        try:
            master = loader.load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
        except Exception as e:  # Hydra's "Could not find 'model/x'" and friends
            raise ConfigError("command line", problem=f"{' '.join(overrides)}: {str(e).strip()}") from None
        jobs = preflight.grid_overrides(master)
        return [preflight.job_config(*preflight.compose_job(master, job)) for job in jobs]


def plan_row(cfg: SelectorConfig, *, batch: int, context: int, gpu_gib: float | None, device: str,
             reserve_gib: float = 0.0) -> PlanRow:
    name = f"{cfg.model.name}/{cfg.precision.name}"
    arch = read_arch(cfg.model, Path(cfg.cache_dir))
    if arch is None:
        return PlanRow(name, None, None, None, None, None, None, "", "unknown",
                       [f"no config.json for {cfg.model.name}: set arch_config in conf/model/{cfg.model.name}.yaml"])
    est = estimate_weights(arch, cfg.precision, device, prequantized=cfg.precision.name in cfg.model.prequantized)
    kv = kv_cache_bytes(arch, batch, context, cfg.precision.dtype)
    act = activation_bytes(arch, batch, context, cfg.precision.dtype)
    total = est.bytes + kv + act + int(reserve_gib * GIB)
    fits = None if gpu_gib is None else total <= gpu_gib * GIB
    return PlanRow(name, arch.params, est.bytes, kv, act, total, fits, est.layout, arch.source, est.notes)


def default_device(cfg: SelectorConfig, gpu_gib: float | None) -> str:
    if gpu_gib is not None or cfg.device.startswith("cuda"):
        return "cuda"
    if cfg.device == "cpu":
        return "cpu"
    from selector.preflight import cuda_available

    return "cuda" if cuda_available() else "cpu"


# ---- estimate vs measured -----------------------------------------------------------------


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
    from omegaconf import OmegaConf

    from selector.finish import gather_records

    if not Path(sweep_dir).exists():
        raise UserError(f"{sweep_dir}: no such folder")
    rows = []
    for record in sorted(gather_records(Path(sweep_dir)), key=lambda r: r.name):
        if record.status != "completed" or record.memory is None:
            continue
        known = {k: v for k, v in record.config.items() if k in SelectorConfig.__dataclass_fields__}
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SelectorConfig), known))
        assert isinstance(cfg, SelectorConfig)
        device = "cuda" if record.perf and record.perf.device.startswith("cuda") else "cpu"
        arch = read_arch(cfg.model, Path(cfg.cache_dir))
        measured = record.memory.weight_bytes
        if arch is None:
            rows.append(Comparison(record.name, device, None, measured, None, "architecture unknown"))
            continue
        est = estimate_weights(arch, cfg.precision, device, prequantized=cfg.precision.name in cfg.model.prequantized)
        rows.append(Comparison(record.name, device, est.bytes, measured, 100.0 * (est.bytes - measured) / measured,
                               est.layout))
    if not rows:
        raise UserError(f"{sweep_dir}: no completed RunRecords with memory figures (record.json files)")
    return rows


# ---- output -------------------------------------------------------------------------------


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


# ---- command ------------------------------------------------------------------------------


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


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
