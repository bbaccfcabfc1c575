"""The reference scripts' safetensors files, through the `safetensors` package (the version pinned
in scripts/python-requirements.txt; tests/reference/safetensors_interop.py checks it against
dtrain's reader and writer): torch tensors in, torch tensors and the metadata out.
"""
from safetensors import safe_open
from safetensors.torch import save_file


def load(path):
    """Returns ({name: torch.Tensor}, metadata dict). BF16 is returned as torch.bfloat16."""
    with safe_open(path, framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}, f.metadata() or {}


def save(path, tensors):
    """Writes {name: torch.Tensor}; safetensors stores only contiguous tensors."""
    save_file({name: t.contiguous() for name, t in tensors.items()}, path)
