"""compressed-tensors (the format vLLM and transformers read quantized safetensors in) as the
reference for dtrain's quantized Hugging Face export and its reading of such files.

usage:
  compressed_tensors_read.py decompress DIR OUT FORMAT   parses DIR/config.json's quantization_config
        with compressed-tensors, checks it names the compressor FORMAT (int-quantized or
        pack-quantized), decompresses DIR/model.safetensors with that compressor's own code,
        and writes every tensor, the decompressed weights and the rest as they are, to OUT (F32,
        Hugging Face's names)
  compressed_tensors_read.py compress OUT DENSE   quantizes seeded random weights with
        compressed-tensors' own compressors, asymmetrically (zero points): "int8" int-quantized
        per channel, "int4" pack-quantized in groups of 32; writes the compressed tensors to OUT
        and what compressed-tensors decompresses them to (F32) to DENSE as "int8.weight" and
        "int4.weight"
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy

COMPRESSED_SUFFIXES = ("weight_scale", "weight_zero_point", "weight_packed", "weight_shape")


def decompress(directory, out, expected_format):
    with open(os.path.join(directory, "config.json")) as f:
        quantization_config = json.load(f)["quantization_config"]
    compressor = ModelCompressor.from_compression_config(quantization_config)
    assert compressor.quantization_config.format == expected_format, compressor.quantization_config.format
    dense = dict(compressor.quantization_compressor.decompress(directory))
    assert dense, "no weight was decompressed"
    tensors = {}
    for name, tensor in load_file(os.path.join(directory, "model.safetensors")).items():
        prefix, _, suffix = name.rpartition(".")
        if suffix in COMPRESSED_SUFFIXES or name in dense:
            continue
        tensors[name] = tensor.float()
    for name, tensor in dense.items():
        tensors[name] = tensor.float().contiguous()
    print(f"decompressed {len(dense)} weights ({expected_format})")
    save_file(tensors, out)


def compress(out, dense_out):
    torch.manual_seed(3)
    cases = {
        "int8": ("int-quantized", QuantizationArgs(num_bits=8, symmetric=False, strategy=QuantizationStrategy.CHANNEL),
                 (6, 1)),
        "int4": ("pack-quantized",
                 QuantizationArgs(num_bits=4, symmetric=False, strategy=QuantizationStrategy.GROUP, group_size=32),
                 (6, 2)),
    }
    compressed, dense = {}, {}
    for name, (format_name, args, scale_shape) in cases.items():
        weight = torch.randn(6, 64)
        # compressed-tensors 0.4 subtracts the zero point in int8, which wraps where q - zero point
        # leaves [-128, 127]: scales and zero points keep every 8-bit q - zero point inside (|w| <
        # 5 gives |q - zero point| <= 100 here), so that its decompression is the reference. The 4-bit q - zero
        # point cannot leave it.
        low = -(1 << (args.num_bits - 1))
        scale = torch.rand(scale_shape) * 0.01 + 0.05 if args.num_bits == 8 else torch.rand(scale_shape) * 0.1 + 0.2
        zero_point = torch.randint(low // 4, -low // 4, scale_shape, dtype=torch.int8)
        compressor = ModelCompressor.from_compression_config(
            {"format": format_name, "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.dict()}}})
        state = {f"{name}.weight": weight, f"{name}.weight_scale": scale, f"{name}.weight_zero_point": zero_point}
        tensors = compressor.quantization_compressor.compress(state, model_quant_args={name: args})
        # Each compressor decompresses a file of its own format alone.
        alone = f"{out}.{name}"
        save_file(tensors, alone)
        dense.update({n: t.float().contiguous() for n, t in compressor.quantization_compressor.decompress(alone)})
        os.remove(alone)
        compressed.update(tensors)
    assert sorted(dense) == ["int4.weight", "int8.weight"], sorted(dense)
    save_file(compressed, out)
    save_file(dense, dense_out)


if __name__ == "__main__":
    if sys.argv[1] == "decompress":
        decompress(*sys.argv[2:5])
    else:
        compress(*sys.argv[2:4])
