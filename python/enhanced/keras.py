"""The engine's model (docs/model.md) in Keras 3, on the user's (B, T, 3, None) tf.RaggedTensor, and
the weight mapping between it and the engine's checkpoints.

The ragged embedding is vectorised: one gather of every identifier row and a segment sum over
the ragged values (no tf.map_fn), then the blend. Keras' LSTM orders its gates i, f, c, o like
the engine's i, f, g, o, so the kernels are the engine's matrices transposed and Keras' single
bias is the engine's two summed; from Keras the bias becomes `bias_hh` and `bias_ih` is zero
(docs/model.md, Initialisation).

Input checks raise ValueError naming the sample and the position when the model runs eagerly
(`model(x)`); inside a tf.function (`fit`, `predict`, a SavedModel) the same checks are graph
assertions (tf.errors.InvalidArgumentError) with the same words, without the position: every
tensor read after a check passes through an identity under the check's control dependency, so no
gather runs on an unchecked id (a GPU gather would return zeros for it, a CPU one another error).

The model and the layer are registered Keras serializables (package "enhanced"): after
`import enhanced.keras`, `keras.models.load_model("m.keras")` needs no custom_objects.
"""
import dataclasses

import numpy as np
import tensorflow as tf
import keras

from .checkpoint import ModelConfig, check_tensors, load_checkpoint, save_checkpoint

_DIRECTIONS = (("", "forward"), ("_reverse", "backward"))


def _require(condition, message, where=None):
    """Eagerly: ValueError(message + where()) when `condition` (a bool tensor) is false. In a graph:
    an assertion op with `message` (the caller adds it as a control dependency)."""
    if tf.executing_eagerly():
        if not bool(condition):
            raise ValueError(message + (where() if where else ""))
        return None
    return tf.debugging.Assert(condition, [message])


def _checked(checks, *tensors):
    """`tensors`, each read only after every check in `checks` (None entries: eager, already done)."""
    checks = [c for c in checks if c is not None]
    if not checks:
        return tensors
    with tf.control_dependencies(checks):
        return tuple(tf.identity(t) for t in tensors)


def _first(bad):
    return int(np.flatnonzero(np.asarray(bad))[0])


def _sample_position(index, seq_len):
    return f": sample {index // seq_len}, position {index % seq_len}"


def ragged_to_csr(inputs, seq_len):
    """(B, T, 3, None) RaggedTensor -> identifier ids (nnz,) int64, identifier lengths (B, T) int64,
    cur_word (B, T) int64: the CSR components that the ONNX model and the SavedModel's signature
    take. Field 1 is ignored; field 2 must hold exactly one id."""
    if not isinstance(inputs, tf.RaggedTensor) or inputs.shape.rank != 4 or inputs.ragged_rank != 3:
        shape = getattr(inputs, "shape", None)
        raise ValueError(f"the input must be a tf.RaggedTensor (B, T, 3, None) with ragged_rank 3 "
                         f"(build T with tf.RaggedTensor.from_uniform_row_length), got {type(inputs).__name__} {shape}")
    if not inputs.dtype.is_integer:
        raise ValueError(f"the input's token ids must be integers, got {inputs.dtype.name}")
    static_t, static_fields = inputs.shape[1], inputs.shape[2]
    if static_t is not None and static_t != seq_len:
        raise ValueError(f"the input has T = {static_t} positions per sample, the model's T is {seq_len}")
    if static_fields is not None and static_fields != 3:
        raise ValueError(f"the input has {static_fields} fields per position, the model needs 3")
    positions, fields, _ = inputs.nested_row_lengths()  # (B,), (P,), (3P,)
    checks = [_require(tf.reduce_all(positions == seq_len), f"every sample must have T = {seq_len} positions",
                       lambda: f": sample {_first(positions != seq_len)} has {int(positions[_first(positions != seq_len)])}"),
              _require(tf.reduce_all(fields == 3), "every position must have 3 fields",
                       lambda: _sample_position(_first(fields != 3), seq_len)
                       + f" has {int(fields[_first(fields != 3)])}")]
    field_rows = inputs.values.values  # (3P, None): row 3p + f is field f of position p
    row_lengths, = _checked(checks, field_rows.row_lengths())
    field_lengths = tf.reshape(row_lengths, (-1, 3))  # (P, 3)
    cur_lengths = field_lengths[:, 2]
    check = _require(tf.reduce_all(cur_lengths == 1), "field 2 (cur_word) must hold exactly one id",
                     lambda: _sample_position(_first(cur_lengths != 1), seq_len)
                     + f" holds {int(cur_lengths[_first(cur_lengths != 1)])}")
    values, row_ids, row_starts = _checked([check], tf.cast(field_rows.values, tf.int64),  # (all ids,)
                                           field_rows.value_rowids(), field_rows.row_splits[:-1])
    identifier_ids = tf.boolean_mask(values, row_ids % 3 == 0)  # (nnz,)
    cur_word = tf.gather(values, tf.reshape(row_starts, (-1, 3))[:, 2])  # (P,)
    return (identifier_ids, tf.reshape(field_lengths[:, 0], (-1, seq_len)),
            tf.reshape(cur_word, (-1, seq_len)))


@keras.saving.register_keras_serializable(package="enhanced")
class RaggedBlendEmbedding(keras.layers.Layer):
    """Step 1 of docs/model.md: the embedding blend of the identifier ids and the current word."""

    def __init__(self, vocab_size, embedding_dim, seq_len, blend="mean", **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.embedding_dim, self.seq_len, self.blend = vocab_size, embedding_dim, seq_len, blend
        self.embeddings = self.add_weight(name="embeddings", shape=(vocab_size, embedding_dim),
                                          initializer=keras.initializers.RandomUniform(-0.05, 0.05))
        self.built = True  # the one weight exists: loading weights needs no call first

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "embedding_dim": self.embedding_dim,
                "seq_len": self.seq_len, "blend": self.blend}

    def call(self, inputs):  # (B, T, 3, None) ragged -> (B, T, D)
        return self.blend_csr(*ragged_to_csr(inputs, self.seq_len))

    def compute_output_shape(self, input_shape):  # a functional model's symbolic input is not ragged
        return (input_shape[0], self.seq_len, self.embedding_dim)

    def blend_csr(self, identifier_ids, identifier_lengths, cur_word):
        """identifier ids (nnz,), lengths (B, T), cur_word (B, T) -> x (B, T, D)."""
        V, D = self.vocab_size, self.embedding_dim
        ids = tf.cast(identifier_ids, tf.int64)
        counts = tf.reshape(tf.cast(identifier_lengths, tf.int64), (-1,))  # (P,)
        cur = tf.reshape(tf.cast(cur_word, tf.int64), (-1,))  # (P,)
        checks = [_require(tf.reduce_all((ids >= 0) & (ids < V)), f"identifier ids must be in [0, {V})",
                           lambda: f": identifier id number {_first((ids < 0) | (ids >= V))} is "
                                   f"{int(ids[_first((ids < 0) | (ids >= V))])}"),
                  _require(tf.reduce_all((cur >= 0) & (cur < V)), f"cur_word ids must be in [0, {V})",
                           lambda: _sample_position(_first((cur < 0) | (cur >= V)), self.seq_len)
                           + f" holds {int(cur[_first((cur < 0) | (cur >= V))])}"),
                  _require(tf.reduce_all(counts >= 0) & (tf.reduce_sum(counts) == tf.size(ids, tf.int64)),
                           "identifier lengths must be >= 0 and sum to the number of identifier ids")]
        ids, counts, cur = _checked(checks, ids, counts, cur)  # in a graph: no gather before the checks
        segments = tf.repeat(tf.range(tf.size(counts, tf.int64)), counts)  # (nnz,) position of each id
        sums = tf.math.unsorted_segment_sum(tf.gather(self.embeddings, ids), segments, tf.size(counts))  # (P, D)
        n = tf.cast(counts, self.embeddings.dtype)[:, None]  # (P, 1)
        current = tf.gather(self.embeddings, cur)  # (P, D)
        if self.blend == "mean":
            identifier = sums * (0.5 / tf.maximum(n, 1.0))
        else:  # tf.reduce_mean without an axis: one number over all n * D values
            identifier = 0.5 * tf.reduce_sum(sums, axis=1, keepdims=True) / (tf.maximum(n, 1.0) * D)
        x = tf.where(n > 0, identifier + 0.5 * current, current)  # (P, D)
        return tf.reshape(x, (-1, self.seq_len, D))


@keras.saving.register_keras_serializable(package="enhanced")
class EnhancedModel(keras.Model):
    """docs/model.md's model: ragged blend -> Bidirectional(LSTM(H)) -> max-pool -> Dense(L)
    logits. Call it on the (B, T, 3, None) RaggedTensor, or `logits_from_csr` on its components.
    Built at construction (every weight exists), so `load_weights`, `keras.callbacks.BackupAndRestore`
    and `.keras` files need no call first."""

    def __init__(self, config, **kwargs):
        if not isinstance(config, ModelConfig):
            raise ValueError(f"EnhancedModel takes an enhanced.ModelConfig, got {type(config).__name__}")
        super().__init__(**kwargs)
        self.config = config
        V, D, H, T, L = config.vocab_size, config.embedding_dim, config.hidden, config.seq_len, config.num_labels
        self.embedding = RaggedBlendEmbedding(V, D, T, config.blend, name="embedding")
        self.bilstm = keras.layers.Bidirectional(keras.layers.LSTM(H, return_sequences=True), name="bilstm")
        self.dense = keras.layers.Dense(L, name="dense")
        self.bilstm.build((None, T, D))
        self.dense.build((None, config.pooled_features))
        self.built = True

    def get_config(self):
        """The ModelConfig's fields under "config" (what a .keras file stores), beside Keras' own."""
        return {"name": self.name, "trainable": self.trainable, "config": dataclasses.asdict(self.config)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        fields = {key: tuple(value) if isinstance(value, list) else value  # JSON made a tuple field a list
                  for key, value in config.pop("config").items()}
        return cls(ModelConfig(**fields), **config)

    def call(self, inputs):  # (B, T, 3, None) ragged -> logits (B, L)
        return self._head(self.embedding(inputs))

    def logits_from_csr(self, identifier_ids, identifier_lengths, cur_word):
        """identifier ids (nnz,), identifier lengths (B, T), cur_word (B, T) -> logits (B, L)."""
        return self._head(self.embedding.blend_csr(identifier_ids, identifier_lengths, cur_word))

    def _head(self, x):  # (B, T, D) -> (B, L)
        y = self.bilstm(x)  # (B, T, 2H)
        pooled = tf.reduce_max(y, axis=2 if self.config.pool == "feature" else 1)  # (B, T) or (B, 2H)
        return self.dense(pooled)


def _keras_variables(model, config):
    """The model's 9 variables in the engine's order: embedding, forward kernel, recurrent kernel,
    bias, the same backward, dense kernel, dense bias, each checked against `config`'s shapes."""
    if isinstance(model, EnhancedModel):
        variables = [model.embedding.embeddings, *model.bilstm.weights, *model.dense.weights]
    elif isinstance(model, keras.Model):
        variables = list(model.weights)  # a user's own model: the same weights in the same order
    else:
        raise ValueError(f"expected a Keras model, got {type(model).__name__}")
    V, D, H, T, L = config.vocab_size, config.embedding_dim, config.hidden, config.seq_len, config.num_labels
    lstm = [(D, 4 * H), (H, 4 * H), (4 * H,)]
    expected = [(V, D), *lstm, *lstm, (config.pooled_features, L), (L,)]
    names = ["embedding", *(f"{d} {w}" for _, d in _DIRECTIONS for w in ("kernel", "recurrent_kernel", "bias")),
             "dense kernel", "dense bias"]
    if len(variables) != len(expected):
        raise ValueError(f"the Keras model has {len(variables)} weights, the engine's model has {len(expected)} "
                         f"({', '.join(names)})")
    for variable, shape, name in zip(variables, expected, names):
        if tuple(variable.shape) != shape:
            raise ValueError(f"the Keras model's {name} has shape {list(variable.shape)}, the checkpoint's model "
                             f"(V={V} D={D} H={H} T={T} L={L} pool={config.pool}) needs {list(shape)}")
    return variables


def _model_config(model, config):
    if config is None:
        config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise ValueError("a Keras model that is not an EnhancedModel needs config=enhanced.ModelConfig(...)")
    if isinstance(model, EnhancedModel) and model.config != config:
        raise ValueError(f"the checkpoint's model {config} is not the Keras model's {model.config}")
    return config


def load_into_keras(model, checkpoint, config=None):
    """Sets the Keras model's weights from an engine checkpoint (a path, or (config, tensors)).
    kernel = weight_ih.T, recurrent_kernel = weight_hh.T, bias = bias_ih + bias_hh, dense kernel =
    dense.weight.T. Returns the checkpoint's ModelConfig."""
    ckpt_config, tensors = load_checkpoint(checkpoint) if not isinstance(checkpoint, tuple) else checkpoint
    tensors = check_tensors(ckpt_config, tensors)
    if isinstance(model, EnhancedModel):
        _model_config(model, ckpt_config)
    elif config is not None and config != ckpt_config:
        raise ValueError(f"the checkpoint's model {ckpt_config} is not the given {config}")
    values = [tensors["embedding.weight"]]
    for suffix, _ in _DIRECTIONS:
        values += [tensors[f"lstm.weight_ih_l0{suffix}"].T, tensors[f"lstm.weight_hh_l0{suffix}"].T,
                   tensors[f"lstm.bias_ih_l0{suffix}"] + tensors[f"lstm.bias_hh_l0{suffix}"]]
    values += [tensors["dense.weight"].T, tensors["dense.bias"]]
    for variable, value in zip(_keras_variables(model, ckpt_config), values):
        variable.assign(np.ascontiguousarray(value))
    return ckpt_config


def tensors_from_keras(model, config=None):
    """The Keras model's weights as the engine's tensors (name -> float32 array): bias_hh = Keras'
    bias, bias_ih = 0 (docs/model.md)."""
    config = _model_config(model, config)
    variables = [np.asarray(v.numpy(), dtype=np.float32) for v in _keras_variables(model, config)]
    tensors = {"embedding.weight": variables[0]}
    for k, (suffix, _) in enumerate(_DIRECTIONS):
        kernel, recurrent, bias = variables[1 + 3 * k: 4 + 3 * k]
        tensors[f"lstm.weight_ih_l0{suffix}"] = kernel.T
        tensors[f"lstm.weight_hh_l0{suffix}"] = recurrent.T
        tensors[f"lstm.bias_ih_l0{suffix}"] = np.zeros_like(bias)
        tensors[f"lstm.bias_hh_l0{suffix}"] = bias
    tensors["dense.weight"], tensors["dense.bias"] = variables[7].T, variables[8]
    return config, check_tensors(config, tensors, where="the Keras model")


def checkpoint_from_keras(model, path, config=None):
    """Writes the Keras model as an engine checkpoint (`enhanced-train --init-from PATH`,
    `enhanced-eval`, `enhanced-predict` read it). config: needed unless `model` is an EnhancedModel."""
    config, tensors = tensors_from_keras(model, config)
    save_checkpoint(path, config, tensors)
    return config


def model_from_checkpoint(checkpoint):
    """A new EnhancedModel with an engine checkpoint's model and weights."""
    config, tensors = load_checkpoint(checkpoint) if not isinstance(checkpoint, tuple) else checkpoint
    model = EnhancedModel(config)
    load_into_keras(model, (config, tensors))
    return model
