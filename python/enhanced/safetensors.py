"""The safetensors format in NumPy alone (https://github.com/huggingface/safetensors).

An 8-byte little-endian header length, a JSON header (tensor name -> dtype, shape, data_offsets,
plus an optional "__metadata__" of strings), then the raw little-endian tensor bytes. The engine
writes and reads the same layout (src/io/safetensors.cpp), and both readers refuse the same files
(docs/data-format.md, "Safetensors files"; tests/bad-files/); files from
`safetensors.torch.save_file` read here too, in the dtypes the engine reads (F32 F64 I32 I64 U64).
"""
import json
import math
import os
import re
import stat
import tempfile

import numpy as np

# The dtypes both readers take (src/io/safetensors.cpp reads these and no others).
_DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U64": "<u8"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}
# The format's bound on the header (the safetensors crate's MAX_HEADER_SIZE), checked before it is read.
MAX_HEADER_BYTES = 100_000_000
# The deepest the format nests: the header object, a tensor's entry, its shape or offsets list.
MAX_HEADER_DEPTH = 3
# Inside a string: an escape (two bytes) or its closing quote; outside: a quote or a bracket.
_STRING_PART = re.compile(rb'\\.|"', re.S)
_STRUCTURE = re.compile(rb'["\[\]{}]')


def excerpt(text, limit=60):
    """A value read from a file, as a message quotes it: at most `limit` characters, then "..."."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def dtype_name(array):
    """The safetensors name of an array's dtype ("F32"...), or its NumPy name where there is none."""
    return _NAMES.get(np.asarray(array).dtype.newbyteorder("<"), str(np.asarray(array).dtype))


def _check_nesting(path, header):
    """Refuses a header nested deeper than the format's three levels before json.loads recurses
    into it (brackets inside strings do not count), as the engine does."""
    depth, at = 0, 0
    while (found := _STRUCTURE.search(header, at)) is not None:
        at = found.end()
        char = found.group()
        if char == b'"':
            while (end := _STRING_PART.search(header, at)) is not None and end.group() != b'"':
                at = end.end()
            at = end.end() if end else len(header)
        elif char in b"[{":
            depth += 1
            if depth > MAX_HEADER_DEPTH:
                raise ValueError(f"{path}: header nests deeper than {MAX_HEADER_DEPTH} levels (object, tensor, shape), "
                                 f"at byte {8 + found.start()}")
        else:
            depth -= 1


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _quoted(value):
    """A header value as the engine's message quotes it (nlohmann's compact dump)."""
    return excerpt(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _tensor_entry(path, name, entry, data_size):
    """(dtype, shape, begin, end) of one header entry, checked on its own as the engine does."""
    where = f"{path}: tensor '{excerpt(name)}': "
    if not isinstance(entry, dict):
        raise ValueError(where + "entry is not an object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in entry:
            raise ValueError(where + f"malformed entry (no '{key}')")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise ValueError(where + "dtype is not a string")
    if dtype not in _DTYPES:
        raise ValueError(where + f"unsupported dtype {excerpt(dtype)}")
    if not isinstance(shape, list):
        raise ValueError(where + "shape is not a list")
    for extent in shape:
        if not isinstance(extent, int) or isinstance(extent, bool) or extent > 2**63 - 1:
            raise ValueError(where + f"shape holds {_quoted(extent)}, expected integers")
    shape_text = "[" + ", ".join(map(str, shape)) + "]"
    if any(extent < 0 for extent in shape):
        raise ValueError(where + f"negative extent in shape {shape_text}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) and o < 2**64 for o in offsets):
        raise ValueError(where + f"data_offsets must hold 2 non-negative integers, got {_quoted(offsets)}")
    begin, end = offsets
    if begin > end or end > data_size:
        raise ValueError(where + f"data [{begin}, {end}) outside the {data_size}-byte data section (truncated file?)")
    size = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
    if size >= 2**64:
        raise ValueError(where + f"shape {shape_text} of {dtype} has more bytes than fit in memory")
    if end - begin != size:
        raise ValueError(where + f"{end - begin} bytes do not match shape {shape_text} of {dtype} ({size} bytes)")
    return dtype, tuple(shape), begin, end


def _check_layout(path, entries):
    """The format's layout rule: in the order of their offsets the tensors cover the data section
    from its first byte, each beginning where the one before ends. Returns the last one's end."""
    end, before = 0, None
    for name, (_, _, begin, stop) in sorted(entries.items(), key=lambda item: item[1][2:]):
        where = f"{path}: tensor '{excerpt(name)}': data [{begin}, {stop}) "
        if begin < end:
            raise ValueError(where + f"overlaps tensor '{excerpt(before)}' at [{entries[before][2]}, {end})")
        if begin > end:
            raise ValueError(where + f"leaves bytes [{end}, {begin}) of the data section unused")
        end, before = stop, name
    return end


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")  # json.loads takes NaN and Infinity; JSON (and the engine) does not


def _file_kind(mode):
    """What a file that is not a regular one is, worded as the engine's src/io/input_file.h."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular_file(path):
    """`path` opened for reading in binary, after checking it is a regular file: a directory, a
    device (/dev/zero) or a FIFO is refused by name, as is a file that cannot be opened."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path}: not a regular file ({_file_kind(mode)})")
        return open(path, "rb")
    except OSError as e:
        raise ValueError(f"{path}: cannot open ({e.strerror})") from None


def _read_header(path, f, file_size):
    if file_size < 8:
        raise ValueError(f"{path}: not a safetensors file ({file_size} bytes, too short for a header)")
    header_size = int.from_bytes(f.read(8), "little")
    if header_size > MAX_HEADER_BYTES:
        raise ValueError(f"{path}: not safetensors: header of {header_size} bytes, more than the format's "
                         f"{MAX_HEADER_BYTES}")
    if header_size > file_size - 8:
        raise ValueError(f"{path}: truncated or not safetensors: header of {header_size} bytes, file has {file_size}")
    text = f.read(header_size)
    _check_nesting(path, text)
    try:
        header = json.loads(text.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: header is not valid JSON ({excerpt(e, 160)})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    return header, 8 + header_size


def _metadata(path, metadata):
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: __metadata__ is not an object")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise ValueError(f"{path}: metadata '{excerpt(key)}' is not a string")
    return dict(metadata)


def read_safetensors(path):
    """Returns (tensors: dict name -> ndarray (a copy), metadata: dict of str). Checks what the
    engine's reader checks (src/io/safetensors.cpp); a malformed file raises ValueError naming it,
    before its data is read."""
    path = os.fspath(path)
    with open_regular_file(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        header, data_begin = _read_header(path, f, file_size)
        metadata = _metadata(path, header.pop("__metadata__", {}))
        entries = {name: _tensor_entry(path, name, entry, file_size - data_begin) for name, entry in header.items()}
        data_end = data_begin + _check_layout(path, entries)
        if data_end != file_size:
            raise ValueError(f"{path}: {file_size} bytes, but its tensors end at {data_end}")
        body = f.read(data_end - data_begin)
    if len(body) != data_end - data_begin:
        raise ValueError(f"{path}: read error")
    tensors = {name: np.frombuffer(body[begin:stop], _DTYPES[dtype]).reshape(shape).copy()
               for name, (dtype, shape, begin, stop) in entries.items()}
    return tensors, metadata


def read_metadata(path):
    """The `__metadata__` of a safetensors file (dict of str), its header alone read and checked."""
    path = os.fspath(path)
    with open_regular_file(path) as f:
        header, _ = _read_header(path, f, os.fstat(f.fileno()).st_size)
    return _metadata(path, header.get("__metadata__", {}))


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


def unwritable_folder(path):
    """Why a folder cannot be made or written at `path`, or None: the path, or its nearest existing
    ancestor, is not a folder or cannot be written. Said before anything is read or written."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written (permission denied)"
    return None


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
