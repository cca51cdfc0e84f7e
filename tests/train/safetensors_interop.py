"""Interop check between stoker's safetensors files and Python's `safetensors` package.

  python3 safetensors_interop.py check FILE   verify a file written by stoker's test
  python3 safetensors_interop.py write FILE   write the file stoker's test then verifies

Both sides use the same deterministic values: element i of tensor `name` is
(i % 251) * scale - offset in the tensor's dtype (see safetensors_test.cpp).
"""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

SPECS = {  # name: (numpy dtype, shape, scale, offset)
    "w_f32": (np.float32, (3, 5), 0.25, 7.0),
    "w_f16": (np.float16, (4, 2, 3), 0.5, 3.0),
    "ids_i64": (np.int64, (6,), 1000003, 0),
    "ids_i32": (np.int32, (2, 2), 17, 5),
    "img_u8": (np.uint8, (2, 3, 4), 1, 0),
}


def values(dtype, shape, scale, offset):
    n = int(np.prod(shape))
    v = (np.arange(n, dtype=np.float64) % 251) * scale - offset
    if np.issubdtype(dtype, np.integer):
        v = (np.arange(n, dtype=np.int64) % 251) * int(scale) - int(offset)
    return v.astype(dtype).reshape(shape)


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "check":
        got = load_file(path)
        for name, (dt, shape, scale, offset) in SPECS.items():
            want = values(dt, shape, scale, offset)
            assert got[name].dtype == want.dtype, (name, got[name].dtype, want.dtype)
            assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
            assert np.array_equal(got[name], want), name
        print("python read stoker's file: OK")
    elif mode == "write":
        tensors = {name: values(*spec) for name, spec in SPECS.items()}
        save_file(tensors, path, metadata={"writer": "python"})
        print("python wrote", path)
    else:
        raise SystemExit("usage: safetensors_interop.py check|write FILE")


if __name__ == "__main__":
    main()
