#!/usr/bin/env python3
"""Writes the .npy fixtures of runtime/npy_test.cc with numpy itself (the reference writer).

Good files: good_<dtype>_v<major>.npy hold a (3, 4) array whose element i (C order) is
  bool: i % 3 == 0;  signed ints: i - 5;  unsigned ints: i;  floats: i * 0.5 - 2.5
(every dtype in format 1.0; float32/int64 also in 2.0 and 3.0; big-endian variants), plus a
scalar (value 7.0) and an empty (0, 5) array. Bad files: every way a file can be wrong that
the reader must reject with a clear error. Run from anywhere; writes next to this script.
"""
import os

import numpy as np
from numpy.lib import format as npf

HERE = os.path.dirname(os.path.abspath(__file__))


def values(dt):
    i = np.arange(12).reshape(3, 4)
    dt = np.dtype(dt)
    if dt.kind == "b":
        return (i % 3 == 0)
    if dt.kind == "i":
        return (i - 5).astype(dt)
    if dt.kind == "u":
        return i.astype(dt)
    return (i * 0.5 - 2.5).astype(dt)


def save(name, arr, version=(1, 0)):
    with open(os.path.join(HERE, name), "wb") as f:
        npf.write_array(f, arr, version=version, allow_pickle=True)


def raw(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    for f in os.listdir(HERE):
        if f.endswith(".npy"):
            os.remove(os.path.join(HERE, f))
    names = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
             "float16", "float32", "float64"]
    for n in names:
        save("good_%s_v1.npy" % n, values(n))
    for n in ["float32", "int64"]:
        save("good_%s_v2.npy" % n, values(n), (2, 0))
        save("good_%s_v3.npy" % n, values(n), (3, 0))
    for n in [">f4", ">i8", ">f2", ">u2", ">f8"]:
        save("good_be_%s_v1.npy" % n[1:], values(n).astype(n))
    save("good_scalar_v1.npy", np.array(7.0, dtype=np.float32))
    save("good_empty_v1.npy", np.zeros((0, 5), dtype=np.float32))

    good = open(os.path.join(HERE, "good_float32_v1.npy"), "rb").read()
    raw("bad_magic.npy", b"\x93NUMPX" + good[6:])
    raw("bad_truncated.npy", good[:-3])
    raw("bad_trailing.npy", good + b"\0\0\0\0")
    raw("bad_header_overrun.npy", good[:8] + bytes([0xff, 0x7f]) + good[10:200])
    raw("bad_version4.npy", good[:6] + bytes([4, 0]) + good[8:])
    raw("bad_short.npy", good[:9])
    save("bad_fortran.npy", np.asfortranarray(values("float32")))
    save("bad_object.npy", np.array([1, "a", None], dtype=object))
    save("bad_structured.npy", np.zeros(3, dtype=[("a", "<f4"), ("b", "<i8")]))
    save("bad_complex.npy", np.zeros(3, dtype=np.complex64))
    save("bad_unicode.npy", np.array(["abc", "de"]))
    save("bad_datetime.npy", np.array(["2020-01-01"], dtype="datetime64[D]"))

    def with_header(text):
        h = text.encode("latin1")
        pad = (64 - (10 + len(h) + 1) % 64) % 64
        h = h + b" " * pad + b"\n"
        return b"\x93NUMPY\x01\x00" + bytes([len(h) & 0xff, len(h) >> 8]) + h

    raw("bad_dict_garbage.npy", with_header("this is not a dict") + b"\0" * 4)
    raw("bad_dict_missing_shape.npy", with_header("{'descr': '<f4', 'fortran_order': False, }") + b"\0" * 4)
    raw("bad_dict_extra_key.npy", with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1, }") + b"\0" * 4)
    raw("bad_dict_negative_dim.npy", with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }") + b"\0" * 4)
    raw("bad_dict_huge_dims.npy", with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904), }"))
    raw("bad_dict_rank9.npy", with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }") + b"\0" * 4)


if __name__ == "__main__":
    main()
