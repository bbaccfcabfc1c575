"""Minimal safetensors reader and writer (struct + json + numpy) for the reference tests.

The format: 8-byte little-endian header length, a JSON header mapping names to
{"dtype", "shape", "data_offsets"} (plus "__metadata__"), then the raw little-endian data.
The PyPI `safetensors` package is deliberately not used: the reference must depend only on
torch and numpy from Debian.
"""
import json
import struct

import numpy as np
import torch

_NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
       "U16": np.uint16, "U32": np.uint32, "U8": np.uint8}


def load(path):
    """Returns ({name: torch.Tensor}, metadata dict). BF16 is returned as torch.bfloat16."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=_NP[info["dtype"]]).copy())
        out[name] = t.reshape(info["shape"])
    return out, meta


def save(path, tensors, metadata=None):
    """Writes {name: torch.Tensor or np.ndarray} (F32/F64/I32/I64) in insertion order."""
    header, chunks, offset = {}, [], 0
    inverse = {v: k for k, v in _NP.items()}
    for name, t in tensors.items():
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        a = np.array(a, order="C")  # ascontiguousarray would turn a 0-d array into 1-d
        raw = a.tobytes()
        header[name] = {"dtype": inverse[a.dtype.type], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    head = json.dumps(header).encode()
    head += b" " * ((8 - (8 + len(head)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)
