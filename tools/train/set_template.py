"""set_template.py — replace (or add) tokenizer.chat_template in a GGUF file, keeping every other
key and every tensor byte for byte.

    python3 tools/train/set_template.py IN.gguf TEMPLATE.jinja [OUT.gguf]   (default OUT = IN)

Tensor offsets are relative to the data section, so only the metadata changes length; the data
section is copied after re-padding to general.alignment. Standard library only (no torch): this
is how models/demo.gguf and demo-q8_0.gguf got tools/train/demo_template.jinja without a retrain
(train.py embeds the same file when it writes a model).
"""

import os
import struct
import sys

KEY = "tokenizer.chat_template"
T_STRING, T_ARRAY = 8, 9
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError("truncated GGUF at offset %d" % self.pos)
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64()).decode("utf-8")

    def skip_value(self, vtype):
        if vtype in SCALAR:
            self.take(SCALAR[vtype])
        elif vtype == T_STRING:
            self.take(self.u64())
        elif vtype == T_ARRAY:
            etype, n = self.u32(), self.u64()
            for _ in range(n):
                self.skip_value(etype)
        else:
            raise ValueError("bad GGUF value type %d" % vtype)


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def set_template(src, template):
    c = Cursor(src)
    if c.take(4) != b"GGUF" or c.u32() != 3:
        raise ValueError("not a GGUF v3 file")
    n_tensors, n_kv = c.u64(), c.u64()
    kvs, align = [], 32
    for _ in range(n_kv):
        start = c.pos
        key = c.string()
        vtype = c.u32()
        vstart = c.pos
        c.skip_value(vtype)
        if key == "general.alignment":
            align = struct.unpack("<I", src[vstart:vstart + 4])[0]
        if key != KEY:
            kvs.append(src[start:c.pos])
    kvs.append(gguf_string(KEY) + struct.pack("<I", T_STRING) + gguf_string(template))
    infos = c.pos
    for _ in range(n_tensors):
        c.string()
        c.take(8 * c.u32() + 4 + 8)
    info_bytes = src[infos:c.pos]
    data = (c.pos + align - 1) // align * align
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)) + b"".join(kvs) + info_bytes
    return head + b"\0" * (-len(head) % align) + src[data:]


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(argv[0], "rb") as f:
        src = f.read()
    with open(argv[1], encoding="utf-8") as f:
        template = f.read()
    out = set_template(src, template)
    dst = argv[2] if len(argv) == 3 else argv[0]
    with open(dst + ".tmp", "wb") as f:
        f.write(out)
    os.replace(dst + ".tmp", dst)
    print("wrote %s (%d bytes)" % (dst, len(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
