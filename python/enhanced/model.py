"""enhanced.Model: the engine inside the user's Python, with Keras' names and conventions and
enhanced-train's defaults and arithmetic. The C++ engine is the compiled extension
enhanced._core (built by `pip install ./python`); `fit` parses the same flags enhanced-train
parses, so given the same data, options and seed it writes the same files, bit for bit.

Data in memory (a tf.RaggedTensor (N, T, 3, None), nested lists, a dict of CSR arrays) becomes an
.ebin image in memory that the engine reads without a file or a copy; a path to an .ebin file is
read as it is; an iterable of (x, y) batches such as a tf.data.Dataset is streamed to fit batch by
batch (stream.py), each batch one step, as Keras reads it."""
import os
import shutil
import tempfile
import threading
import weakref

import numpy as np

from . import ebin
from .checkpoint import (ModelConfig, check_label_names, load_checkpoint, parameter_shapes,
                         read_config_and_label_names, save_checkpoint)
from .fit_hooks import History, Bridge, Progress, TemporaryRun, exiting, first_signal_decides, running_fit
from .keras_interface import (KerasInterface, check_callbacks, check_keras_keywords, file_path,
                              split_parameters, split_validation)
from .run_plan import (DEFAULTS, boolean, check_controls, check_same_labels, check_same_model,
                       class_weight_mean_words, class_weight_values, keyword_errors, memory_set_name, plan,
                       recorded_options, resolve_out, resumed_validation, STREAMED_VALIDATION)
from .stream import Stream, gathered, is_batches, is_dense_array, is_endless, is_one_shot, labels_for


def _core():
    try:
        from . import _core as core
    except ImportError as e:  # a source checkout without `pip install ./python`
        raise ImportError("enhanced.Model needs the compiled engine: pip install ./python "
                          f"(docs/python.md) ({e})") from e
    return core


def _flag(name):
    return "--" + name.replace("_", "-")


def _no_y_beside_batches(y, name):
    if y is not None:
        raise ValueError(f"{name} is an iterable of (x, y) batches: give no y")


def _samples_and_labels(x, y, name, steps=None):
    if isinstance(x, ebin._Csr):  # checked samples already (validation_split's parts)
        return x, None if y is None else np.asarray(y)
    if is_batches(x):
        _no_y_beside_batches(y, name)
        if steps is None and is_endless(x):  # evaluate's and predict's x (fit's are checked by _steps)
            raise ValueError(f"{name}: an endless tf.data.Dataset (cardinality INFINITE, as after repeat()) would "
                             "be read for ever: give a finite one (ds.take(n))")
        return gathered(x, name, steps)
    if is_dense_array(x):
        raise ValueError(f"{name}: a dense {type(x).__name__} of shape {tuple(x.shape)}: each field of a position "
                         "holds a list of ids of its own length; give a tf.RaggedTensor (N, T, 3, None) (for padded "
                         "ids: tf.RaggedTensor.from_tensor(x, padding=...)), nested lists or a dict of CSR arrays")
    try:
        samples = ebin._samples(x)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    return samples, None if y is None else labels_for(y, samples.num_samples, name)


def _header(data):
    """The .ebin header of an image in memory (data_image's) or of a file's path; None where a
    file's cannot be read or is no .ebin's (the engine then says why)."""
    if isinstance(data, str):
        try:
            header = np.fromfile(data, ebin.HEADER_DTYPE, 1)
        except (OSError, ValueError):
            return None
    else:
        header = np.frombuffer(data, ebin.HEADER_DTYPE, 1)
    if not header.size or bytes(header["magic"][0]) != ebin.MAGIC:
        return None
    return header[0]


def _file_seq_len(path):
    """T of an .ebin file's header, or None (_header)."""
    header = _header(path)
    return None if header is None else int(header["seq_len"])


def data_image(x, y=None, name="x", steps=None):
    """(data, name, T) for the engine: an .ebin path as it is, else the .ebin image of x and y as
    bytes (ebin.write_ebin's bytes, without the file); T the samples' positions (None: unknown).
    An iterable of batches is gathered: its first `steps` batches, or one pass."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        file_path(x, name)  # a path's bytes: refused by name
    if isinstance(x, (str, os.PathLike)):
        x = file_path(x, name)
        if y is not None:
            raise ValueError(f"{name} is a file: its labels are in it, give no y")
        return x, x, _file_seq_len(x)
    samples, labels = _samples_and_labels(x, y, name, steps)
    image = ebin.image_bytes(samples, labels)
    return image, memory_set_name(name, samples.num_samples), samples.seq_len


# The first bytes of the files Keras saves: a .keras zip archive, an HDF5 .h5 / .weights.h5.
_KERAS_MAGICS = (b"PK\x03\x04", b"\x89HDF\r\n\x1a\n")


def _is_keras_file(path):
    """A Keras model or weights file (by its name or first bytes), not an engine checkpoint."""
    if path.endswith((".keras", ".h5")):
        return True
    try:
        with open(path, "rb") as f:
            start = f.read(8)
    except OSError:
        return False  # load_checkpoint says why it cannot be read
    return start.startswith(_KERAS_MAGICS)


def _validation_parts(validation_data):
    """validation_data as (x, y): a pair (x, y), or an .ebin path or an iterable of (x, y) batches."""
    if isinstance(validation_data, tuple):
        if len(validation_data) != 2:
            raise ValueError(f"validation_data: expected (x, y), got a tuple of {len(validation_data)} "
                             "(sample weights are not supported)")
        return validation_data
    if isinstance(validation_data, (bytes, bytearray, memoryview)):
        file_path(validation_data, "validation_data")  # a path's bytes: refused by name
    if isinstance(validation_data, (str, os.PathLike)) or is_batches(validation_data):
        return validation_data, None
    raise ValueError(f"validation_data: expected (x, y), an .ebin path or an iterable of (x, y) batches, "
                     f"got {type(validation_data).__name__}")


def _integer(value, name, low, high=None):
    """value as an int in [low, high]; ValueError naming the argument otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low or \
            (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return int(value)


def _epoch_steps(train, run):
    """Steps an epoch, for the progress bar and History.params: None where unknown (a file is read
    by the engine; a stream without steps_per_epoch has no length until a pass ends)."""
    if isinstance(train, Stream):
        return train.steps_per_epoch or None
    if isinstance(train, str):
        return None
    samples = int(_header(train)["num_samples"])
    return samples // run["batch_size"] if run["drop_last"] else -(-samples // run["batch_size"])


def _num_samples(train):
    """The samples of fit's training set (its image in memory, or an .ebin path's header); None
    where they are not known here (a file the engine will refuse says why itself)."""
    header = _header(train)
    return None if header is None else int(header["num_samples"])


def _batch_size_for(given, recorded, train, controls):
    """The run's batch_size as Keras's fit takes it: the caller's, else a resumed run's, else 32
    (enhanced-train's is 64); a set smaller than it is one partial batch an epoch, as in Keras: the
    run's batch_size is then the set's size (the same step; without drop_last, which drops it)."""
    batch_size = given["batch_size"]
    if batch_size is None:
        batch_size = None if recorded else DEFAULTS["batch_size"]
    samples = _num_samples(train)
    drop_last = controls.get("drop_last", (recorded or {}).get("drop_last", False))
    if batch_size is not None and samples and samples < batch_size and not drop_last:
        batch_size = samples
    return batch_size


def _stream_batches(train, run, controls):
    """The batches a run on a stream takes, where known (steps=N, or epochs of steps_per_epoch):
    the stream reads none ahead past them."""
    if controls.get("steps") is not None:
        return int(controls["steps"])
    return run["epochs"] * train.steps_per_epoch or None


def _steps(x, steps_per_epoch, validation_steps, validation_data, run_steps):
    """fit's steps_per_epoch and validation_steps, checked: positive integers, each where Keras
    gives it a meaning here (a stream of batches; an iterable validation_data), and given where
    the iterable never ends (run_steps: the steps=N control, which ends the run itself)."""
    steps = {"steps_per_epoch": None if steps_per_epoch is None else _integer(steps_per_epoch, "steps_per_epoch", 1),
             "validation_steps": None if validation_steps is None else
             _integer(validation_steps, "validation_steps", 1)}
    if steps["steps_per_epoch"] is not None and not is_batches(x):
        raise ValueError("steps_per_epoch: only for x given as an iterable of (x, y) batches (a generator, a "
                         "tf.data.Dataset); data in memory trains one pass an epoch (steps=N: a run of N steps)")
    valid_x = validation_data[0] if isinstance(validation_data, tuple) and validation_data else validation_data
    if steps["validation_steps"] is not None and not is_batches(valid_x):
        raise ValueError("validation_steps: only for validation_data given as an iterable of (x, y) batches")
    if steps["steps_per_epoch"] is None and run_steps is None and is_endless(x):
        raise ValueError("steps_per_epoch: x is an endless tf.data.Dataset (cardinality INFINITE, as after "
                         "repeat()): give steps_per_epoch (or steps=N), else its first epoch never ends")
    if steps["validation_steps"] is None and is_endless(valid_x):
        raise ValueError("validation_steps: validation_data is an endless tf.data.Dataset (cardinality INFINITE, "
                         "as after repeat()): give validation_steps, the batches each validation takes")
    return steps


def _check_stream_arguments(given, resume, class_weight, controls):
    """What a stream of batches cannot do, refused by name before any work (Keras refuses batch_size too)."""
    if controls.get("drop_last"):
        raise ValueError("drop_last: x is an iterable of (x, y) batches, each one step as it comes; drop a short "
                         "last batch in the iterable itself (tf.data: batch(..., drop_remainder=True))")
    if given["batch_size"] is not None:
        raise ValueError("batch_size: x is an iterable of (x, y) batches, batched already (each batch is one step); "
                         "give no batch_size")
    if resume:
        raise ValueError("resume: a stream of batches cannot be replayed to the step reached; resume a run of an "
                         "in-memory set or an .ebin file")
    if class_weight == "balanced":
        raise ValueError("class_weight: 'balanced' counts the labels of the whole set, which a stream of batches "
                         "does not hold; give the weights as a dict or a list")


def _given(epochs, batch_size, seed, shuffle):
    """fit's run keywords as given (None: not given), checked."""
    return {"epochs": None if epochs is None else _integer(epochs, "epochs", 1),
            "batch_size": None if batch_size is None else _integer(batch_size, "batch_size", 1),
            "seed": None if seed is None else _integer(seed, "seed", 0, 2**64 - 1),
            "shuffle": None if shuffle is None else boolean(shuffle, "shuffle")}


def _verbosity(verbose):
    """Keras' verbose: "auto" (1 here, as in a notebook), 0, 1 or 2."""
    if isinstance(verbose, str) and verbose == "auto":
        return 1
    if isinstance(verbose, (bool, np.bool_)) or not isinstance(verbose, (int, np.integer)) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return int(verbose)


def _run_words(out, given, controls):
    """enhanced-train's flags for what the caller gave: a resume takes the rest from its run."""
    words = ["--out", out, "--quiet"]
    for key in ("epochs", "batch_size", "seed"):
        if given[key] is not None:
            words += [_flag(key), given[key]]
    if given["shuffle"] is False:
        words.append("--no-shuffle")
    for name, value in controls.items():
        if isinstance(value, (bool, np.bool_)):  # a switch (check_controls)
            words += [_flag(name)] if value else []
        elif value is not None:
            words += [_flag(name), value]
    return words


def _check_engine_arguments(batch_size, threads, device, precision, verbose):
    """predict's and evaluate's batch_size, threads (0: one per physical core, as the apps'), device,
    precision (their values the engine checks, by name) and Keras' verbose (they show nothing)."""
    _verbosity(verbose)
    _integer(batch_size, "batch_size", 1, 2**31 - 1)
    _integer(threads, "threads", 0, 4096)
    for value, name in ((device, "device"), (precision, "precision")):
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a str, got {value!r}")


def _check_inference_keywords(method, unknown, sample_weight, callbacks):
    """predict's and evaluate's keywords the engine has no meaning for, refused by name (as fit's)."""
    if unknown:
        own = "logits, device, threads, precision" if method == "predict" else "device, threads, precision"
        raise ValueError(f"{method}: unknown keyword argument '{next(iter(unknown))}'; {method} takes Keras' "
                         f"arguments and {own} (docs/python.md)")
    if sample_weight is not None:
        raise ValueError(f"sample_weight: {method} weighs every sample alike (enhanced-eval's numbers)")
    if callbacks:
        raise ValueError(f"callbacks: {method} calls no callbacks (the engine runs it in one call); give none")


def _inference_steps(x, steps):
    """Keras' steps of predict and evaluate: the batches drawn from an iterable of (x, y) batches;
    refused by name for data in memory or a file (read whole, as enhanced-predict reads it)."""
    if steps is None:
        return None
    steps = _integer(steps, "steps", 1)
    if not is_batches(x):
        raise ValueError("steps: only for x given as an iterable of (x, y) batches (the batches to draw); data in "
                         "memory or a file is read whole")
    return steps


class Model(KerasInterface):
    """The ragged-blend BiLSTM classifier (docs/model.md), trained by the C++ engine in this
    process. fit/evaluate/predict follow Keras; every training control of enhanced-train is a
    keyword argument of fit with the same name (underscores for dashes) and default.

    A Model owns its weights: a private copy of the checkpoint taken at load and at the end of
    each fit, which later runs writing into the same folder do not change; the next fit starts
    from them."""

    def __init__(self, vocab_size, num_labels, seq_len, embedding_dim=32, hidden=128, blend="mean",
                 pool="feature", pretrained=None, label_names=None):
        self.config = ModelConfig(vocab_size=vocab_size, num_labels=num_labels, embedding_dim=embedding_dim,
                                  hidden=hidden, seq_len=seq_len, blend=blend, pool=pool)
        self.pretrained = None if pretrained is None else os.fspath(pretrained)
        if label_names is not None:
            label_names = check_label_names(label_names, num_labels)
        self.label_names = label_names
        self.checkpoint = None  # where the weights came from (fit's last.safetensors, or load's path)
        self._weights_path = None  # the private copy
        self._weights_dir = None
        self.stop_training = False
        self.run_dir = None
        self._temporary_run = None  # fit(out=None)'s folder's clean-up (_temporary_out)
        self._temporary = None  # that folder (a TemporaryRun)
        self._fitting = False  # a fit is running (fit refuses a second one)

    @classmethod
    def load(cls, path):
        """The model of a checkpoint (enhanced-train's, or fit's), its weights copied in."""
        path = file_path(path, "Model.load: path")
        if _is_keras_file(path):
            raise ValueError(f"Model.load: {path} is a Keras file; Model.load takes an engine checkpoint "
                             "(.safetensors: a run's last.safetensors or best.safetensors, or model.save("
                             "'m.safetensors')); from a Keras model write one with "
                             "enhanced.keras.checkpoint_from_keras(keras_model, 'm.safetensors')")
        config, _ = load_checkpoint(path)
        model = cls(config.vocab_size, config.num_labels, config.seq_len, config.embedding_dim, config.hidden,
                    config.blend, config.pool)
        model._take_weights(path)
        return model

    def _private_path(self, name):
        """A path in the model's own folder (removed with the model)."""
        if self._weights_dir is None:
            self._weights_dir = tempfile.mkdtemp(prefix="enhanced-weights-")
            weakref.finalize(self, shutil.rmtree, self._weights_dir, True)
        return os.path.join(self._weights_dir, name)

    def _take_weights(self, path):
        """A private copy of the checkpoint at `path` becomes this model's weights (config and
        label names from it)."""
        copy = self._private_path("weights.safetensors")
        shutil.copyfile(path, copy + ".tmp")
        os.replace(copy + ".tmp", copy)
        self.config, self.label_names = read_config_and_label_names(copy)
        self.checkpoint, self._weights_path = os.path.abspath(path), copy

    def _own_tensors(self, tensors):
        """The tensors (parameter_shapes' names) become this model's weights (set_weights outside
        fit, or the weights a callback left at fit's end): model.checkpoint is then None."""
        scratch = tempfile.mkdtemp(prefix="enhanced-set-weights-")
        try:
            path = os.path.join(scratch, "weights.safetensors")
            save_checkpoint(path, self.config, tensors, self.label_names)
            self._take_weights(path)
        finally:
            shutil.rmtree(scratch, True)
        self.checkpoint = None

    def state_dict(self):
        """The checkpoint's tensors by their PyTorch names (what export_onnx and the torch module read)."""
        return load_checkpoint(self._weights())[1]

    def _weights(self):
        """The checkpoint predict, evaluate and state_dict read: in a callback of a running fit,
        the run's live weights (as Keras' model holds them), written out for the engine; from
        another thread while a fit runs, a ValueError."""
        if self._fit_access("the model's weights") is not None:
            live = self._private_path("live.safetensors")
            save_checkpoint(live, self.config, self._tensors(), self.label_names)
            return live
        if self._weights_path is None:
            raise ValueError("this model has no weights yet: fit it, or Model.load a checkpoint")
        return self._weights_path

    # ---- training ---------------------------------------------------------------------------

    def _model_words(self):
        """The model's flags for a new run: its shape, and its weights where it has them (a run
        from them, with fresh optimizer moments, as enhanced-train --init-from starts)."""
        c = self.config
        words = ["--vocab-size", c.vocab_size, "--num-labels", c.num_labels, "--embedding-dim", c.embedding_dim,
                 "--hidden", c.hidden, "--blend", c.blend, "--pool", c.pool]
        if self._weights_path is not None:
            words += ["--init-from", self._weights_path]
        elif self.pretrained is not None:
            words += ["--pretrained", self.pretrained]
        return words

    def _check_seq_len(self, seq_len, resume=False, name="x"):
        """x's T (None: unknown) is the model's seq_len; the error names what the user knows: the
        model's seq_len and the checkpoint its weights came from (Model.load's, fit's)."""
        if not resume and seq_len is not None and seq_len != self.config.seq_len:
            source = f" (its weights come from {self.checkpoint})" if self.checkpoint else ""
            raise ValueError(f"{name}: its samples have T = {seq_len} positions, but the model's seq_len is "
                             f"{self.config.seq_len}{source}")

    def _data(self, x, y, validation_data, resume, steps):
        """The training and validation sets for the engine: (train, name, valid, valid name); train
        is a Stream where x is an iterable of batches. steps: fit's steps_per_epoch and validation_steps."""
        if x is None:
            raise ValueError("fit needs x (with resume=True: the same data again)")
        if is_batches(x):
            _no_y_beside_batches(y, "x")
            train = Stream(x, "x", steps["steps_per_epoch"])
            train_name, seq_len = "<x: a stream of batches>", train.seq_len
            self._check_seq_len(seq_len, resume, "x: batch 0")
        else:
            train, train_name, seq_len = data_image(x, y, "x")
            self._check_seq_len(seq_len, resume)
        if validation_data is None:
            return train, train_name, None, ""
        vx, vy = _validation_parts(validation_data)
        if is_batches(vx) and not is_one_shot(vx):  # read again for each validation: streamed
            _no_y_beside_batches(vy, "validation_data")
            valid = Stream(vx, "validation_data", steps["validation_steps"], pass_per_epoch=True)
            self._check_seq_len(valid.seq_len, resume, "validation_data: batch 0")
            valid.vocab_size, valid.num_labels = self.config.vocab_size, self.config.num_labels
            return train, train_name, valid, STREAMED_VALIDATION
        valid, valid_name, _ = data_image(vx, vy, "validation_data", steps["validation_steps"])
        return train, train_name, valid, valid_name

    def fit(self, x=None, y=None, batch_size=None, epochs=None, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=None, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, *, out=None, seed=None, resume=False, **controls):
        """Trains in this process, from the model's weights where it has them (Model.load, or an
        earlier fit) with fresh optimizer moments, else from a new initialisation; returns a History
        (one value per epoch of loss, accuracy, lr and, with validation_data, val_loss,
        val_accuracy, val_f1). `out` receives what enhanced-train writes; by default a new
        temporary folder. resume=True continues the run in `out` exactly, with its optimizer
        state: a keyword not given takes the run's recorded value. Ctrl-C saves the step reached
        and raises KeyboardInterrupt. x may be an iterable of (x, y) batches, read batch by batch
        (each batch one step; steps_per_epoch: an epoch is that many batches of one iterator that
        goes on across epochs, else a pass). `controls`: enhanced-train's training controls by name.
        validation_split: Keras' (the last fraction of x and y); initial_epoch (other than 0) and
        sample_weight are refused by name, as are Keras callbacks the engine cannot serve. The
        positional parameters are Keras' (x, y, batch_size, epochs, verbose, ...); the engine's
        own (out, seed, resume, the controls) are keywords only."""
        if self._fitting:  # a callback's fit would take the running fit's weights and access
            raise ValueError("fit: this model is training already (fit called from one of its callbacks, or from "
                             "another thread); a model trains one run at a time")
        self._fitting = True
        self._fit_thread = threading.get_ident()  # the one thread that may use the run's access
        try:
            verbose = _verbosity(verbose)
            resume = boolean(resume, "resume")
            check_keras_keywords(initial_epoch, sample_weight)
            callbacks = check_callbacks(callbacks)
            x, y, validation_data = split_validation(x, y, validation_data, validation_split)
            check_controls(controls, _core().train_flag_names(), _core().train_flag_names(switches_only=True))
            given = _given(epochs, batch_size, seed, shuffle)
            steps = _steps(x, steps_per_epoch, validation_steps, validation_data, controls.get("steps"))
            weights = class_weight_values(class_weight, self.config.num_labels)
            if is_batches(x):
                _check_stream_arguments(given, resume, weights, controls)
            out = resolve_out(out, resume)
            recorded = recorded_options(out) if resume else None
            if resume:
                check_same_model(self.config, out, recorded)
                check_same_labels(recorded, self.label_names, weights)
                if validation_data is None:
                    validation_data = resumed_validation(recorded, out)
            train, train_name, valid, valid_name = self._data(x, y, validation_data, resume, steps)
            if isinstance(train, Stream):
                given["batch_size"] = train.batch_size  # the engine's batch capacity: the stream's first batch
            else:
                given["batch_size"] = _batch_size_for(given, recorded, train, controls)
            if out is None:
                out = self._temporary_out()
            words = _run_words(out, given, controls) + (["--resume"] if resume else self._model_words())
            if isinstance(weights, str):
                words += ["--class-weights", weights]
            words += class_weight_mean_words(weights, resume, controls)
            run = plan(given, recorded, controls)
            if isinstance(train, Stream):
                train.limit = _stream_batches(train, run, controls)
            epoch_steps = _epoch_steps(train, run)
            history = History({**run, "out": out, "steps": epoch_steps},
                              {"verbose": verbose, "epochs": run["epochs"], "steps": epoch_steps})
            bridge = Bridge(self, callbacks, history, Progress(verbose, run["epochs"], epoch_steps))
            with running_fit(bridge), first_signal_decides(bridge):
                self._run(words, train, train_name, valid, valid_name, bridge, weights, out)
            return history
        finally:
            self._fit_thread = None
            self._fitting = False

    def _run(self, words, train, train_name, valid, valid_name, bridge, weights, out):
        """The engine's run, then its end as Keras' fit ends (_after_run)."""
        try:
            with bridge.flushing(), keyword_errors():
                status = _core().train([str(w) for w in words], train, train_name, valid, valid_name, bridge,
                                       self.label_names or [], weights if isinstance(weights, list) else [])
        except BaseException:
            self._access = None
            self._take_run_weights(out, bridge)  # what the run trained, as a Keras model keeps it
            raise
        finally:
            self._access = None
            for data in (train, valid):
                if isinstance(data, Stream):
                    data.close()
        self._after_run(out, status, bridge, isinstance(train, Stream))

    def _temporary_out(self):
        """fit(out=None)'s folder: a new temporary one, removed with the model (or at exit, after
        a fit still training into it from another thread has ended: fit_hooks.stop_at_exit) or when the
        next fit(out=None) replaces it; the model's weights are its own copy (_take_weights)."""
        if self._temporary_run is not None:
            self._temporary_run()
        self._temporary = TemporaryRun()
        self._temporary_run = weakref.finalize(self, self._temporary.remove)
        self._temporary_run.atexit = False  # at exit, stop_at_exit removes it after the runs have ended
        return self._temporary.path

    def _take_run_weights(self, out, bridge):
        """As Keras' fit leaves the model at its last weights: out/last.safetensors becomes the
        model's (the best by the monitor, with validation_data, is out/best.safetensors), unless a
        callback set other weights after the run's last save (EarlyStopping's
        restore_best_weights), or raised: the run's weights then become the model's, and
        last.safetensors stays the run's."""
        if out is None:
            return
        last = os.path.join(out, "last.safetensors")
        if os.path.exists(last):
            self._take_weights(last)
        if bridge is None or bridge.final_weights is None:
            return
        if self._weights_path is not None:  # else a new model raised before the run's first save: none to compare
            taken = np.concatenate([t.reshape(-1) for t in self.get_weights()])
            if np.array_equal(taken, bridge.final_weights):
                return
        arrays = split_parameters(bridge.final_weights, self.config)
        self._own_tensors(dict(zip(parameter_shapes(self.config), arrays)))

    def _after_run(self, out, status, bridge, streamed):
        """The model takes the run's weights (_take_run_weights); an interrupt or a failed run
        raises, as enhanced-train exits."""
        self.run_dir = out
        if status == 0 and bridge.signal_deferred:  # it came as the run's last validation was read
            status = _core().INTERRUPTED
        if status == _core().INTERRUPTED and exiting():
            # Python exits (stop_at_exit): the run ends quietly, saved in out; the model, about to
            # go, takes no private copy of its weights (a folder made then would stay).
            return
        self._take_run_weights(out, bridge)
        if status == _core().INTERRUPTED:
            then = ("Model.load(its last.safetensors).fit(...) continues from its weights (a stream cannot be "
                    "replayed)" if streamed else "fit(..., resume=True) continues")
            # On SIGTERM, first_signal_decides ends it as enhanced-train does, with exit status 143.
            raise KeyboardInterrupt(f"the step reached is saved in {out}; {then}")
        if status != 0:
            metrics = os.path.join(out, "metrics.jsonl")
            where = f"; its metrics are in {metrics}" if os.path.exists(metrics) else ""
            reason = bridge.failure or f"training stopped (exit status {status}, as enhanced-train's)"
            raise RuntimeError(reason + where)

    # ---- inference ----------------------------------------------------------------------------

    def evaluate(self, x, y=None, batch_size=32, verbose="auto", sample_weight=None, steps=None, callbacks=None,
                 return_dict=None, *, device="auto", threads=0, precision="fp32", **unknown):
        """{loss, accuracy, macro_f1} on a labelled set (enhanced-eval's numbers); with return_dict=False
        (given), Keras' list [loss, accuracy, macro_f1]. Keras' positional order; steps: the first
        `steps` batches of an iterable of batches."""
        _check_inference_keywords("evaluate", unknown, sample_weight, callbacks)
        return_dict = True if return_dict is None else boolean(return_dict, "return_dict")
        _check_engine_arguments(batch_size, threads, device, precision, verbose)
        data, name, seq_len = data_image(x, y, "x", _inference_steps(x, steps))
        self._check_seq_len(seq_len)
        with keyword_errors():
            result = _core().evaluate(self._weights(), data, name, int(batch_size), device, int(threads), precision)
        values = {key: result[key] for key in ("loss", "accuracy", "macro_f1")}
        return values if return_dict else list(values.values())

    def predict(self, x, batch_size=32, verbose="auto", steps=None, callbacks=None, *, logits=False, device="auto",
                threads=0, precision="fp32", **unknown):
        """(N, L) softmax probabilities (enhanced-predict's), or the logits with logits=True. Keras'
        positional order; steps: the first `steps` batches of an iterable of batches."""
        _check_inference_keywords("predict", unknown, None, callbacks)
        _check_engine_arguments(batch_size, threads, device, precision, verbose)
        logits = boolean(logits, "logits")
        data, name, seq_len = data_image(x, None, "x", _inference_steps(x, steps))
        self._check_seq_len(seq_len)
        with keyword_errors():
            return _core().predict(self._weights(), data, name, int(batch_size), device, int(threads), precision,
                                   logits)

    def predict_labels(self, x, **options):
        """The predicted label of each sample: its name where the model has label_names, else its index."""
        predicted = self.predict(x, logits=True, **options).argmax(axis=1)
        if self.label_names is None:
            return predicted
        return [self.label_names[i] for i in predicted]
