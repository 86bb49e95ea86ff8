"""The engine's .ebin dataset (docs/data-format.md) in NumPy: `write_ebin` makes the bytes that
`enhanced-data convert` makes of the same samples as JSON Lines; `read_ebin` maps a file and
checks it as the engine's `Dataset::open` does (src/data/dataset.cpp).

Samples come in one of three forms, all of shape (N, T, 3, None): field 0 the identifier ids
(0 or more), field 1 the auxiliary ids (0 or more, carried, not used by the model), field 2
exactly one current word:
- a `tf.RaggedTensor` (TensorFlow is never imported here: the tensor's own methods are used);
- nested lists, what `RaggedTensor.to_list()` gives: `data[s][t] == [[ids...], [aux...], [cur]]`;
- CSR arrays, a dict (what `Ebin.to_csr()` gives):
    `cur_word`            (N, T) integers;
    `identifier_ids`      1-D, every field-0 id in position order (sample 0 position 0 first);
    `identifier_lengths`  (N, T) (or N*T) ids per position, summing to len(identifier_ids);
    `auxiliary_ids`, `auxiliary_lengths`  the same for field 1; optional (absent: empty lists).
"""
import mmap
import os
from array import array
from itertools import chain

import numpy as np

from .safetensors import open_regular_file, write_atomically

MAGIC = b"ENHDATA\0"
VERSION = 1
HEADER_SIZE = 128
FLAG_UNLABELED = 1  # header `flags` bit 0: no labels section, labels_offset 0, num_labels 0
INT32_MAX = 2**31 - 1
FIELD_NAMES = ("identifier", "auxiliary", "cur_word")

HEADER_DTYPE = np.dtype([
    ("magic", "u1", (8,)), ("version", "<u4"), ("seq_len", "<u4"), ("num_samples", "<u8"),
    ("num_labels", "<u4"), ("max_token_id", "<i4"), ("num_identifier_ids", "<u8"),
    ("num_auxiliary_ids", "<u8"), ("labels_offset", "<u8"), ("cur_word_offset", "<u8"),
    ("identifier_offsets_offset", "<u8"), ("identifier_ids_offset", "<u8"),
    ("auxiliary_offsets_offset", "<u8"), ("auxiliary_ids_offset", "<u8"), ("file_size", "<u8"),
    ("flags", "<u4"), ("reserved", "u1", (20,))])
assert HEADER_DTYPE.itemsize == HEADER_SIZE

# The sections in file order: (header offset field, element dtype).
SECTIONS = (("labels_offset", "<i4"), ("cur_word_offset", "<i4"),
            ("identifier_offsets_offset", "<u8"), ("identifier_ids_offset", "<i4"),
            ("auxiliary_offsets_offset", "<u8"), ("auxiliary_ids_offset", "<i4"))


def _place(position, seq_len, field=None):
    sample, t = divmod(int(position), seq_len)
    text = f"sample {sample}: position {t}"
    return text if field is None else f"{text}: field {field} ({FIELD_NAMES[field]})"


# --- checking ids, lengths and labels (vectorised; the slow part runs only to name an error) ---

def _position_of_value(ends, k):
    """The position holding value k, given each position's end offset (cumulative lengths)."""
    return int(np.searchsorted(ends, k, side="right"))


def _checked_ids(values, describe):
    """Integer ids in [0, INT32_MAX] as int32; else ValueError naming where (describe(k) names
    the place of value k)."""
    values = np.asarray(values)
    if values.size == 0:
        return np.zeros(0, np.int32)
    if values.ndim != 1:
        raise ValueError(f"{describe(0)}: expected a flat array of ids, got shape {list(values.shape)}")
    if values.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.trunc(values)))
        k = int(bad[0]) if bad.size else 0
        raise ValueError(f"{describe(k)} holds {float(values[k])}, a {values.dtype} number, expected an integer id")
    if values.dtype.kind not in "iu":
        raise ValueError(f"{describe(0)} holds {values.dtype} values, expected integer ids")
    if values.dtype.kind == "i" and values.min() < 0:
        k = int(np.argmax(values < 0))
        raise ValueError(f"{describe(k)} has negative id {values[k]}")
    if values.max() > INT32_MAX:
        k = int(np.argmax(values > INT32_MAX))
        raise ValueError(f"{describe(k)} id {values[k]} does not fit int32")
    return values.astype(np.int32, copy=False)


def _checked_labels(labels, num_samples):
    """(N,) int32 labels in [0, INT32_MAX) (the label count, largest + 1, must fit int32 too)."""
    labels = np.asarray(labels)
    if labels.shape != (num_samples,):
        raise ValueError(f"labels: expected one label for each of the {num_samples} samples, "
                         f"got shape {list(labels.shape)}")
    if labels.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(labels) | (labels != np.trunc(labels)))
        s = int(bad[0]) if bad.size else 0
        raise ValueError(f"sample {s}: label {float(labels[s])} is a {labels.dtype} number, expected an integer")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"labels hold {labels.dtype} values, expected integers")
    if labels.size and labels.dtype.kind == "i" and labels.min() < 0:
        s = int(np.argmax(labels < 0))
        raise ValueError(f"sample {s}: negative label {labels[s]}")
    if labels.size and labels.max() >= INT32_MAX:
        s = int(np.argmax(labels >= INT32_MAX))
        raise ValueError(f"sample {s}: label {labels[s]} does not fit int32 (nor may the label count, largest + 1)")
    return labels.astype(np.int32, copy=False)


def _checked_lengths(lengths, num_positions, seq_len, field):
    """(N*T,) int64 lengths of one field's lists, non-negative."""
    lengths = np.asarray(lengths)
    name = f"{FIELD_NAMES[field]}_lengths"
    num_samples = num_positions // seq_len
    if lengths.size != num_positions or lengths.ndim not in (1, 2) or \
            (lengths.ndim == 2 and lengths.shape != (num_samples, seq_len)):
        raise ValueError(f"{name}: expected (N, T) = ({num_samples}, {seq_len}) lengths, "
                         f"got shape {list(lengths.shape)}")
    if lengths.dtype.kind not in "iu":
        raise ValueError(f"{name} holds {lengths.dtype} values, expected integers")
    lengths = lengths.reshape(-1).astype(np.int64, copy=False)
    if lengths.size and lengths.min() < 0:
        p = int(np.argmax(lengths < 0))
        raise ValueError(f"{_place(p, seq_len, field)} has negative length {lengths[p]}")
    return lengths


class _Csr:
    """Checked samples: cur_word (N*T,) int32, per field 0 and 1 lengths (N*T,) int64 and
    ids int32."""

    def __init__(self, seq_len, cur_word, identifier_lengths, identifier_ids, auxiliary_lengths, auxiliary_ids):
        self.seq_len = int(seq_len)
        self.cur_word = cur_word
        self.lengths = (identifier_lengths, auxiliary_lengths)
        self.ids = (identifier_ids, auxiliary_ids)

    @property
    def num_samples(self):
        return self.cur_word.size // self.seq_len


def _checked_field(lengths, ids, seq_len, field):
    """One ragged field: its lengths and its ids, checked against each other."""
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"{FIELD_NAMES[field]}_ids: expected a flat array of ids, got shape {list(ids.shape)}")
    # The int64 sum below could wrap round to ids.size by chance, and the file's offsets with it.
    # The lengths are non-negative, so a float64 sum (its error far below 2^62) shows such a total
    # first; no array holds 2^62 ids, so nothing that could match ids.size is refused.
    approximate = float(lengths.sum(dtype=np.float64))
    if approximate >= 2.0 ** 62:
        raise ValueError(f"{FIELD_NAMES[field]}_lengths sum to about {approximate:.3g} (beyond 2^62, where an int64 "
                         f"sum wraps), but {FIELD_NAMES[field]}_ids holds {ids.size} ids")
    total = int(lengths.sum())
    if total != ids.size:
        raise ValueError(f"{FIELD_NAMES[field]}_lengths sum to {total}, but {FIELD_NAMES[field]}_ids holds {ids.size} ids")
    return _checked_ids(ids, lambda k: _place(_position_of_value(np.cumsum(lengths), k), seq_len, field))


def _csr_from_arrays(data):
    missing = [key for key in ("cur_word", "identifier_ids", "identifier_lengths") if key not in data]
    if missing:
        raise ValueError(f"CSR samples: missing {missing} (keys: cur_word, identifier_ids, identifier_lengths, "
                         "and optionally auxiliary_ids, auxiliary_lengths)")
    unknown = sorted(set(data) - {"cur_word", "identifier_ids", "identifier_lengths", "auxiliary_ids",
                                  "auxiliary_lengths"})
    if unknown:
        raise ValueError(f"CSR samples: unknown keys {unknown}")
    if ("auxiliary_ids" in data) != ("auxiliary_lengths" in data):
        raise ValueError("CSR samples: give auxiliary_ids and auxiliary_lengths together, or neither")
    cur_word = np.asarray(data["cur_word"])
    if cur_word.ndim != 2 or cur_word.shape[0] == 0 or cur_word.shape[1] == 0:
        raise ValueError(f"cur_word: expected shape (N, T) with N, T > 0, got {list(cur_word.shape)}")
    num_samples, seq_len = cur_word.shape
    num_positions = num_samples * seq_len
    cur_word = _checked_ids(cur_word.reshape(-1), lambda k: _place(k, seq_len, 2))
    fields = []
    for field, name in enumerate(FIELD_NAMES[:2]):
        if f"{name}_ids" in data:
            lengths = _checked_lengths(data[f"{name}_lengths"], num_positions, seq_len, field)
            fields += [lengths, _checked_field(lengths, data[f"{name}_ids"], seq_len, field)]
        else:
            fields += [np.zeros(num_positions, np.int64), np.zeros(0, np.int32)]
    return _Csr(seq_len, cur_word, *fields)


def _csr_from_list_lengths(seq_len, list_lengths, values):
    """Samples given as every list's length, (N*T*3,) in (position, field) order, and all the
    ids in that order (what a RaggedTensor's or nested lists' flattening gives)."""
    by_field = list_lengths.reshape(-1, 3)
    bad = np.flatnonzero(by_field[:, 2] != 1)
    if bad.size:
        p = int(bad[0])
        raise ValueError(f"{_place(p, seq_len, 2)} must hold exactly one id, got {by_field[p, 2]}")
    list_ends = np.cumsum(list_lengths)

    def describe(k):
        position, field = divmod(_position_of_value(list_ends, k), 3)
        return _place(position, seq_len, field)

    values = _checked_ids(values, describe)
    cur_word = values[list_ends[2::3] - 1]
    field_of_value = np.repeat(np.tile(np.arange(3, dtype=np.int8), by_field.shape[0]), list_lengths)
    return _Csr(seq_len, cur_word, by_field[:, 0], values[field_of_value == 0],
                by_field[:, 1], values[field_of_value == 1])


def _is_ragged_tensor(data):
    return type(data).__name__ == "RaggedTensor" and type(data).__module__.startswith("tensorflow")


def _csr_from_ragged(rt):
    if rt.shape.rank != 4 or rt.ragged_rank != 3:
        raise ValueError(f"expected a RaggedTensor of shape (N, T, 3, None) with a ragged last axis, got shape "
                         f"{rt.shape} with ragged_rank {rt.ragged_rank}")
    # the splits as they are (row_lengths() would compute them in TensorFlow, slower)
    sample_lengths, position_lengths, list_lengths = (np.diff(x.numpy().astype(np.int64, copy=False))
                                                      for x in rt.nested_row_splits)
    return _csr_from_shapes(sample_lengths, position_lengths, list_lengths, rt.flat_values.numpy())


def _csr_from_shapes(sample_lengths, position_lengths, list_lengths, values):
    """Samples, positions and lists counted level by level (each a flat array of lengths)."""
    if sample_lengths.size == 0:
        raise ValueError("no samples")
    seq_len = int(sample_lengths[0])
    bad = np.flatnonzero(sample_lengths != seq_len)
    if bad.size:
        s = int(bad[0])
        raise ValueError(f"sample {s}: expected {seq_len} positions (as sample 0), got {sample_lengths[s]}")
    if seq_len == 0:
        raise ValueError("sample 0: no positions (T must be at least 1)")
    bad = np.flatnonzero(position_lengths != 3)
    if bad.size:
        p = int(bad[0])
        raise ValueError(f"{_place(p, seq_len)}: expected exactly 3 lists, got {position_lengths[p]} elements")
    return _csr_from_list_lengths(seq_len, list_lengths, values)


def _csr_from_lists(data):
    """Nested lists: flattened level by level with C-level iterators; on any surprise (a float, a
    string, a number where a list belongs) the slow walk names the first bad place."""
    try:
        sample_lengths = np.fromiter(map(len, data), np.int64, len(data))
        positions = list(chain.from_iterable(data))
        position_lengths = np.fromiter(map(len, positions), np.int64, len(positions))
        lists = list(chain.from_iterable(positions))
        list_lengths = np.fromiter(map(len, lists), np.int64, len(lists))
        values = np.frombuffer(array("q", chain.from_iterable(lists)), np.int64)
    except (TypeError, OverflowError):
        _name_bad_list_entry(data)
        raise
    if not _only_lists_and_ids(data, positions, lists):
        _name_bad_list_entry(data)
    return _csr_from_shapes(sample_lengths, position_lengths, list_lengths, values)


_LIST_TYPES = (list, tuple, np.ndarray)


def _only_lists_and_ids(data, positions, lists):
    """Whether every level is lists and every id an integer: what the fast flattening lets through
    also holds bytes (a list of small integers to len() and iteration) and bools (integers to
    array("q")), which are no samples and no ids. One pass over the types, at C speed."""
    for level in (data, positions, lists):
        if not all(issubclass(kind, _LIST_TYPES) for kind in set(map(type, level))):
            return False
    return all(issubclass(kind, (int, np.integer)) and not issubclass(kind, (bool, np.bool_))
               for kind in set(map(type, chain.from_iterable(lists))))


def _is_list(x):
    return isinstance(x, (list, tuple, np.ndarray))


def _kind(x):
    return "a non-integer number" if isinstance(x, (float, np.floating)) else type(x).__name__


def _name_bad_list_entry(data):
    """Walks nested lists and raises ValueError at the first entry that is not what it must be."""
    seq_len = len(data[0]) if len(data) and _is_list(data[0]) else None
    for s, sample in enumerate(data):
        if not _is_list(sample):
            raise ValueError(f"sample {s}: holds {_kind(sample)}, expected a list of positions")
        if len(sample) != seq_len:
            raise ValueError(f"sample {s}: expected {seq_len} positions (as sample 0), got {len(sample)}")
        for t, position in enumerate(sample):
            where = f"sample {s}: position {t}"
            if not _is_list(position) or len(position) != 3:
                got = f"{len(position)} elements" if _is_list(position) else _kind(position)
                raise ValueError(f"{where}: expected exactly 3 lists, got {got}")
            for field, ids in enumerate(position):
                place = f"{where}: field {field} ({FIELD_NAMES[field]})"
                if not _is_list(ids):
                    raise ValueError(f"{place} holds {_kind(ids)}, expected a list")
                for value in ids:
                    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                        raise ValueError(f"{place} holds {_kind(value)} {value!r}, expected an integer id")
                    if value < 0:
                        raise ValueError(f"{place} has negative id {value}")
                    if value > INT32_MAX:
                        raise ValueError(f"{place} id {value} does not fit int32")


def _samples(data):
    if _is_ragged_tensor(data):
        return _csr_from_ragged(data)
    if isinstance(data, dict):
        return _csr_from_arrays(data)
    if not hasattr(data, "__len__"):
        raise ValueError(f"samples: expected a tf.RaggedTensor, nested lists or a dict of CSR arrays, "
                         f"got {type(data).__name__}")
    if len(data) == 0:
        raise ValueError("no samples")
    return _csr_from_lists(data)


# --- writing ---

class _Offsets:
    """An offsets section ((N*T+1,) uint64: 0, then the running total of `lengths`), computed
    where it goes (image_bytes) or as an array."""

    def __init__(self, lengths):
        self.lengths, self.nbytes = lengths, (lengths.size + 1) * 8

    def into(self, out):
        """Writes the section into `out`, (N*T+1,) int64 (lengths are non-negative)."""
        out[0] = 0
        np.cumsum(self.lengths, out=out[1:])

    def array(self):
        offsets = np.empty(self.lengths.size + 1, np.int64)
        self.into(offsets)
        return offsets.view(np.uint64)


def _ebin_pieces(samples, labels):
    """The header and the sections (each padded to 8 bytes) of an .ebin file, in file order."""
    arrays = [labels, samples.cur_word.astype("<i4", copy=False),
              _Offsets(samples.lengths[0]), samples.ids[0].astype("<i4", copy=False),
              _Offsets(samples.lengths[1]), samples.ids[1].astype("<i4", copy=False)]
    header = np.zeros((), HEADER_DTYPE)
    header["magic"] = np.frombuffer(MAGIC, np.uint8)
    header["version"] = VERSION
    header["seq_len"] = samples.seq_len
    header["num_samples"] = samples.num_samples
    header["num_identifier_ids"] = samples.ids[0].size
    header["num_auxiliary_ids"] = samples.ids[1].size
    header["max_token_id"] = max(int(a.max()) if a.size else -1 for a in (samples.cur_word, *samples.ids))
    if labels is None:
        header["flags"] = FLAG_UNLABELED
    else:
        header["num_labels"] = int(labels.max()) + 1
        arrays[0] = labels.astype("<i4", copy=False)
    pieces, at = [header.tobytes()], HEADER_SIZE
    for (field, _), section in zip(SECTIONS, arrays):
        if section is None:
            continue  # an unlabeled file has no labels section; labels_offset stays 0
        header[field] = at
        padding = -section.nbytes % 8
        pieces += [section, bytes(padding)]
        at += section.nbytes + padding
    header["file_size"] = at
    pieces[0] = header.tobytes()
    return pieces


def image_pieces(samples, labels=None):
    """The .ebin file's pieces (bytes-like, in file order) of checked samples (_samples) and their
    labels ((N,) integers, checked here; None: unlabeled): what write_ebin writes."""
    checked_labels = None if labels is None else _checked_labels(labels, samples.num_samples)
    return [p.array() if isinstance(p, _Offsets) else p for p in _ebin_pieces(samples, checked_labels)]


def image_bytes(samples, labels=None):
    """image_pieces' bytes in one bytearray, each section written where it goes (the offsets
    computed there), which the engine reads in place (enhanced.Model): the peak is the image
    beside the samples, not the image and a second copy of its offsets sections."""
    checked_labels = None if labels is None else _checked_labels(labels, samples.num_samples)
    pieces = _ebin_pieces(samples, checked_labels)
    image, at = bytearray(sum(p.nbytes if hasattr(p, "nbytes") else len(p) for p in pieces)), 0
    for piece in pieces:
        if isinstance(piece, _Offsets):
            piece.into(np.frombuffer(image, np.int64, piece.nbytes // 8, at))
        elif isinstance(piece, np.ndarray):
            np.frombuffer(image, piece.dtype, piece.size, at)[:] = piece.reshape(-1)
        else:
            image[at:at + len(piece)] = piece
        at += piece.nbytes if hasattr(piece, "nbytes") else len(piece)
    return image


def write_ebin(path, data, labels=None):
    """Writes N samples (a tf.RaggedTensor, nested lists or CSR arrays; see the module's doc) and
    their labels ((N,) integers; None: an unlabeled file, for prediction) as an .ebin file,
    atomically. Every bad input raises ValueError naming the sample and the position, before
    anything is written."""
    write_atomically(path, image_pieces(_samples(data), labels))


# --- reading ---

class Ebin:
    """A mapped .ebin file (from `read_ebin`): read-only NumPy views of its sections.

    cur_word (N, T) int32; identifier_offsets (N*T+1,) uint64 into identifier_ids int32 (field 0
    at position p = s*T + t is identifier_ids[identifier_offsets[p]:identifier_offsets[p+1]]);
    auxiliary_offsets, auxiliary_ids likewise (field 1); labels (N,) int32, None when unlabeled.
    """

    def __init__(self, path, header, labels, cur_word, identifier_offsets, identifier_ids,
                 auxiliary_offsets, auxiliary_ids):
        self.path = path
        self.seq_len = int(header["seq_len"])
        self.num_samples = int(header["num_samples"])
        self.num_labels = int(header["num_labels"])
        self.max_token_id = int(header["max_token_id"])
        self.labels = labels
        self.cur_word = cur_word
        self.identifier_offsets, self.identifier_ids = identifier_offsets, identifier_ids
        self.auxiliary_offsets, self.auxiliary_ids = auxiliary_offsets, auxiliary_ids

    T = property(lambda self: self.seq_len)
    N = property(lambda self: self.num_samples)
    unlabeled = property(lambda self: self.labels is None)

    def __len__(self):
        return self.num_samples

    def __repr__(self):
        kind = "unlabeled" if self.unlabeled else f"{self.num_labels} labels"
        return f"Ebin({self.path!r}: {self.num_samples} samples of {self.seq_len} positions, {kind})"

    def to_csr(self, start=0, stop=None):
        """Samples [start, stop) as the CSR dict that write_ebin and EnhancedModule take
        (ids are views into the file, lengths (n, T) int64)."""
        start, stop, _ = slice(start, stop).indices(self.num_samples)
        stop = max(start, stop)
        T = self.seq_len
        csr = {"cur_word": self.cur_word[start:stop]}
        for name, offsets, ids in (("identifier", self.identifier_offsets, self.identifier_ids),
                                   ("auxiliary", self.auxiliary_offsets, self.auxiliary_ids)):
            window = offsets[start * T:stop * T + 1]
            csr[f"{name}_ids"] = ids[int(window[0]):int(window[-1])]
            csr[f"{name}_lengths"] = np.diff(window).astype(np.int64).reshape(-1, T)
        return csr

    def _lists_flat(self):
        """Every list's length, (N*T*3,) in (position, field) order, and the ids in that order."""
        id_lengths = np.diff(self.identifier_offsets).astype(np.int64)
        aux_lengths = np.diff(self.auxiliary_offsets).astype(np.int64)
        list_lengths = np.stack([id_lengths, aux_lengths, np.ones_like(id_lengths)], axis=1).reshape(-1)
        starts = (np.cumsum(list_lengths) - list_lengths).reshape(-1, 3)
        values = np.empty(int(list_lengths.sum()), np.int32)
        for field, (lengths, offsets, ids) in enumerate(((id_lengths, self.identifier_offsets, self.identifier_ids),
                                                         (aux_lengths, self.auxiliary_offsets, self.auxiliary_ids))):
            # id k of position p goes to the start of p's list plus its rank in that list
            shift = np.repeat(starts[:, field] - offsets[:-1].astype(np.int64), lengths)
            values[shift + np.arange(ids.size)] = ids
        values[starts[:, 2]] = self.cur_word.reshape(-1)
        return list_lengths, values

    def to_lists(self):
        """Nested lists, as `RaggedTensor.to_list()` gives them: [s][t] == [[ids], [aux], [cur]]."""
        list_lengths, values = self._lists_flat()
        flat, ends = values.tolist(), np.cumsum(list_lengths).tolist()
        lists = [flat[begin:end] for begin, end in zip([0] + ends[:-1], ends)]
        positions = [lists[i:i + 3] for i in range(0, len(lists), 3)]
        return [positions[i:i + self.seq_len] for i in range(0, len(positions), self.seq_len)]

    def to_ragged(self):
        """A tf.RaggedTensor (N, T, 3, None) of int32 ids, the T and 3 axes uniform (so that
        `x[:, :, 0]` works as on the user's own input)."""
        import tensorflow as tf
        list_lengths, values = self._lists_flat()
        lists = tf.RaggedTensor.from_row_lengths(values, list_lengths)         # (N*T*3, None)
        positions = tf.RaggedTensor.from_uniform_row_length(lists, 3)          # (N*T, 3, None)
        return tf.RaggedTensor.from_uniform_row_length(positions, self.seq_len)  # (N, T, 3, None)


def _looks_like_json_lines(head):
    text = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    return text.lstrip(b" \t\r\n").startswith(b"{")


def _check_section(path, name, offset, count, element_size, file_size):
    if offset % 8:
        raise ValueError(f"{path}: section {name} at offset {offset} is not 8-byte aligned")
    if offset < HEADER_SIZE:
        raise ValueError(f"{path}: section {name} at offset {offset} overlaps the header")
    if offset + count * element_size > file_size:
        raise ValueError(f"{path}: section {name} (offset {offset}, {count} entries of {element_size} bytes) "
                         f"extends past the end of the file ({file_size} bytes)")


def _check_header(path, header, file_size):
    if bytes(header["magic"]) != MAGIC:
        raise ValueError(f"{path}: bad magic: not an .ebin dataset")
    if header["version"] != VERSION:
        raise ValueError(f"{path}: unsupported version {header['version']} (this reader reads version {VERSION})")
    flags = int(header["flags"])
    if flags & ~FLAG_UNLABELED:
        raise ValueError(f"{path}: unknown flags {flags:#x} (this reader knows bit 0, unlabeled)")
    if flags & FLAG_UNLABELED and (header["labels_offset"] or header["num_labels"]):
        raise ValueError(f"{path}: unlabeled, yet labels_offset is {header['labels_offset']} and num_labels "
                         f"{header['num_labels']} (both must be 0)")
    if header["file_size"] != file_size:
        what = "truncated" if header["file_size"] > file_size else "size mismatch"
        raise ValueError(f"{path}: {what}: header says {header['file_size']} bytes, file has {file_size}")
    n, T = int(header["num_samples"]), int(header["seq_len"])
    if T == 0:
        raise ValueError(f"{path}: seq_len (T) is 0")
    if n > file_size // 4 or (n and T > file_size // 4 // n):
        raise ValueError(f"{path}: header claims {n} samples of {T} positions, more than the file can hold")
    counts = {"labels_offset": n, "cur_word_offset": n * T, "identifier_offsets_offset": n * T + 1,
              "identifier_ids_offset": int(header["num_identifier_ids"]), "auxiliary_offsets_offset": n * T + 1,
              "auxiliary_ids_offset": int(header["num_auxiliary_ids"])}
    reserved = np.flatnonzero(header["reserved"])
    if reserved.size:
        at = int(reserved[0])
        raise ValueError(f"{path}: reserved header byte {HEADER_SIZE - 20 + at} is {header['reserved'][at]}, must be 0")
    _check_sections(path, header, counts, file_size)
    return counts


def _check_sections(path, header, counts, file_size):
    """Every section inside the file, aligned, after the header and after the one before it in the
    header's order: no two share a byte (as Dataset::open checks)."""
    before, before_end = None, 0
    for field, dtype in SECTIONS:
        if field == "labels_offset" and header["flags"] & FLAG_UNLABELED:
            continue
        name, offset = field[:-len("_offset")], int(header[field])
        _check_section(path, name, offset, counts[field], np.dtype(dtype).itemsize, file_size)
        if before is not None and offset < before_end:
            raise ValueError(f"{path}: section {name} at offset {offset} overlaps section {before} "
                             f"[{before_offset}, {before_end}): sections are disjoint, in the header's order")
        before, before_offset, before_end = name, offset, offset + counts[field] * np.dtype(dtype).itemsize


def _check_offsets(path, offsets, total, seq_len, field):
    name = f"{FIELD_NAMES[field]}_offsets"
    if offsets[0] != 0:
        raise ValueError(f"{path}: {name}[0] is {offsets[0]}, must be 0")
    bad = (offsets[1:] < offsets[:-1]) | (offsets[1:] > total)
    if bad.any():
        p = int(np.argmax(bad))
        raise ValueError(f"{path}: {_place(p, seq_len, field)} offsets out of range: {offsets[p]} .. {offsets[p + 1]} "
                         f"({total} ids in all)")
    if offsets[-1] != total:
        raise ValueError(f"{path}: {name} end at {offsets[-1]} but the header says {total} ids")


def _check_contents(path, header, ebin):
    """Offsets, ids and labels, as Dataset::open checks them."""
    T = ebin.seq_len
    fields = ((ebin.identifier_offsets, ebin.identifier_ids), (ebin.auxiliary_offsets, ebin.auxiliary_ids))
    for field, (offsets, ids) in enumerate(fields):
        _check_offsets(path, offsets, ids.size, T, field)
    max_id = -1
    for field, (offsets, ids) in enumerate(fields):
        if ids.size and ids.min() < 0:
            k = int(np.argmax(ids < 0))
            p = _position_of_value(offsets[1:], k)
            raise ValueError(f"{path}: {_place(p, T, field)} has negative id {ids[k]}")
        max_id = max(max_id, int(ids.max()) if ids.size else -1)
    cur_word = ebin.cur_word.reshape(-1)
    if cur_word.size and cur_word.min() < 0:
        p = int(np.argmax(cur_word < 0))
        raise ValueError(f"{path}: {_place(p, T, 2)} has negative id {cur_word[p]}")
    max_id = max(max_id, int(cur_word.max()) if cur_word.size else -1)
    if max_id != ebin.max_token_id:
        raise ValueError(f"{path}: header says the largest id is {ebin.max_token_id} but the data holds {max_id}")
    if ebin.labels is not None:
        labels, num_labels = ebin.labels, ebin.num_labels
        if num_labels > INT32_MAX:
            raise ValueError(f"{path}: header says {num_labels} labels, more than an int32 count")
        bad = np.flatnonzero((labels < 0) | (labels >= num_labels))
        if bad.size:
            s = int(bad[0])
            raise ValueError(f"{path}: sample {s}: " + (f"negative label {labels[s]}" if labels[s] < 0 else
                             f"label {labels[s]} >= num_labels {num_labels} in the header"))
        max_label = int(labels.max()) if labels.size else -1
        if num_labels != max_label + 1:
            raise ValueError(f"{path}: header says {num_labels} labels but the largest label is {max_label}")


def read_ebin(path):
    """Maps an .ebin file and checks it as the engine does; returns an `Ebin` of read-only views.
    A malformed file raises ValueError naming it."""
    path = os.fspath(path)
    with open_regular_file(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        if _looks_like_json_lines(f.read(256)):
            raise ValueError(f"{path}: looks like JSON Lines, not .ebin: write it with enhanced.write_ebin "
                             f"or enhanced-data convert {path} OUT.ebin")
        if file_size == 0:
            raise ValueError(f"{path}: empty file (not an .ebin dataset)")
        if file_size < HEADER_SIZE:
            raise ValueError(f"{path}: truncated: {file_size} bytes, smaller than the {HEADER_SIZE}-byte header")
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    raw = np.frombuffer(mapping, np.uint8)
    header = raw[:HEADER_SIZE].view(HEADER_DTYPE)[0]
    counts = _check_header(path, header, file_size)

    def section(field, dtype):
        offset = int(header[field])
        return raw[offset:offset + counts[field] * np.dtype(dtype).itemsize].view(dtype)

    views = [None if field == "labels_offset" and header["flags"] & FLAG_UNLABELED else section(field, dtype)
             for field, dtype in SECTIONS]
    views[1] = views[1].reshape(int(header["num_samples"]), int(header["seq_len"]))
    ebin = Ebin(path, header.copy(), *views)
    _check_contents(path, header, ebin)
    return ebin
