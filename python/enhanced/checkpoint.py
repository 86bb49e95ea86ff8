"""Engine checkpoints: safetensors files with the PyTorch names of docs/model.md and the model's
hyper-parameters in `__metadata__` (src/io/checkpoint.cpp writes and reads the same), and the
labels' names where the run was given them (`label_names`, src/io/label_names.cpp)."""
import json
import re
from dataclasses import dataclass

import numpy as np

from .safetensors import dtype_name, excerpt, read_metadata, read_safetensors, write_safetensors

# The engine's names (enumerated once in src/core/model.cpp); written here too so that this module
# needs NumPy only, and checked against enhanced._core's by python/tests/test_names.py.
BLENDS = ("mean", "scalar-mean")
POOLS = ("feature", "time")


@dataclass(frozen=True)
class ModelConfig:
    """The engine's model: V, D, H, T, L, the blend and the pooling (docs/model.md)."""
    vocab_size: int
    num_labels: int
    embedding_dim: int = 32
    hidden: int = 128
    seq_len: int = 400
    blend: str = "mean"
    pool: str = "feature"

    def __post_init__(self):
        for field in ("vocab_size", "num_labels", "embedding_dim", "hidden", "seq_len"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"ModelConfig.{field} must be a positive integer, got {value!r}")
        if self.blend not in BLENDS:
            raise ValueError(f"ModelConfig.blend must be one of {BLENDS}, got {self.blend!r}")
        if self.pool not in POOLS:
            raise ValueError(f"ModelConfig.pool must be one of {POOLS}, got {self.pool!r}")

    @property
    def pooled_features(self):
        """Inputs of the dense layer: T with feature pooling, 2H with time pooling."""
        return self.seq_len if self.pool == "feature" else 2 * self.hidden

    def metadata(self):
        return {"format": "enhanced-checkpoint", "format_version": "1",
                "vocab_size": self.vocab_size, "embedding_dim": self.embedding_dim,
                "hidden": self.hidden, "seq_len": self.seq_len, "num_labels": self.num_labels,
                "blend": self.blend, "pool": self.pool}


def parameter_shapes(config):
    """Name -> shape of every parameter, in the engine's order (src/core/model.cpp)."""
    V, D, H = config.vocab_size, config.embedding_dim, config.hidden
    shapes = {"embedding.weight": (V, D)}
    for name, shape in (("weight_ih", (4 * H, D)), ("weight_hh", (4 * H, H)),
                        ("bias_ih", (4 * H,)), ("bias_hh", (4 * H,))):
        shapes[f"lstm.{name}_l0"] = shape
        shapes[f"lstm.{name}_l0_reverse"] = shape
    shapes["dense.weight"] = (config.num_labels, config.pooled_features)
    shapes["dense.bias"] = (config.num_labels,)
    return shapes


INT32_MIN, INT32_MAX, INT64_MAX = -2**31, 2**31 - 1, 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]+")


def _config_from_metadata(path, metadata):
    """The ModelConfig of the metadata, its integers read as the engine reads them
    (src/io/checkpoint.cpp): decimal digits only, in the range of the field."""
    def integer(key, highest=INT32_MAX):
        if key not in metadata:
            raise ValueError(f"{path}: metadata has no '{key}'")
        text = metadata[key]
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{path}: metadata '{key}' is not an integer: '{excerpt(text)}'")
        if not INT32_MIN <= int(text) <= highest:
            raise ValueError(f"{path}: metadata '{key}' is {excerpt(text)}, outside {INT32_MIN}..{highest}")
        return int(text)
    try:
        return ModelConfig(vocab_size=integer("vocab_size", INT64_MAX), num_labels=integer("num_labels"),
                           embedding_dim=integer("embedding_dim"), hidden=integer("hidden"),
                           seq_len=integer("seq_len"), blend=excerpt(metadata.get("blend", "mean")),
                           pool=excerpt(metadata.get("pool", "feature")))
    except ValueError as e:
        if str(e).startswith(f"{path}: "):
            raise
        raise ValueError(f"{path}: {e}") from None


def _check_dtypes(path, tensors):
    """Every tensor in the file is F32, as the engine reads a checkpoint: an I32 tensor's bits are
    not floats, and converting its values would load a different model."""
    for name, array in tensors.items():
        if array.dtype != np.float32:
            raise ValueError(f"{path}: tensor '{excerpt(name)}' is {dtype_name(array)}, expected F32")


def check_tensors(config, tensors, where="checkpoint"):
    """Every parameter present with its shape, finite float32; nothing else. Returns float32 copies
    in the engine's order."""
    shapes = parameter_shapes(config)
    missing = [name for name in shapes if name not in tensors]
    unknown = [name for name in tensors if name not in shapes]
    if missing or unknown:
        raise ValueError(f"{where}: missing tensors {missing}, unknown tensors {unknown}")
    checked = {}
    for name, shape in shapes.items():
        array = np.asarray(tensors[name])
        if tuple(array.shape) != shape:
            raise ValueError(f"{where}: tensor '{name}' has shape {list(array.shape)}, the model needs {list(shape)}")
        array = np.ascontiguousarray(array, dtype=np.float32)
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise ValueError(f"{where}: tensor '{name}' element {bad[0]} is {array.flat[bad[0]]}")
        checked[name] = array
    return checked


def load_checkpoint(path):
    """An engine checkpoint -> (ModelConfig, dict name -> float32 array in the engine's order)."""
    tensors, metadata = read_safetensors(path)
    if metadata.get("format") != "enhanced-checkpoint":
        raise ValueError(f"{path}: not an engine checkpoint (metadata 'format' is {excerpt(repr(metadata.get('format')))}; "
                         "a plain state_dict file is read by the engine's --init-from with --blend/--pool)")
    config = _config_from_metadata(path, metadata)
    _check_dtypes(path, tensors)
    return config, check_tensors(config, tensors, where=str(path))


LABEL_NAMES_KEY = "label_names"
MAX_LABEL_NAME_BYTES = 1024


def check_label_names(names, num_labels, where="label_names"):
    """The names as the engine takes them (src/io/label_names.cpp): a list of `num_labels` strings,
    in label order, none empty, none repeated, no control characters, at most 1024 bytes of UTF-8
    each. Returns them as a list; ValueError naming `where` and the item otherwise."""
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise ValueError(f"{where}: must be a list of names, got {type(names).__name__}")
    names, seen = list(names), set()
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ValueError(f"{where}: item {i} is not a string ({type(name).__name__})")
        if not name:
            raise ValueError(f"{where}: item {i}: an empty name (every label needs one)")
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(f"{where}: item {i}: not UTF-8 (a lone surrogate)") from None
        if size > MAX_LABEL_NAME_BYTES:
            raise ValueError(f"{where}: item {i}: a name longer than {MAX_LABEL_NAME_BYTES} bytes")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            raise ValueError(f"{where}: item {i}: a control character")
        if name in seen:
            raise ValueError(f"{where}: item {i}: '{excerpt(name)}' is a duplicate (each label needs its own name)")
        seen.add(name)
    if len(names) != num_labels:
        raise ValueError(f"{where}: {len(names)} label names, but the model has {num_labels} labels")
    return names


def label_names_json(names):
    """The metadata's text of the names, as the engine writes it (nlohmann::json's dump)."""
    return json.dumps(list(names), ensure_ascii=False, separators=(",", ":"))


def _label_names_from_metadata(path, metadata, num_labels):
    if LABEL_NAMES_KEY not in metadata:
        return None
    where = f"{path}: metadata '{LABEL_NAMES_KEY}'"
    try:
        names = json.loads(metadata[LABEL_NAMES_KEY])
    except ValueError:
        raise ValueError(f"{where} is not a JSON array of names") from None
    if not isinstance(names, list):
        raise ValueError(f"{where} is not a JSON array of names")
    return check_label_names(names, num_labels, where)


def load_label_names(path):
    """The labels' names of an engine checkpoint (a list of str, label i's name at index i), or
    None when it has none (trained without `--label-names`). Checked as the engine checks them."""
    _, metadata = read_safetensors(path)
    if metadata.get("format") != "enhanced-checkpoint":
        return None
    return _label_names_from_metadata(path, metadata, _config_from_metadata(path, metadata).num_labels)


def read_config_and_label_names(path):
    """(ModelConfig, label names or None) of an engine checkpoint, from its header alone (the
    tensors are not read: load_checkpoint checks them)."""
    metadata = read_metadata(path)
    if metadata.get("format") != "enhanced-checkpoint":
        raise ValueError(f"{path}: not an engine checkpoint")
    config = _config_from_metadata(path, metadata)
    return config, _label_names_from_metadata(path, metadata, config.num_labels)


def save_checkpoint(path, config, tensors, label_names=None):
    """Writes an engine checkpoint (what `enhanced-train --init-from`, `enhanced-eval` and
    `enhanced-predict` read), atomically; with `label_names` (one a label), the names too, which
    enhanced-eval and enhanced-predict then show."""
    metadata = config.metadata()
    if label_names is not None:
        metadata[LABEL_NAMES_KEY] = label_names_json(check_label_names(label_names, config.num_labels, str(path)))
    write_safetensors(path, check_tensors(config, tensors, where=str(path)), metadata)
