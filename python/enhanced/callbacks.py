"""Callbacks of Keras' protocol (objects with on_train_begin, on_epoch_begin, on_train_batch_end,
on_epoch_end, on_train_end), for enhanced.Model.fit and for keras.Model.fit alike: they read
only the epoch, the batch and Keras' `logs` keys (loss, accuracy, val_loss, val_accuracy,
val_f1, lr). Nothing here imports TensorFlow."""
import importlib.util

import numpy as np

from .tensorboard import RunWriter, batch_scalars, epoch_scalars, evaluation_scalars


class TensorBoard:
    """TensorBoard curves in Keras' layout (log_dir/train, log_dir/validation), through the
    `tensorboard` package's EventFileWriter: per epoch `epoch_loss`, `epoch_accuracy`,
    `epoch_learning_rate` (train) and `epoch_loss`, `epoch_accuracy`, `epoch_f1` (validation, from
    the val_ keys) at the epoch's index, and `evaluation_X_vs_iterations` at the batch count; per
    batch (every `update_freq` batches; "epoch": none) `batch_loss` and the batch logs' other
    numbers at the batch count: the optimizer's steps before this fit (a resumed run's: its
    curves go on where they stopped) plus this fit's batches (1 after a new run's first batch).

    Where Keras' callback defaults to update_freq="epoch", this one writes every batch's logs:
    what the engine passes per batch costs one event per number."""

    def __init__(self, log_dir="logs", update_freq=1):
        if update_freq != "epoch" and (isinstance(update_freq, bool) or not isinstance(update_freq, int)
                                       or update_freq < 1):
            raise ValueError(f"update_freq must be 'epoch' or a positive integer, got {update_freq!r}")
        if importlib.util.find_spec("tensorboard") is None:  # said now, not at the first batch
            raise ImportError("enhanced.callbacks.TensorBoard writes through the tensorboard package, which is not "
                              "installed: pip install \"./python[tensorboard]\" (or pip install tensorboard)")
        self.log_dir, self.update_freq = log_dir, update_freq
        self.model = None  # Keras' fit sets it (set_model); nothing here reads it
        self._writer, self._batches = None, 0

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        self._writer = RunWriter(self.log_dir)
        self._batches = self._steps_taken()

    def _steps_taken(self):
        """The steps the model's optimizer took before this fit (a resumed run's, or an earlier
        fit's in Keras), where it says: the batch curves go on from there, not from 1 again."""
        try:
            return int(np.asarray(self.model.optimizer.iterations))
        except (AttributeError, TypeError, ValueError):  # no model, no optimizer yet, outside a fit
            return 0

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self.update_freq == "epoch" or not logs or self._batches % self.update_freq:
            return
        self._write(batch_scalars(logs), self._batches)

    def on_epoch_end(self, epoch, logs=None):
        self._write(epoch_scalars(logs), epoch)
        self._write(evaluation_scalars(logs), self._batches)
        self._writer.flush()  # an epoch's curves are visible in TensorBoard as soon as it ends

    def flush(self):
        """Writes out the events so far (enhanced.Model.fit calls it when a run ends without
        on_train_end: Ctrl-C, an error)."""
        if self._writer is not None:
            self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _write(self, scalars, step):
        if self._writer is None:  # a fit that skipped on_train_begin still gets its curves
            self._writer = RunWriter(self.log_dir)
        for folder, tag, value in scalars:
            self._writer.scalar(folder, tag, value, step)

    def __getattr__(self, name):
        """Keras' CallbackList calls hooks this class has no use for (on_test_begin, ...): no-ops."""
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)
