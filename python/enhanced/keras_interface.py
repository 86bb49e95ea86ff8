"""The part of Keras' model interface that Keras' own callbacks use, for enhanced.Model: weights as
a list of arrays (get_weights, set_weights), the optimizer's learning rate, save, save_weights and
load_weights in Keras' file formats, and fit's Keras keywords (validation_split; initial_epoch and
sample_weight are refused by name). During fit they read and write the engine's live parameters
through the run's TrainingAccess (include/enhanced/training_observer.h), between two steps.

The weights' layout: the checkpoint's tensors (docs/model.md) in the engine's order
(enhanced.checkpoint.parameter_shapes: embedding.weight, lstm.weight_ih_l0, ..., dense.bias), as
float32 arrays, so set_weights(get_weights()) is exact. Nothing here imports TensorFlow unless a
.keras or .weights.h5 file is read or written."""
import os
import threading

import numpy as np

from . import ebin
from .checkpoint import load_checkpoint, parameter_shapes, save_checkpoint
from .safetensors import excerpt
from .stream import labels_for

# Keras' callbacks that need what the engine does not have, and what to use instead.
_REFUSED_CALLBACKS = {
    "TensorBoard": "Keras' TensorBoard reads the model's train_function, layers and TensorFlow summaries; "
                   "use enhanced.callbacks.TensorBoard, which writes Keras' layout",
    "SwapEMAWeights": "the engine's optimizer keeps no moving average of the weights (Keras' use_ema)",
}


# What makes an object a callback: any of Keras' hooks.
_HOOKS = ("on_train_begin", "on_epoch_begin", "on_epoch_end", "on_train_batch_begin", "on_train_batch_end",
          "on_train_end", "on_test_begin", "on_test_batch_begin", "on_test_batch_end", "on_test_end", "set_model",
          "set_params")


def check_callbacks(callbacks):
    """The callbacks as a list; a Keras callback the engine cannot serve, or an object that is no
    callback (none of Keras' hooks), is a ValueError naming it."""
    if callbacks is not None and not isinstance(callbacks, (list, tuple)):
        raise ValueError(f"callbacks must be a list of callbacks, got {type(callbacks).__name__}")
    callbacks = list(callbacks or [])
    for index, callback in enumerate(callbacks):
        name = type(callback).__name__
        if not any(hasattr(callback, hook) for hook in _HOOKS):
            raise ValueError(f"callbacks: item {index} ({name}) is not a callback: it has none of Keras' hooks "
                             f"({', '.join(_HOOKS[:3])}, ...)")
        if type(callback).__module__.startswith("keras") and name in _REFUSED_CALLBACKS:
            raise ValueError(f"callbacks: keras.callbacks.{name} does not work with enhanced.Model.fit: "
                             f"{_REFUSED_CALLBACKS[name]}")
    return callbacks


def check_keras_keywords(initial_epoch, sample_weight):
    """fit's Keras keywords the engine has no meaning for: refused by name, before any work."""
    if initial_epoch not in (None, 0):
        raise ValueError(f"initial_epoch={initial_epoch!r}: enhanced.Model.fit counts a run's epochs from 0; to "
                         "continue a run, fit(x, y, out=run, resume=True)")
    if sample_weight is not None:
        raise ValueError("sample_weight: enhanced.Model.fit weighs samples by their label only: give class_weight")


def file_path(value, name):
    """A file's path as a str: a str or os.PathLike; bytes (a path's raw bytes, or an image of
    the file) or anything else is a ValueError naming `name`."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"{name}: a path given as bytes ({excerpt(repr(bytes(value)))}); give it as a str "
                         "or os.PathLike (os.fsdecode(path))")
    if not isinstance(value, (str, os.PathLike)) or not isinstance(os.fspath(value), str):
        raise ValueError(f"{name}: expected a file's path (a str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


def _csr_rows(csr, start, stop):
    """Samples [start, stop) of an ebin._Csr."""
    T = csr.seq_len
    lo, hi = start * T, stop * T
    fields = []
    for lengths, ids in zip(csr.lengths, csr.ids):
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        fields += [lengths[lo:hi], ids[offsets[lo]:offsets[hi]]]
    return ebin._Csr(T, csr.cur_word[lo:hi], *fields)


def split_validation(x, y, validation_data, validation_split):
    """Keras' validation_split: the last fraction of x and y (taken before any shuffling) becomes
    the validation set, when validation_data is not given (Keras': validation_data wins). Only
    for samples in memory with their labels in y. Returns (x, y, validation_data)."""
    if isinstance(validation_split, bool) or not isinstance(validation_split, (int, float, np.floating)) or \
            not 0 <= validation_split < 1:
        raise ValueError(f"validation_split must be a number in [0, 1), got {validation_split!r}")
    if not validation_split or validation_data is not None:
        return x, y, validation_data
    if isinstance(x, (str, bytes, os.PathLike)) or y is None:
        raise ValueError("validation_split: only for samples in memory with their labels in y (Keras': arrays); "
                         "give validation_data")
    samples = ebin._samples(x)
    count = samples.num_samples
    labels = labels_for(y, count)
    split_at = int(np.floor(count * (1.0 - validation_split)))
    if split_at in (0, count):
        raise ValueError(f"validation_split={validation_split} leaves an empty set of {count} samples "
                         f"(training on {split_at})")
    return (_csr_rows(samples, 0, split_at), labels[:split_at],
            (_csr_rows(samples, split_at, count), labels[split_at:]))


def split_parameters(flat, config):
    """The engine's flat parameters (P,) as the checkpoint's tensors, in parameter_shapes' order."""
    arrays, offset = [], 0
    for shape in parameter_shapes(config).values():
        size = int(np.prod(shape))
        arrays.append(flat[offset:offset + size].reshape(shape).copy())
        offset += size
    return arrays


def _keras_model(config, tensors):
    from .keras import model_from_checkpoint
    return model_from_checkpoint((config, tensors))


def _tensors_of_keras_file(path, config):
    """The engine's tensors of a .keras model or .weights.h5 weights of this model's config."""
    from .keras import EnhancedModel, tensors_from_keras
    if path.endswith(".keras"):
        import keras
        model = keras.models.load_model(path)
    else:
        model = EnhancedModel(config)
        model.load_weights(path)
    return tensors_from_keras(model, config)[1]


class _Optimizer:
    """model.optimizer as Keras' callbacks use it: learning_rate (the next step's rate, a float;
    settable when the run's rate is constant, from the next step on) and iterations (steps taken),
    during fit."""
    built = True

    def __init__(self, model):
        self._model = model

    @property
    def learning_rate(self):
        return self._model._live("optimizer.learning_rate").learning_rate()

    @learning_rate.setter
    def learning_rate(self, value):
        access = self._model._live("optimizer.learning_rate")
        try:
            rate = float(np.asarray(value))
        except (TypeError, ValueError):
            raise ValueError(f"optimizer.learning_rate must be a number, got {value!r}") from None
        access.set_learning_rate(rate)

    @property
    def iterations(self):
        return self._model._live("optimizer.iterations").steps()


class KerasInterface:
    """Keras' model interface as Keras' callbacks use it (mixed into enhanced.Model)."""
    built = True  # the model's shape is known at construction
    history = None  # the History of the last fit (Keras' model.history)
    _access = None  # the running fit's TrainingAccess (set by fit's bridge), else None
    _fit_thread = None  # the thread running fit (threading.get_ident()), else None
    _weights_set_in_fit = False

    def _fit_access(self, what):
        """The running fit's TrainingAccess in fit's own thread (its callbacks), else None. From
        another thread while a fit runs, a ValueError: the access is only valid between two steps
        of fit's thread and is freed when the run ends, so another thread's call through it races
        the engine or reaches freed memory. Only fit's thread sets and clears the access, so read
        there it is current."""
        thread = self._fit_thread
        if thread is None:
            return None
        if thread != threading.get_ident():
            raise ValueError(f"{what}: fit is running in another thread; call it from one of fit's callbacks")
        return self._access

    def _live(self, what):
        access = self._fit_access(what)
        if access is None:
            raise ValueError(f"{what} is the running fit's: it exists in fit's callbacks only")
        return access

    @property
    def optimizer(self):
        return _Optimizer(self)

    @property
    def params(self):
        """The last fit's parameters as Keras gives them to callbacks (verbose, epochs, steps)."""
        return None if self.history is None else self.history.keras_params

    def get_weights(self):
        """The weights as float32 arrays: the checkpoint's tensors in the engine's order
        (parameter_shapes); during fit, the engine's live ones (from fit's callbacks; from another
        thread, a ValueError)."""
        access = self._fit_access("get_weights")
        if access is not None:
            return split_parameters(access.read_parameters(), self.config)
        tensors = load_checkpoint(self._weights())[1]
        return [np.array(tensors[name], dtype=np.float32) for name in parameter_shapes(self.config)]

    def set_weights(self, weights):
        """Replaces the weights (get_weights' layout); during fit, the engine's from the next step on
        (from fit's callbacks; from another thread, a ValueError). A value that is not finite (NaN,
        inf) is a ValueError naming the array, before anything changes."""
        access = self._fit_access("set_weights")
        shapes = parameter_shapes(self.config)
        weights = list(weights)
        if len(weights) != len(shapes):
            raise ValueError(f"set_weights: expected {len(shapes)} arrays ({', '.join(shapes)}), got {len(weights)}")
        arrays = {}
        for index, ((name, shape), value) in enumerate(zip(shapes.items(), weights)):
            value = np.asarray(value)
            if value.shape != tuple(shape):
                raise ValueError(f"set_weights: {name} has shape {list(value.shape)}, the model's is {list(shape)}")
            arrays[name] = np.ascontiguousarray(value, dtype=np.float32)
            if not np.isfinite(arrays[name]).all():
                bad = int(np.flatnonzero(~np.isfinite(arrays[name]))[0])
                raise ValueError(f"set_weights: array {index} ({name}) holds a value that is not finite "
                                 f"({arrays[name].reshape(-1)[bad]} at flat index {bad}); weights must be finite")
        if access is not None:
            access.write_parameters(np.concatenate([a.reshape(-1) for a in arrays.values()]))
            self._weights_set_in_fit = True
        else:
            self._own_tensors(arrays)

    def _tensors(self):
        return dict(zip(parameter_shapes(self.config), self.get_weights()))

    def save(self, filepath, overwrite=True, **kwargs):
        """`.keras`: the Keras model (enhanced.keras.EnhancedModel) with these weights;
        `.safetensors`: the engine's checkpoint. During fit: the live weights."""
        path = self._target(filepath, overwrite, (".keras", ".safetensors"), "save")
        if path.endswith(".keras"):
            _keras_model(self.config, self._tensors()).save(path)
        else:
            save_checkpoint(path, self.config, self._tensors(), self.label_names)

    def save_weights(self, filepath, overwrite=True, **kwargs):
        """`.weights.h5`: the Keras model's weights; `.safetensors`: the engine's checkpoint."""
        path = self._target(filepath, overwrite, (".weights.h5", ".safetensors"), "save_weights")
        if path.endswith(".weights.h5"):
            _keras_model(self.config, self._tensors()).save_weights(path)
        else:
            save_checkpoint(path, self.config, self._tensors(), self.label_names)

    def load_weights(self, filepath, **kwargs):
        """Weights from a `.safetensors` checkpoint, a `.weights.h5` or a `.keras` file of this
        model's shape (Keras' LSTM bias is the engine's two summed: bias_ih 0, bias_hh the sum)."""
        path = file_path(filepath, "load_weights: filepath")
        if path.endswith(".safetensors"):
            config, tensors = load_checkpoint(path)
            if config != self.config:
                raise ValueError(f"load_weights: {path} holds the model {config}, this one is {self.config}")
        elif path.endswith((".weights.h5", ".keras")):
            tensors = _tensors_of_keras_file(path, self.config)
        else:
            raise ValueError(f"load_weights: {path}: expected a .safetensors, .weights.h5 or .keras file")
        self.set_weights([tensors[name] for name in parameter_shapes(self.config)])

    @staticmethod
    def _target(filepath, overwrite, endings, method):
        """The path save or save_weights writes, checked: a str ending with one of `endings`, in
        a folder that exists (Keras' save makes none either)."""
        path = file_path(filepath, f"{method}: filepath")
        if not path.endswith(endings):
            raise ValueError(f"{method}: {path}: the name must end with {' or '.join(endings)}")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ValueError(f"{method}: {path}: the folder {folder} does not exist (or is no folder)")
        if not overwrite and os.path.exists(path):
            raise ValueError(f"{method}: {path} exists (overwrite=False)")
        return path
