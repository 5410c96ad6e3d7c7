"""compressed-tensors int4/int8 weight-only checkpoints (llmcompressor's output) as GPTQ v2 checkpoints,
so gptqmodel's packed kernels (Marlin, ExLlama, Triton, torch) can run them in-process, where
transformers 5.17 would decompress them to the load dtype.

The conversion is lossless: both formats pack the same unsigned integers (q + 2^(bits-1)) eight
4-bit (or four 8-bit) values to an int32 in the same bit order, one along the input dimension of a
[out, in] tensor, the other along the input dimension of an [in, out] one, so a transpose is enough:

  weight_packed [out, in*bits/32]     -> qweight [in*bits/32, out]
  weight_scale  [out, groups] (bf16)  -> scales  [groups, out] (fp16; refused if not exact)
  weight_zero_point [out*bits/32, groups] -> qzeros [groups, out*bits/32] (v2: stored as is; symmetric
                                          checkpoints have none and get 2^(bits-1) everywhere)
  weight_g_idx (act order "group") or in // group_size -> g_idx [in]

The result is cached next to the quantized artifacts, keyed by the source checkpoint's files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from selector.precisions import artifacts

CONVERTER_VERSION = 1
BITS = (4, 8)


class ConversionError(Exception):
    """This compressed-tensors checkpoint has no GPTQ equivalent (the reason, for the record)."""


def scheme_of(qdict: dict[str, Any]) -> dict[str, Any]:
    """bits / group_size / sym / desc_act of a convertible compressed-tensors config, or ConversionError."""
    groups = qdict.get("config_groups") or {}
    if len(groups) != 1:
        raise ConversionError(f"{len(groups)} quantization groups; only one weight-only group converts")
    group = next(iter(groups.values()))
    weights = group.get("weights") or {}
    fmt = group.get("format") or qdict.get("format")
    if group.get("input_activations") or fmt != "pack-quantized":
        raise ConversionError(f"format {fmt!r} with activations {bool(group.get('input_activations'))}: "
                              "only weight-only pack-quantized checkpoints convert")
    if weights.get("type") != "int" or weights.get("num_bits") not in BITS:
        raise ConversionError(f"{weights.get('type')} {weights.get('num_bits')}-bit weights: only int4/int8 convert")
    strategy = weights.get("strategy")
    if strategy not in ("group", "channel"):
        raise ConversionError(f"strategy {strategy!r}: only group and channel scales convert")
    ignored = [m for m in qdict.get("ignore") or [] if m != "lm_head"]
    if ignored:
        raise ConversionError(f"layers left unquantized inside the blocks ({', '.join(ignored[:3])})")
    return {"bits": int(weights["num_bits"]), "group_size": int(weights.get("group_size") or -1) if strategy == "group" else -1,
            "sym": bool(weights.get("symmetric", True)), "desc_act": weights.get("actorder") == "group"}


def gptq_folder(src: Path, cache_dir: Path) -> Path:
    """The GPTQ v2 copy of the compressed-tensors checkpoint in `src`, built once and cached."""
    config = json.loads((src / "config.json").read_text())
    scheme = scheme_of(config.get("quantization_config") or {})
    files = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in src.glob("*.safetensors"))
    if not files:
        raise ConversionError(f"{src} holds no .safetensors weights")
    key = artifacts.ArtifactKey(src.name, "gptq-v2", {"source": str(src), "files": files,
                                                        "config": config, "converter": CONVERTER_VERSION})

    def build(out: Path) -> dict[str, Any]:
        convert(src, out, config, scheme)
        return {"converted_from": str(src), "scheme": scheme}

    return artifacts.materialize(cache_dir, key, build).path


def convert(src: Path, out: Path, config: dict[str, Any], scheme: dict[str, Any]) -> None:
    from safetensors.torch import load_file, save_file

    tensors: dict[str, Any] = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    converted = {}
    for name in [k for k in tensors if k.endswith(".weight_packed")]:
        converted.update(_layer(tensors, name[: -len(".weight_packed")], scheme))
    if not converted:
        raise ConversionError("no packed weights found")
    converted.update(tensors)  # what is left was never quantized (embeddings, norms, the LM head)
    save_file(converted, str(out / "model.safetensors"), metadata={"format": "pt"})
    bits, group = scheme["bits"], scheme["group_size"]
    config = dict(config)
    config["quantization_config"] = {
        "quant_method": "gptq", "bits": bits, "group_size": group, "sym": scheme["sym"],
        "desc_act": scheme["desc_act"], "checkpoint_format": "gptq_v2", "format": "gptq_v2",
        "pack_dtype": "int32", "lm_head": False,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for f in src.iterdir():  # tokenizer, generation config
        if f.is_file() and f.suffix != ".safetensors" and f.name not in ("config.json", artifacts.MANIFEST):
            shutil.copy2(f, out / f.name)


def _layer(tensors: dict[str, Any], base: str, scheme: dict[str, Any]) -> dict[str, Any]:
    """One linear layer's GPTQ v2 tensors, taking its compressed-tensors ones out of `tensors`."""
    import torch

    bits, group = scheme["bits"], scheme["group_size"]
    packed = tensors.pop(f"{base}.weight_packed")
    out_f, in_f = (int(x) for x in tensors.pop(f"{base}.weight_shape").tolist())
    scale = tensors.pop(f"{base}.weight_scale")
    zero = tensors.pop(f"{base}.weight_zero_point", None)
    g_idx = tensors.pop(f"{base}.weight_g_idx", None)
    if (in_f * bits) % 32 or (out_f * bits) % 32:
        raise ConversionError(f"{base}: {in_f}x{out_f} does not pack into whole int32 words at {bits} bits")
    fp16 = scale.to(torch.float16)
    if not torch.equal(fp16.to(scale.dtype), scale):
        raise ConversionError(f"{base}: its scales do not fit float16 exactly")
    if zero is None:
        word = sum((1 << (bits - 1)) << (bits * i) for i in range(32 // bits))  # 0x88888888 for 4 bits
        zero = torch.full((out_f * bits // 32, scale.shape[1]), word - (1 << 32), dtype=torch.int32)
    if g_idx is None:
        g_idx = torch.arange(in_f, dtype=torch.int32) // group if group > 0 else torch.zeros(in_f, dtype=torch.int32)
    return {
        f"{base}.qweight": packed.t().contiguous(),
        f"{base}.scales": fp16.t().contiguous(),
        f"{base}.qzeros": zero.t().contiguous(),
        f"{base}.g_idx": g_idx.to(torch.int32),
    }
