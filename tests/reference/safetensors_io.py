"""Minimal reader/writer for the safetensors format, written from the format description.

Layout of a file:
  * 8 bytes: N, little-endian unsigned 64-bit, the length of the header;
  * N bytes: UTF-8 JSON object
        {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
         "__metadata__": {"<key>": "<string value>", ...}}   (metadata optional)
    offsets are relative to the first byte after the header; the header may be padded
    with trailing spaces;
  * the data buffer: each tensor little-endian, row-major (C order).

The reader validates the header strictly (like the reference implementation): known dtypes,
non-negative integer shapes, 0 <= begin <= end <= buffer length, end - begin equal to the
tensor's byte size, no two tensors overlapping and the buffer covered without holes.
Zero-element tensors (shape [0], or any shape containing 0) have begin == end.
"""
import json
import struct

import numpy as np

__all__ = ["SafetensorsError", "read_safetensors", "write_safetensors", "loads", "dumps"]

# safetensors dtype tag -> little-endian numpy dtype
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_TAGS = {(dt.kind, dt.itemsize): tag for tag, dt in _DTYPES.items()}

MAX_HEADER = 100 * 1000 * 1000


class SafetensorsError(ValueError):
    """Malformed or unsupported safetensors content."""


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def loads(buf, what="<buffer>"):
    """Parse bytes of a safetensors file. Returns (dict name -> np.ndarray, metadata dict)."""
    buf = memoryview(buf)
    if len(buf) < 8:
        raise SafetensorsError(f"{what}: {len(buf)} bytes, too short for the 8-byte header length")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n > MAX_HEADER:
        raise SafetensorsError(f"{what}: header length {n} exceeds the limit {MAX_HEADER}")
    if 8 + n > len(buf):
        raise SafetensorsError(f"{what}: header length {n} runs past the end of the file ({len(buf)} bytes)")
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"{what}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{what}: header is not a JSON object")
    data = buf[8 + n:]
    datalen = len(data)

    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{what}: __metadata__ must map strings to strings")

    tensors = {}
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise SafetensorsError(f"{what}: entry {name!r} is not an object")
        extra = set(info) - {"dtype", "shape", "data_offsets"}
        missing = {"dtype", "shape", "data_offsets"} - set(info)
        if missing or extra:
            raise SafetensorsError(
                f"{what}: entry {name!r}: missing keys {sorted(missing)}, unknown keys {sorted(extra)}")
        tag, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if tag not in _DTYPES:
            raise SafetensorsError(f"{what}: entry {name!r}: unsupported dtype {tag!r}")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise SafetensorsError(f"{what}: entry {name!r}: bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs)):
            raise SafetensorsError(f"{what}: entry {name!r}: bad data_offsets {offs!r}")
        begin, end = offs
        if not (0 <= begin <= end <= datalen):
            raise SafetensorsError(
                f"{what}: entry {name!r}: data_offsets [{begin}, {end}] outside the data buffer of {datalen} bytes")
        dt = _DTYPES[tag]
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * dt.itemsize:
            raise SafetensorsError(
                f"{what}: entry {name!r}: {end - begin} bytes for shape {shape} of {tag} "
                f"(needs {numel * dt.itemsize})")
        arr = np.frombuffer(data[begin:end], dtype=dt, count=numel).reshape(shape)
        tensors[name] = arr.astype(dt.newbyteorder("="), copy=True)
        spans.append((begin, end, name))

    # no overlaps, no holes, whole buffer used
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            kind = "overlaps the previous tensor" if begin < pos else f"leaves a hole at byte {pos}"
            raise SafetensorsError(f"{what}: entry {name!r} at [{begin}, {end}] {kind}")
        pos = end
    if pos != datalen:
        raise SafetensorsError(f"{what}: tensors cover {pos} bytes of a {datalen}-byte data buffer")
    return tensors, metadata


def read_safetensors(path):
    """Read a safetensors file. Returns (dict name -> np.ndarray, metadata dict of str)."""
    with open(path, "rb") as f:
        buf = f.read()
    return loads(buf, what=str(path))


def dumps(tensors, metadata=None):
    """Serialise dict name -> array-like (and optional str->str metadata) to bytes."""
    header = {}
    chunks = []
    pos = 0
    if metadata:
        md = {}
        for k, v in metadata.items():
            if not isinstance(k, str):
                raise SafetensorsError(f"metadata key {k!r} is not a string")
            md[k] = v if isinstance(v, str) else str(v)
        header["__metadata__"] = md
    for name, value in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError("'__metadata__' cannot be a tensor name")
        arr = np.asarray(value)
        tag = _TAGS.get((arr.dtype.kind, arr.dtype.itemsize))
        if tag is None:
            raise SafetensorsError(f"tensor {name!r}: unsupported dtype {arr.dtype}")
        raw = np.ascontiguousarray(arr, dtype=_DTYPES[tag]).tobytes(order="C")
        header[name] = {"dtype": tag, "shape": [int(d) for d in arr.shape],
                        "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)  # align the data buffer to 8 bytes
    return struct.pack("<Q", len(hbytes)) + hbytes + b"".join(chunks)


def write_safetensors(path, tensors, metadata=None):
    """Write dict name -> array-like to a safetensors file (insertion order)."""
    data = dumps(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)
