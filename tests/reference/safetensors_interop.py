"""Interop check for ckpt/safetensors: reads a file dtrain wrote, checks the values it knows,
and writes a file of its own for dtrain to read.

usage: safetensors_interop.py IN OUT
IN holds "ramp" (F32, 3x5, values 0..14 / 4), "ids" (I32, [7], values -3..3), "wide" (F64, [2],
values 1/3 and -2.5e300) and metadata {"origin": "dtrain"}. OUT gets each tensor negated and
metadata {"origin": "python"}.
"""
import sys

import numpy as np

from safetensors_io import load, save


def main(in_path, out_path):
    tensors, meta = load(in_path)
    assert meta == {"origin": "dtrain"}, meta
    assert list(tensors) == ["ramp", "ids", "wide"], list(tensors)
    ramp = tensors["ramp"].numpy()
    assert ramp.dtype == np.float32 and ramp.shape == (3, 5), (ramp.dtype, ramp.shape)
    assert np.array_equal(ramp, (np.arange(15, dtype=np.float32) / 4).reshape(3, 5)), ramp
    ids = tensors["ids"].numpy()
    assert ids.dtype == np.int32 and np.array_equal(ids, np.arange(-3, 4, dtype=np.int32)), ids
    wide = tensors["wide"].numpy()
    assert wide.dtype == np.float64 and wide[0] == 1 / 3 and wide[1] == -2.5e300, wide
    save(out_path, {name: -t for name, t in tensors.items()}, {"origin": "python"})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
