"""enhanced.Model: the engine inside the user's Python, with Keras' names and conventions and
enhanced-train's defaults and arithmetic. The C++ engine is the compiled extension
enhanced._core (built by `pip install ./python`); `fit` parses the same flags enhanced-train
parses, so given the same data, options and seed it writes the same files, bit for bit.

Data in memory (a tf.RaggedTensor (N, T, 3, None), nested lists, a dict of CSR arrays, or an
iterable of (x, y) batches such as a tf.data.Dataset) becomes an .ebin image in memory that the
engine reads without a file; a path to an .ebin file is read as it is."""
import os
import sys
import tempfile
import time

import numpy as np

from . import ebin
from .checkpoint import ModelConfig, load_checkpoint, load_label_names

_CONTINUE, _STOP = 0, 1  # TrainingDecision's carry_on and stop (training_observer.h)


def _core():
    try:
        from . import _core as core
    except ImportError as e:  # a source checkout without `pip install ./python`
        raise ImportError("enhanced.Model needs the compiled engine: pip install ./python "
                          f"(docs/python.md) ({e})") from e
    return core


def _flag(name):
    return "--" + name.replace("_", "-")


def _is_batches(x):
    """An iterable of (x, y) batches (tf.data.Dataset, a generator), not samples."""
    if isinstance(x, (str, bytes, os.PathLike, dict, list, tuple, np.ndarray)) or ebin._is_ragged_tensor(x):
        return False
    return hasattr(x, "__iter__")


def _concatenate(parts):
    """One _Csr of the _Csr parts, in order."""
    first = parts[0]
    return ebin._Csr(first.seq_len, np.concatenate([p.cur_word for p in parts]),
                     np.concatenate([p.lengths[0] for p in parts]), np.concatenate([p.ids[0] for p in parts]),
                     np.concatenate([p.lengths[1] for p in parts]), np.concatenate([p.ids[1] for p in parts]))


def _samples_and_labels(x, y):
    if _is_batches(x):
        if y is not None:
            raise ValueError("x is an iterable of (x, y) batches: give no y")
        parts, labels = [], []
        for batch in x:
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise ValueError("each batch of the iterable must be an (x, y) pair")
            parts.append(ebin._samples(batch[0]))
            labels.append(np.asarray(batch[1]).reshape(-1))
        if not parts:
            raise ValueError("the iterable gave no batches")
        if len({p.seq_len for p in parts}) != 1:
            raise ValueError("the batches differ in T (positions per sample)")
        return _concatenate(parts), np.concatenate(labels)
    return ebin._samples(x), None if y is None else np.asarray(y)


def data_image(x, y=None, name="x"):
    """(data, name) for the engine: an .ebin path as it is, else the .ebin image of x and y as
    bytes (ebin.write_ebin's bytes, without the file)."""
    if isinstance(x, (str, os.PathLike)):
        if y is not None:
            raise ValueError(f"{name} is a file: its labels are in it, give no y")
        return os.fspath(x), os.fspath(x)
    samples, labels = _samples_and_labels(x, y)
    return b"".join(ebin.image_pieces(samples, labels)), f"<{name}: {samples.num_samples} samples in memory>"


class History:
    """What Keras' fit returns: history[key] has one value per epoch (loss, accuracy, val_loss,
    val_accuracy, val_f1, lr), epoch the epochs' indices, params fit's settings."""

    def __init__(self, params):
        self.history, self.epoch, self.params = {}, [], params

    def _add(self, epoch, logs):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)


class _Progress:
    """verbose=1: a progress bar a batch (tqdm where installed); 2: one line an epoch; 0: none."""

    def __init__(self, verbose, epochs, steps_per_epoch):
        self.verbose, self.epochs, self.steps = verbose, epochs, steps_per_epoch
        self.bar, self.started = None, 0.0

    def epoch_begin(self, epoch):
        self.started = time.monotonic()
        if self.verbose != 1:
            return
        try:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=self.steps, desc=f"Epoch {epoch + 1}/{self.epochs}", leave=True)
        except ImportError:
            self.bar = None
            print(f"Epoch {epoch + 1}/{self.epochs}", file=sys.stderr)

    def batch_end(self, batch, logs):
        if self.verbose != 1:
            return
        text = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items() if isinstance(v, float))
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(text, refresh=False)
        else:
            print(f"\r{batch + 1}/{self.steps} - {text}", end="", file=sys.stderr, flush=True)

    def epoch_end(self, epoch, logs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.verbose == 1:
            print(file=sys.stderr)
        if self.verbose in (1, 2):
            text = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items() if isinstance(v, float))
            print(f"Epoch {epoch + 1}/{self.epochs} - {time.monotonic() - self.started:.1f}s - {text}",
                  file=sys.stderr, flush=True)


class _Bridge:
    """What the engine's TrainingObserver calls (python/src/train.cpp), with the GIL held: the
    user's callbacks with Keras' epoch, batch and logs, the History, the progress, and the poll
    after each step (stop_training, or Ctrl-C, which the extension turns into _INTERRUPT)."""

    def __init__(self, model, callbacks, history, progress):
        self.model, self.callbacks, self.history, self.progress = model, callbacks, history, progress
        self.wants_batch_logs = progress.verbose == 1 or any(hasattr(c, "on_train_batch_end") for c in callbacks)

    def _call(self, method, *args):
        for callback in self.callbacks:
            function = getattr(callback, method, None)
            if function is not None:
                function(*args)

    def on_train_begin(self):
        self._call("on_train_begin", {})

    def on_epoch_begin(self, epoch):
        self.progress.epoch_begin(epoch)
        self._call("on_epoch_begin", epoch, {})

    def on_train_batch_end(self, batch, logs):
        self.progress.batch_end(batch, logs)
        self._call("on_train_batch_end", batch, logs)

    def on_epoch_end(self, epoch, logs):
        self.history._add(epoch, logs)
        self.progress.epoch_end(epoch, logs)
        self._call("on_epoch_end", epoch, logs)

    def on_train_end(self, logs):
        self._call("on_train_end", logs)

    def poll(self):
        return _STOP if self.model.stop_training else _CONTINUE


def _steps_per_epoch(image, batch_size, drop_last):
    samples = int(np.frombuffer(image, "<u8", 1, offset=16)[0])  # the header's num_samples
    return samples // batch_size if drop_last else -(-samples // batch_size)


def _label_names_file(names, out):
    """label_names as the file --label-names reads (one a line), beside the run."""
    path = os.path.join(out, ".label-names.txt")
    os.makedirs(out, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{name}\n" for name in names))
    return path


def _class_weight_words(class_weight, out, num_labels):
    if class_weight is None:
        return []
    if isinstance(class_weight, str):
        return ["--class-weights", class_weight]
    weights = [float(class_weight.get(label, 1.0)) for label in range(num_labels)] \
        if isinstance(class_weight, dict) else [float(w) for w in class_weight]
    path = os.path.join(out, ".class-weights.txt")
    os.makedirs(out, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{w!r}\n" for w in weights))
    return ["--class-weights", path]


class Model:
    """The ragged-blend BiLSTM classifier (docs/model.md), trained by the C++ engine in this
    process. fit/evaluate/predict follow Keras; every training control of enhanced-train is a
    keyword argument of fit with the same name (underscores for dashes) and default."""

    def __init__(self, vocab_size, num_labels, seq_len, embedding_dim=32, hidden=128, blend="mean",
                 pool="feature", pretrained=None, label_names=None):
        self.config = ModelConfig(vocab_size=vocab_size, num_labels=num_labels, embedding_dim=embedding_dim,
                                  hidden=hidden, seq_len=seq_len, blend=blend, pool=pool)
        self.pretrained = None if pretrained is None else os.fspath(pretrained)
        if label_names is not None:
            label_names = [str(name) for name in label_names]
            if len(label_names) != num_labels:
                raise ValueError(f"label_names: {len(label_names)} names for {num_labels} labels")
        self.label_names = label_names
        self.checkpoint = None  # the weights: a checkpoint file (fit's last, or load's)
        self.stop_training = False
        self.run_dir = None

    @classmethod
    def load(cls, path):
        """The model of a checkpoint (enhanced-train's, or fit's)."""
        config, _ = load_checkpoint(path)
        model = cls(config.vocab_size, config.num_labels, config.seq_len, config.embedding_dim, config.hidden,
                    config.blend, config.pool)
        model.label_names = load_label_names(path)
        model.checkpoint = os.fspath(path)
        return model

    def state_dict(self):
        """The checkpoint's tensors by their PyTorch names (what export_onnx and the torch module read)."""
        return load_checkpoint(self._weights())[1]

    def _weights(self):
        if self.checkpoint is None:
            raise ValueError("this model has no weights yet: fit it, or Model.load a checkpoint")
        return self.checkpoint

    # ---- training ---------------------------------------------------------------------------

    def _model_words(self):
        c = self.config
        words = ["--vocab-size", c.vocab_size, "--num-labels", c.num_labels, "--embedding-dim", c.embedding_dim,
                 "--hidden", c.hidden, "--blend", c.blend, "--pool", c.pool]
        if self.pretrained is not None:
            words += ["--pretrained", self.pretrained]
        return words

    def fit(self, x=None, y=None, validation_data=None, epochs=1, batch_size=64, callbacks=None, out=None, seed=0,
            shuffle=True, verbose=1, resume=False, class_weight=None, **controls):
        """Trains in this process; returns a History (one value per epoch of loss, accuracy, lr and,
        with validation_data, val_loss, val_accuracy, val_f1). `out` receives what enhanced-train
        writes (last/best checkpoints, metrics.jsonl, the state a resume continues from); by default
        a new temporary folder. Ctrl-C saves the step reached and raises KeyboardInterrupt;
        fit(..., resume=True) continues exactly. `controls`: enhanced-train's other flags by name."""
        if x is None:
            raise ValueError("fit needs x (with resume=True: the same data again)")
        if out is None:
            out = tempfile.mkdtemp(prefix="enhanced-run-")
        out = os.fspath(out)
        words = ["--out", out, "--epochs", epochs, "--batch-size", batch_size, "--seed", seed, "--quiet"]
        if resume:
            words.append("--resume")
        else:
            words += self._model_words()
            if self.label_names is not None:
                words += ["--label-names", _label_names_file(self.label_names, out)]
        if not shuffle:
            words.append("--no-shuffle")
        words += _class_weight_words(class_weight, out, self.config.num_labels)
        for name, value in controls.items():
            if value is False or value is None:
                continue
            words += [_flag(name)] if value is True else [_flag(name), value]
        train, train_name = data_image(x, y, "x")
        valid, valid_name = None, ""
        if validation_data is not None:
            vx, vy = validation_data if isinstance(validation_data, tuple) else (validation_data, None)
            valid, valid_name = data_image(vx, vy, "validation_data")
        history = History({"epochs": epochs, "batch_size": batch_size, "out": out})
        callbacks = list(callbacks or [])
        for callback in callbacks:
            if hasattr(callback, "set_model"):
                callback.set_model(self)
        self.stop_training = False
        progress = _Progress(verbose, epochs, None if isinstance(train, str) else
                             _steps_per_epoch(train, batch_size, controls.get("drop_last", False)))
        bridge = _Bridge(self, callbacks, history, progress)
        status = _core().train([str(w) for w in words], train, train_name, valid, valid_name, bridge)
        # As Keras' fit leaves the model at its last weights: last.safetensors (the best by the
        # monitor, with validation_data, is out/best.safetensors: Model.load it).
        self.run_dir = out
        self.checkpoint = os.path.join(out, "last.safetensors")
        if status == _core().INTERRUPTED:
            raise KeyboardInterrupt(f"training interrupted: the step reached is saved in {out}; "
                                    "fit(..., resume=True) continues")
        if status != 0:
            raise RuntimeError(f"training stopped (exit status {status}, as enhanced-train's): see the message above "
                               f"and {os.path.join(out, 'metrics.jsonl')}")
        return history

    # ---- inference ----------------------------------------------------------------------------

    def evaluate(self, x, y=None, batch_size=64, device="auto", threads=0, precision="fp32", verbose=0):
        """{loss, accuracy, macro_f1} on a labelled set (enhanced-eval's numbers)."""
        data, name = data_image(x, y, "x")
        result = _core().evaluate(self._weights(), data, name, batch_size, device, threads, precision)
        return {key: result[key] for key in ("loss", "accuracy", "macro_f1")}

    def predict(self, x, batch_size=64, logits=False, device="auto", threads=0, precision="fp32", verbose=0):
        """(N, L) softmax probabilities (enhanced-predict's), or the logits with logits=True."""
        data, name = data_image(x, None, "x")
        return _core().predict(self._weights(), data, name, batch_size, device, threads, precision, bool(logits))

    def predict_labels(self, x, **options):
        """The predicted label of each sample: its name where the model has label_names, else its index."""
        predicted = self.predict(x, logits=True, **options).argmax(axis=1)
        if self.label_names is None:
            return predicted
        return [self.label_names[i] for i in predicted]
