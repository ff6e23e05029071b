"""Thrift compact protocol, generic: enough to read a Parquet footer, change a few fields and write
it back, keeping every field it does not know about.

A struct decodes to a ``Struct`` (``{field id: (type, value)}`` in file order); a list to
``(element type, [values])``; binary to ``bytes``; integers to ``int``; a double to ``float``;
a boolean to ``bool``. Encoding a decoded value gives back the same bytes (for the field orders
and list headers Parquet writers produce). Specification: Apache Thrift, "Thrift Compact protocol
encoding" (doc/specs/thrift-compact-protocol.md); Parquet's footer is ``FileMetaData``
(parquet-format, src/main/thrift/parquet.thrift).
"""
from __future__ import annotations

import struct as _struct

# compact type ids
BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)


class ThriftError(ValueError):
    """The bytes are not a struct this codec can round-trip (truncated, or a map)."""


class Struct(dict):
    """Field id -> (compact type, value), in the order the fields were read or set."""

    def get_value(self, fid: int, default=None):
        return self[fid][1] if fid in self else default

    def set_value(self, fid: int, ttype: int, value) -> None:
        self[fid] = (ttype, value)


class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data = memoryview(data)
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError("truncated thrift data")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise ThriftError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ThriftError("truncated thrift data")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def value(self, ttype: int):
        if ttype in (BOOL_TRUE, BOOL_FALSE):  # inside a list: one byte (1 = true)
            return self.byte() == BOOL_TRUE
        if ttype == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if ttype in (I16, I32, I64):
            return self.zigzag()
        if ttype == DOUBLE:
            return _struct.unpack("<d", self.take(8))[0]
        if ttype == BINARY:
            return self.take(self.varint())
        if ttype in (LIST, SET):
            head = self.byte()
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (etype, [self.value(etype) for _ in range(size)])
        if ttype == STRUCT:
            return self.struct()
        raise ThriftError(f"thrift compact type {ttype} is not supported here")

    def struct(self) -> Struct:
        out = Struct()
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            ttype, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            if ttype == BOOL_TRUE:
                out[fid] = (ttype, True)
            elif ttype == BOOL_FALSE:
                out[fid] = (ttype, False)
            else:
                out[fid] = (ttype, self.value(ttype))
            last = fid


def decode_struct(data: bytes, pos: int = 0) -> tuple[Struct, int]:
    """(the struct starting at ``pos``, the position after it)."""
    r = _Reader(data, pos)
    s = r.struct()
    return s, r.pos


def _varint(n: int, out: bytearray) -> None:
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _zigzag(n: int, out: bytearray) -> None:
    _varint((n << 1) ^ (n >> 63) if n < 0 else n << 1, out)


def _value(ttype: int, v, out: bytearray) -> None:
    if ttype in (BOOL_TRUE, BOOL_FALSE):  # inside a list
        out.append(BOOL_TRUE if v else BOOL_FALSE)
    elif ttype == BYTE:
        out.append(v & 0xFF)
    elif ttype in (I16, I32, I64):
        _zigzag(int(v), out)
    elif ttype == DOUBLE:
        out += _struct.pack("<d", v)
    elif ttype == BINARY:
        _varint(len(v), out)
        out += v
    elif ttype in (LIST, SET):
        etype, items = v
        if len(items) < 15:
            out.append((len(items) << 4) | etype)
        else:
            out.append(0xF0 | etype)
            _varint(len(items), out)
        for item in items:
            _value(etype, item, out)
    elif ttype == STRUCT:
        _struct_into(v, out)
    else:
        raise ThriftError(f"thrift compact type {ttype} is not supported here")


def _struct_into(s: Struct, out: bytearray) -> None:
    last = 0
    for fid, (ttype, v) in s.items():
        if ttype in (BOOL_TRUE, BOOL_FALSE):
            ttype = BOOL_TRUE if v else BOOL_FALSE
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ttype)
        else:
            out.append(ttype)
            _zigzag(fid, out)
        if ttype not in (BOOL_TRUE, BOOL_FALSE):
            _value(ttype, v, out)
        last = fid
    out.append(0)


def encode_struct(s: Struct) -> bytes:
    out = bytearray()
    _struct_into(s, out)
    return bytes(out)
