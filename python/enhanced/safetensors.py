"""The safetensors format in NumPy alone (https://github.com/huggingface/safetensors).

An 8-byte little-endian header length, a JSON header (tensor name -> dtype, shape, data_offsets,
plus an optional "__metadata__" of strings), then the raw little-endian tensor bytes. The engine
writes and reads the same layout (src/io/safetensors.cpp); files from `safetensors.torch.save_file`
read here too.
"""
import json
import os
import tempfile

import numpy as np

_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I32": "<i4", "I64": "<i8", "U64": "<u8", "U8": "u1"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read_safetensors(path):
    """Returns (tensors: dict name -> ndarray (a copy), metadata: dict of str)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file ({len(data)} bytes, shorter than its header length)")
    header_size = int.from_bytes(data[:8], "little")
    if header_size > len(data) - 8:
        raise ValueError(f"{path}: header of {header_size} bytes does not fit in the file of {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + header_size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: the safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + header_size:]
    tensors = {}
    for name, entry in header.items():
        dtype = _DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise ValueError(f"{path}: tensor '{name}' has dtype {entry.get('dtype')!r}, not one of {sorted(_DTYPES)}")
        begin, end = entry["data_offsets"]
        shape = tuple(int(n) for n in entry["shape"])
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if not 0 <= begin <= end <= len(body) or end - begin != expected:
            raise ValueError(f"{path}: tensor '{name}' offsets {begin}..{end} do not hold shape {list(shape)} "
                             f"of {entry['dtype']} inside the data section of {len(body)} bytes")
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    return tensors, dict(metadata)


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` (name -> array) in the given order, atomically (a temporary file renamed)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    blobs, offset = [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        little = array.dtype.newbyteorder("<")
        if little not in _NAMES:
            raise ValueError(f"tensor '{name}': dtype {array.dtype} has no safetensors name here")
        blob = array.astype(little, copy=False).tobytes()
        header[name] = {"dtype": _NAMES[little], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    write_atomically(path, [len(text).to_bytes(8, "little"), text, *blobs])


def umask_mode(mode):
    """`mode` (0o666 for files, 0o777 for directories) less the process umask: what open() or
    mkdir() would give. tempfile's own 0600/0700 would leave the outputs private."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def write_atomically(path, pieces):
    """Writes the byte strings into a temporary file beside `path`, flushes it and renames it over
    `path`: a crash or an exception leaves the old file (or none) and no partial one. The file gets
    the mode a plain open() would (0666 less the umask)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)
    try:
        os.fchmod(fd, umask_mode(0o666))
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
