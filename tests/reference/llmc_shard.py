"""llm.c's token shard writer and reader (dev/data/data_common.py), restated with numpy.

usage:
  llmc_shard.py write OUT VOCAB N   writes tokens (i * 7919) % VOCAB for i < N, uint16 with
                                    magic 20240520 version 1 when VOCAB <= 65536, else uint32
                                    with magic 20240801 version 7, as llm.c's write_datafile
  llmc_shard.py check IN VOCAB N    reads IN as llm.c's loader does and checks it holds those tokens
"""
import sys

import numpy as np


def expected(vocab, n):
    return (np.arange(n, dtype=np.int64) * 7919) % vocab


def write(path, vocab, n):
    small = vocab <= 65536
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = (20240520, 1, n) if small else (20240801, 7, n)
    tokens = expected(vocab, n).astype(np.uint16 if small else np.uint32)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def check(path, vocab, n):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        assert (header[0], header[1]) in ((20240520, 1), (20240801, 7)), header[:3]
        assert header[2] == n, header[2]
        dtype = np.uint16 if header[1] == 1 else np.uint32
        tokens = np.frombuffer(f.read(), dtype=dtype)
    assert len(tokens) == n, len(tokens)
    assert np.array_equal(tokens.astype(np.int64), expected(vocab, n)), "tokens differ"
    assert not np.any(header[3:]), "header must be zero beyond its third entry"


if __name__ == "__main__":
    mode, path, vocab, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    (write if mode == "write" else check)(path, vocab, n)
