"""ONNX export of the whole inference model (docs/model.md), the ragged blend included, from an
engine checkpoint, built with onnx.helper; and a TensorFlow SavedModel through the Keras model.

The ONNX model's inputs are the batch in CSR form (what enhanced.keras.ragged_to_csr gives):
  identifier_ids      int64 (nnz,)    every identifier id, sample by sample, position by position
  identifier_lengths  int64 (B, T)    how many of them each position has (0 or more)
  cur_word            int64 (B, T)    the current word of each position
and its output `logits` float32 (B, L); B and nnz are dynamic, T is the model's. An ONNX graph
input has one element type, so `ids="int32"` makes the model whose three inputs are int32 (each
Cast to int64 first: the same graph after it, the same logits).
The graph: Gather of the identifier rows, their segment sum by ScatterND(reduction="add") (each id's
position from a CumSum of marks that ScatterElements puts at the positions' starts), the blend,
the ONNX LSTM (direction="bidirectional"; gates reordered from i, f, g, o to ONNX's i, o, f, c),
ReduceMax over features (or time), Gemm.
"""
import os
import shutil
import sys
import tempfile

import numpy as np

from .checkpoint import ModelConfig, check_tensors, load_checkpoint
from .safetensors import umask_mode, write_atomically

OPSET = 17  # ScatterND/ScatterElements reduction="add" need 16; ReduceMax keeps its axes attribute below 18
INPUT_NAMES = ("identifier_ids", "identifier_lengths", "cur_word")
_ONNX_GATES = (0, 3, 1, 2)  # ONNX's i, o, f, c blocks taken from the engine's i, f, g, o


ID_DTYPES = ("int64", "int32")


def _checkpoint(model_or_checkpoint):
    """(config, checked tensors) of a checkpoint (a path, or (config, tensors)) or a model: an
    enhanced.keras.EnhancedModel, or an object with `.config` (ModelConfig) and `.state_dict()`
    (the checkpoint's names -> arrays or tensors), as enhanced.torch.EnhancedModule has."""
    source = model_or_checkpoint
    if isinstance(source, tuple):
        config, tensors = source
    elif isinstance(source, (str, os.PathLike)):
        config, tensors = load_checkpoint(source)
    elif "enhanced.keras" in sys.modules and isinstance(source, sys.modules["enhanced.keras"].EnhancedModel):
        config, tensors = sys.modules["enhanced.keras"].tensors_from_keras(source)
    elif isinstance(getattr(source, "config", None), ModelConfig) and callable(getattr(source, "state_dict", None)):
        config = source.config
        tensors = {name: _array(value) for name, value in source.state_dict().items()}
    else:
        raise ValueError(f"expected an engine checkpoint (a path, or (config, tensors)), an enhanced.keras.EnhancedModel "
                         f"or a model with .config and .state_dict() (enhanced.torch.EnhancedModule), "
                         f"got {type(source).__name__}")
    return config, check_tensors(config, tensors, where=str(source) if isinstance(source, (str, os.PathLike)) else "model")


def _array(value):
    """A state_dict value as a NumPy array (a torch tensor is detached and copied to the host)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _lstm_initializers(tensors, H):
    """ONNX LSTM W (2, 4H, D), R (2, 4H, H), B (2, 8H) in gate order i, o, f, c."""
    def reorder(matrix):
        return np.concatenate([matrix[g * H:(g + 1) * H] for g in _ONNX_GATES], axis=0)
    suffixes = ("", "_reverse")
    W = np.stack([reorder(tensors[f"lstm.weight_ih_l0{s}"]) for s in suffixes])
    R = np.stack([reorder(tensors[f"lstm.weight_hh_l0{s}"]) for s in suffixes])
    B = np.stack([np.concatenate([reorder(tensors[f"lstm.bias_ih_l0{s}"]), reorder(tensors[f"lstm.bias_hh_l0{s}"])])
                  for s in suffixes])
    return W, R, B


def _blend_nodes(config, constants):
    """Nodes from the inputs to x (B, T, D), the blend of docs/model.md; adds their constants."""
    from onnx import TensorProto, helper

    D, T = config.embedding_dim, config.seq_len
    constants.update({"minus_one": np.array([-1], np.int64), "one": np.array([1], np.int64),
                      "zero": np.array([0], np.int64), "dim": np.array([D], np.int64),
                      "x_shape": np.array([-1, T, D], np.int64), "half": np.array(0.5, np.float32),
                      "one_f": np.array(1.0, np.float32), "zero_f": np.array(0.0, np.float32)})
    n = helper.make_node
    nodes = [
        n("Reshape", ["identifier_lengths", "minus_one"], ["counts"]),  # (P,)
        n("Reshape", ["cur_word", "minus_one"], ["cur"]),  # (P,)
        # Each identifier id's position: a 1 at every position's start, summed up, minus 1.
        n("CumSum", ["counts", "zero"], ["starts"], exclusive=1),  # (P,)
        n("Shape", ["identifier_ids"], ["nnz"]),  # (1,)
        n("Add", ["nnz", "one"], ["nnz_plus_one"]),
        n("ConstantOfShape", ["nnz_plus_one"], ["no_marks"], value=helper.make_tensor("", TensorProto.INT64, [1], [0])),
        n("Shape", ["counts"], ["positions"]),
        n("ConstantOfShape", ["positions"], ["ones"], value=helper.make_tensor("", TensorProto.INT64, [1], [1])),
        n("ScatterElements", ["no_marks", "starts", "ones"], ["marks_and_end"], axis=0, reduction="add"),
        n("Slice", ["marks_and_end", "zero", "nnz"], ["marks"]),  # (nnz,)
        n("CumSum", ["marks", "zero"], ["segment_plus_one"]),
        n("Sub", ["segment_plus_one", "one"], ["segment"]),
        n("Unsqueeze", ["segment", "one"], ["segment_index"]),  # (nnz, 1)
        # The identifier rows summed per position.
        n("Gather", ["E", "identifier_ids"], ["identifier_rows"]),  # (nnz, D)
        n("Concat", ["positions", "dim"], ["sums_shape"], axis=0),
        n("ConstantOfShape", ["sums_shape"], ["no_sums"], value=helper.make_tensor("", TensorProto.FLOAT, [1], [0.0])),
        n("ScatterND", ["no_sums", "segment_index", "identifier_rows"], ["sums"], reduction="add"),  # (P, D)
        n("Cast", ["counts"], ["counts_f_flat"], to=TensorProto.FLOAT),
        n("Unsqueeze", ["counts_f_flat", "one"], ["counts_f"]),  # (P, 1)
        n("Max", ["counts_f", "one_f"], ["divisor"]),
    ]
    if config.blend == "mean":
        nodes += [n("Div", ["half", "divisor"], ["scale"]), n("Mul", ["sums", "scale"], ["identifier_half"])]
    else:  # one mean over all n * D numbers (tf.reduce_mean without an axis)
        constants["dim_f"] = np.array(float(D), np.float32)
        nodes += [n("ReduceSum", ["sums", "one"], ["total"], keepdims=1), n("Mul", ["half", "total"], ["half_total"]),
                  n("Mul", ["divisor", "dim_f"], ["numbers"]), n("Div", ["half_total", "numbers"], ["identifier_half"])]
    return nodes + [
        n("Gather", ["E", "cur"], ["current"]),  # (P, D)
        n("Mul", ["current", "half"], ["current_half"]),
        n("Add", ["identifier_half", "current_half"], ["blended"]),
        n("Greater", ["counts_f", "zero_f"], ["has_identifier"]),
        n("Where", ["has_identifier", "blended", "current"], ["x_flat"]),  # (P, D)
        n("Reshape", ["x_flat", "x_shape"], ["x"]),  # (B, T, D)
    ]


def _lstm_nodes(config, tensors, constants):
    """Nodes from x (B, T, D) to pooled (B, T) or (B, 2H): the BiLSTM and the max-pool."""
    from onnx import helper

    H = config.hidden
    constants["W"], constants["R"], constants["B"] = _lstm_initializers(tensors, H)
    constants["y_shape"] = np.array([-1, config.seq_len, 2 * H], np.int64)
    pool_axis = 2 if config.pool == "feature" else 1
    n = helper.make_node
    return [
        n("Transpose", ["x"], ["x_time_major"], perm=[1, 0, 2]),  # (T, B, D)
        n("LSTM", ["x_time_major", "W", "R", "B"], ["y_directions"], hidden_size=H, direction="bidirectional"),
        n("Transpose", ["y_directions"], ["y_batch_major"], perm=[2, 0, 1, 3]),  # (T, 2, B, H) -> (B, T, 2, H)
        n("Reshape", ["y_batch_major", "y_shape"], ["y"]),  # (B, T, 2H)
        n("ReduceMax", ["y"], ["pooled"], axes=[pool_axis], keepdims=0),  # (B, T) or (B, 2H)
    ]


def _head_nodes(tensors, constants):
    """The dense layer: pooled -> logits (B, L)."""
    from onnx import helper

    constants["dense_weight"], constants["dense_bias"] = tensors["dense.weight"], tensors["dense.bias"]
    return [helper.make_node("Gemm", ["pooled", "dense_weight", "dense_bias"], ["logits"], transB=1)]


def _int32_inputs(nodes):
    """The graph on int32 inputs: each input Cast to int64 first, the nodes reading the casts."""
    from onnx import TensorProto, helper

    wide = {name: f"{name}_int64" for name in INPUT_NAMES}
    for node in nodes:
        node.input[:] = [wide.get(name, name) for name in node.input]
    casts = [helper.make_node("Cast", [name], [wide[name]], to=TensorProto.INT64) for name in INPUT_NAMES]
    return casts + nodes


def onnx_model(model_or_checkpoint, ids="int64"):
    """The inference model of an engine checkpoint or model (what export_onnx takes) as an
    onnx.ModelProto whose inputs are `ids` ("int64" or "int32")."""
    from onnx import TensorProto, helper, numpy_helper

    if ids not in ID_DTYPES:
        raise ValueError(f"ids must be one of {ID_DTYPES}, got {ids!r}")
    config, tensors = _checkpoint(model_or_checkpoint)
    T, L = config.seq_len, config.num_labels
    constants = {"E": tensors["embedding.weight"]}  # each part adds the constants it uses
    nodes = _blend_nodes(config, constants) + _lstm_nodes(config, tensors, constants) + _head_nodes(tensors, constants)
    id_type = TensorProto.INT64
    if ids == "int32":
        nodes, id_type = _int32_inputs(nodes), TensorProto.INT32
    inputs = [helper.make_tensor_value_info("identifier_ids", id_type, ["nnz"]),
              helper.make_tensor_value_info("identifier_lengths", id_type, ["batch", T]),
              helper.make_tensor_value_info("cur_word", id_type, ["batch", T])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", L])]
    initializers = [numpy_helper.from_array(np.ascontiguousarray(value), name) for name, value in constants.items()]
    graph = helper.make_graph(nodes, "enhanced", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="enhanced")
    for key, value in {**config.metadata(), "ids": ids}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    return model


def export_onnx(model_or_checkpoint, path, ids="int64"):
    """Writes the ONNX inference model to `path` (atomically), checked by onnx.checker, from an
    engine checkpoint (a path, or (config, tensors)) or a model (an enhanced.keras.EnhancedModel, an
    enhanced.torch.EnhancedModule), as export_saved_model takes it. Run it with ONNX Runtime on the
    CSR arrays of the module docstring, int64 or, with ids="int32", int32."""
    import onnx

    model = onnx_model(model_or_checkpoint, ids)
    onnx.checker.check_model(model, full_check=True)
    write_atomically(path, [model.SerializeToString()])
    return path


def export_saved_model(model_or_checkpoint, directory):
    """A TensorFlow SavedModel of the Keras model (an EnhancedModel, or a checkpoint or model that
    export_onnx takes, which makes one) in `directory` (must not exist or be empty; written beside
    it and renamed).
    Signature `serving_default`: the CSR arrays above (int64) -> {"logits": (B, L)}. Function
    `ragged(x)`: the (B, T, 3, None) RaggedTensor (int32 or int64 ids) -> logits."""
    import tensorflow as tf

    from .keras import EnhancedModel, model_from_checkpoint, ragged_to_csr

    model = model_or_checkpoint
    if not isinstance(model, EnhancedModel):
        model = model_from_checkpoint(_checkpoint(model_or_checkpoint))
    T = model.config.seq_len
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise ValueError(f"{directory}: exists and is not an empty directory")

    module = tf.Module()
    module.weights = list(model.weights)  # the variables alone: saving the Keras model object would retrace it

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, "identifier_ids"),
                                  tf.TensorSpec([None, T], tf.int64, "identifier_lengths"),
                                  tf.TensorSpec([None, T], tf.int64, "cur_word")])
    def serve(identifier_ids, identifier_lengths, cur_word):
        return {"logits": model.logits_from_csr(identifier_ids, identifier_lengths, cur_word)}

    @tf.function
    def ragged(x):
        return model.logits_from_csr(*ragged_to_csr(x, T))

    module.serve = serve
    module.ragged = ragged
    for dtype in (tf.int32, tf.int64):
        ragged.get_concrete_function(tf.RaggedTensorSpec([None, T, 3, None], dtype, ragged_rank=3))
    parent = os.path.dirname(os.path.abspath(directory))
    temporary = tempfile.mkdtemp(prefix=os.path.basename(os.path.abspath(directory)) + ".tmp.", dir=parent)
    try:
        os.chmod(temporary, umask_mode(0o777))  # mkdtemp's 0700 would leave the SavedModel private
        tf.saved_model.save(module, temporary, signatures={"serving_default": serve.get_concrete_function()})
        if os.path.isdir(directory):
            os.rmdir(directory)  # empty, checked above
        os.replace(temporary, directory)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return directory
