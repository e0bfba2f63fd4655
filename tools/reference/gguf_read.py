"""gguf_read.py — a small, dependency-free (NumPy only) GGUF v2/v3 reader.

Written from docs/models.md §1. Everything is little-endian:

    header   : magic "GGUF", version u32, tensor_count u64, kv_count u64
    metadata : kv_count x (key string, value type u32, value)
    tensors  : tensor_count x (name string, n_dims u32, ne[n_dims] u64, ggml type u32, offset u64)
    data     : starts at the first multiple of general.alignment (default 32) after the infos;
               each tensor offset is relative to it and aligned as well.

Tensors come back as NumPy arrays in NumPy order, i.e. the reverse of the GGUF `ne` list
(a `y = W x` weight with ne [in, out] has shape (out, in)). Supported tensor types:
F32, F16, BF16 and Q8_0 (block of 32 along ne0: f16 scale d, then 32 int8 q; x = d * q).

Usage:
    g = GGUFFile(path)
    g.kv["general.architecture"], g.kv_type[key], g.tensors[name].ne, g.tensor(name)
"""

import mmap
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"

# metadata value types (docs §1.2)
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = \
    range(13)

_SCALAR = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
    T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}
_NP_SCALAR = {
    T_U8: "<u1", T_I8: "<i1", T_U16: "<u2", T_I16: "<i2", T_U32: "<u4", T_I32: "<i4",
    T_F32: "<f4", T_BOOL: "<u1", T_U64: "<u8", T_I64: "<i8", T_F64: "<f8",
}
TYPE_NAMES = {
    T_U8: "u8", T_I8: "i8", T_U16: "u16", T_I16: "i16", T_U32: "u32", T_I32: "i32",
    T_F32: "f32", T_BOOL: "bool", T_STRING: "string", T_ARRAY: "array", T_U64: "u64",
    T_I64: "i64", T_F64: "f64",
}
INT_TYPES = (T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_U64, T_I64)

# ggml tensor types (docs §1.3)
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
GGML_TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
                   10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 30: "BF16"}
QK8_0 = 32
Q8_0_BLOCK_BYTES = 2 + QK8_0


class GGUFError(Exception):
    pass


class TensorInfo:
    __slots__ = ("name", "ne", "type", "offset", "nbytes")

    def __init__(self, name, ne, ttype, offset):
        self.name, self.ne, self.type, self.offset = name, tuple(ne), ttype, offset
        n = 1
        for d in ne:
            n *= d
        if ttype == GGML_F32:
            self.nbytes = 4 * n
        elif ttype in (GGML_F16, GGML_BF16):
            self.nbytes = 2 * n
        elif ttype == GGML_Q8_0:
            if ne[0] % QK8_0:
                raise GGUFError(f"{name}: Q8_0 needs ne0 % 32 == 0, got {ne[0]}")
            self.nbytes = n // QK8_0 * Q8_0_BLOCK_BYTES
        else:
            self.nbytes = None  # unsupported type: readable as info only

    @property
    def shape(self):
        """NumPy shape = reversed ne."""
        return tuple(reversed(self.ne))

    def __repr__(self):
        t = GGML_TYPE_NAMES.get(self.type, str(self.type))
        return f"TensorInfo({self.name!r}, ne={list(self.ne)}, {t}, off={self.offset})"


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"truncated file at offset {self.pos} (+{n})")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def string(self):
        n = self.unpack("<Q")
        return bytes(self.take(n)).decode("utf-8")

    def value(self, vtype):
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.unpack("<I")
            count = self.unpack("<Q")
            if etype in _NP_SCALAR:
                dt = np.dtype(_NP_SCALAR[etype])
                raw = self.take(count * dt.itemsize)
                arr = np.frombuffer(raw, dtype=dt, count=count).copy()
                if etype == T_BOOL:
                    arr = arr.astype(bool)
                return GGUFArray(etype, arr.tolist())
            if etype == T_STRING:
                return GGUFArray(etype, [self.string() for _ in range(count)])
            if etype == T_ARRAY:
                return GGUFArray(etype, [self.value(T_ARRAY) for _ in range(count)])
            raise GGUFError(f"bad array element type {etype}")
        raise GGUFError(f"bad value type {vtype}")


class GGUFArray(list):
    """A list that remembers the GGUF element type of the array."""

    def __init__(self, etype, items):
        super().__init__(items)
        self.etype = etype


class GGUFFile:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(self._mm)
        c = _Cursor(buf)
        if bytes(c.take(4)) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file")
        self.version = c.unpack("<I")
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = c.unpack("<Q")
        n_kv = c.unpack("<Q")
        self.kv, self.kv_type = {}, {}
        for _ in range(n_kv):
            key = c.string()
            vtype = c.unpack("<I")
            if key in self.kv:
                raise GGUFError(f"duplicate key {key}")
            self.kv[key] = c.value(vtype)
            self.kv_type[key] = vtype
        self.tensors = {}
        for _ in range(n_tensors):
            name = c.string()
            n_dims = c.unpack("<I")
            ne = [c.unpack("<Q") for _ in range(n_dims)]
            ttype = c.unpack("<I")
            off = c.unpack("<Q")
            if name in self.tensors:
                raise GGUFError(f"duplicate tensor {name}")
            self.tensors[name] = TensorInfo(name, ne, ttype, off)
        self.alignment = self.kv.get("general.alignment", 32)
        if not isinstance(self.alignment, int) or self.alignment <= 0 or \
                self.alignment & (self.alignment - 1):
            raise GGUFError(f"bad general.alignment {self.alignment}")
        a = self.alignment
        self.data_offset = (c.pos + a - 1) // a * a
        size = len(buf)
        for t in self.tensors.values():
            if t.offset % a:
                raise GGUFError(f"{t.name}: offset {t.offset} not aligned to {a}")
            if t.nbytes is not None and self.data_offset + t.offset + t.nbytes > size:
                raise GGUFError(f"{t.name}: data past end of file")

    def close(self):
        self._mm.close()

    # -- metadata helpers --------------------------------------------------------------------
    def get(self, key, default=None):
        return self.kv.get(key, default)

    # -- tensors -----------------------------------------------------------------------------
    def raw(self, name):
        t = self.tensors[name]
        if t.nbytes is None:
            raise GGUFError(f"{name}: unsupported ggml type {GGML_TYPE_NAMES.get(t.type, t.type)}")
        start = self.data_offset + t.offset
        return np.frombuffer(self._mm, dtype=np.uint8, count=t.nbytes, offset=start)

    def tensor(self, name, dtype=np.float64):
        """Dequantised tensor in NumPy order (reversed ne), as a fresh array of `dtype`."""
        t = self.tensors[name]
        raw = self.raw(name)
        shape = t.shape
        if t.type == GGML_F32:
            x = raw.view("<f4").astype(dtype)
        elif t.type == GGML_F16:
            x = raw.view("<f2").astype(dtype)
        elif t.type == GGML_BF16:
            x = (raw.view("<u2").astype(np.uint32) << 16).view("<f4").astype(dtype)
        elif t.type == GGML_Q8_0:
            blocks = raw.reshape(-1, Q8_0_BLOCK_BYTES)
            d = blocks[:, :2].copy().view("<f2").astype(dtype)  # (nblk, 1)
            q = blocks[:, 2:].view(np.int8).astype(dtype)         # (nblk, 32)
            x = (d * q).reshape(-1)
        else:
            raise GGUFError(f"{name}: unsupported ggml type {t.type}")
        return x.reshape(shape)


def fnv1a64_file(path):
    """FNV-1a 64 over the whole file's bytes."""
    h = 0xcbf29ce484222325
    prime = 0x100000001b3
    mask = 0xFFFFFFFFFFFFFFFF
    with open(path, "rb") as f:
        data = f.read()
    for b in data:
        h = ((h ^ b) * prime) & mask
    return h


def _dump(path):
    g = GGUFFile(path)
    print(f"GGUF v{g.version}, {len(g.kv)} keys, {len(g.tensors)} tensors, "
          f"alignment {g.alignment}, data at {g.data_offset}")
    for k, v in g.kv.items():
        t = TYPE_NAMES.get(g.kv_type[k], "?")
        if isinstance(v, GGUFArray):
            et = TYPE_NAMES.get(v.etype, "?")
            s = repr(v[:8])[:-1] + (", ...]" if len(v) > 8 else "]")
            print(f"  {k} = {et}[{len(v)}] {s}")
        else:
            s = repr(v)
            print(f"  {k} ({t}) = {s[:100]}")
    for t in g.tensors.values():
        print(f"  {t}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        _dump(p)
