"""Reads a GGUF file with the gguf package (llama.cpp's Python reader), for
ckpt/gguf_export_test.cpp: writes OUT/metadata.json (every metadata field, arrays whole) and
OUT/tensors.safetensors (every tensor dequantized to f32 by gguf.quants, in the file's row-major
layout), and OUT/types.json (each tensor's type name and dimensions as the file gives them).

usage: gguf_read.py FILE OUT
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize
from safetensors.numpy import save_file

path, out = sys.argv[1], sys.argv[2]
reader = GGUFReader(path)
metadata = {}
for name, field in reader.fields.items():
    if name.startswith("GGUF."):
        continue
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        element = field.types[1]
        parts = [field.parts[i] for i in field.data]
        metadata[name] = [bytes(p).decode("utf-8") if element == GGUFValueType.STRING else p.tolist()[0] for p in parts]
    elif kind == GGUFValueType.STRING:
        metadata[name] = bytes(field.parts[field.data[0]]).decode("utf-8")
    else:
        metadata[name] = field.parts[field.data[0]].tolist()[0]
tensors, types = {}, {}
for t in reader.tensors:
    values = dequantize(t.data, t.tensor_type).astype(np.float32)
    tensors[t.name] = np.ascontiguousarray(values.reshape(-1))
    types[t.name] = {"type": t.tensor_type.name, "dims": [int(d) for d in t.shape]}
with open(os.path.join(out, "metadata.json"), "w") as f:
    json.dump(metadata, f)
with open(os.path.join(out, "types.json"), "w") as f:
    json.dump(types, f)
save_file(tensors, os.path.join(out, "tensors.safetensors"))
