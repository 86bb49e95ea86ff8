"""An iterable of (x, y) batches (a generator, a tf.data.Dataset) as Model.fit reads it, with
Keras's meaning: each batch the iterable gives is one step, in its order and sizes, read batch by
batch as the engine trains (Stream), never gathered whole. A validation iterable that can be read
again (a tf.data.Dataset) is a Stream too, read a pass each validation (its first validation_steps
batches, as Keras's); a one-shot iterator (a generator) is gathered once (gathered)."""
import concurrent.futures
import itertools
import os

import numpy as np

from . import ebin


def is_dense_array(x):
    """A dense tensor or array of numbers (a tf.Tensor, a NumPy or torch array): iterable, but
    samples of one shape, not batches and not the ragged lists of ids a position's fields hold."""
    if ebin._is_ragged_tensor(x) or (isinstance(x, np.ndarray) and x.dtype == object):
        return False
    return hasattr(x, "shape") and hasattr(x, "dtype")


def is_batches(x):
    """An iterable of (x, y) batches (tf.data.Dataset, a generator), not samples."""
    if isinstance(x, (str, bytes, os.PathLike, dict, list, tuple, np.ndarray)) or ebin._is_ragged_tensor(x) or \
            is_dense_array(x):
        return False
    return hasattr(x, "__iter__")


def is_endless(x):
    """A tf.data.Dataset that never ends (its cardinality INFINITE, as after repeat()). Other
    iterables (a generator) cannot say: False."""
    if not type(x).__module__.startswith("tensorflow") or not hasattr(x, "cardinality"):
        return False
    try:
        return int(x.cardinality()) == -1  # tf.data.INFINITE_CARDINALITY
    except (TypeError, ValueError):
        return False


def labels_for(y, num_samples, name="x"):
    """y as the labels of the num_samples samples of `name` (fit's x, or validation_data's); a
    count that differs is a ValueError naming y."""
    labels = np.asarray(y)
    if labels.size != num_samples:
        where = "y" if name == "x" else f"{name}'s y"
        raise ValueError(f"{where}: {labels.size} labels for the {num_samples} samples of {name}")
    return labels


def batch_samples(batch, index, name):
    """One (x, y) batch as checked samples (_Csr) and labels ((B,)); errors name the batch."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError(f"{name}: batch {index}: not an (x, y) pair (each batch of the iterable must be one)")
    try:
        samples = ebin._samples(batch[0])
    except ValueError as e:
        raise ValueError(f"{name}: batch {index}: {e}") from None
    labels = np.asarray(batch[1]).reshape(-1)
    if labels.size != samples.num_samples:
        raise ValueError(f"{name}: batch {index}: x has {samples.num_samples} samples but y has {labels.size} labels")
    return samples, labels


def _image(samples, labels, index, name):
    try:
        return ebin.image_bytes(samples, labels)
    except ValueError as e:
        raise ValueError(f"{name}: batch {index}: {e}") from None


def _concatenate(parts):
    """One _Csr of the _Csr parts, in order."""
    first = parts[0]
    return ebin._Csr(first.seq_len, np.concatenate([p.cur_word for p in parts]),
                     np.concatenate([p.lengths[0] for p in parts]), np.concatenate([p.ids[0] for p in parts]),
                     np.concatenate([p.lengths[1] for p in parts]), np.concatenate([p.ids[1] for p in parts]))


def gathered(x, name, steps=None):
    """The first `steps` (x, y) batches of an iterable (None: all of one pass) as one _Csr and its labels."""
    parts, labels = [], []
    for i, batch in enumerate(itertools.islice(x, steps)):
        samples, batch_labels = batch_samples(batch, i, name)
        parts.append(samples)
        labels.append(batch_labels)
    if not parts:
        raise ValueError(f"{name}: the iterable gave no batches")
    if len({p.seq_len for p in parts}) != 1:
        raise ValueError(f"{name}: the batches differ in T (positions per sample)")
    return _concatenate(parts), np.concatenate(labels)


def is_one_shot(x):
    """An iterator (a generator): iter(x) gives x itself, so a second pass finds nothing."""
    return hasattr(x, "__next__")


class Stream:
    """The batches of an iterable, handed to the engine one at a time: the extension
    (python/src/train.cpp) calls next_image from the training thread, with the GIL, and holds the
    bytes it returns until its next call. Every batch is read and converted on a thread of its
    own, the next one while the engine trains (with the GIL released), so memory holds about two
    batches of the data, and the conversion overlaps the step.

    steps_per_epoch (0: none): an epoch is that many batches of ONE iterator that goes on across
    epochs (an endless ds.repeat() works); 0: an epoch is one pass, iter(x) again each epoch.
    pass_per_epoch (validation data): every epoch is a new pass, of at most steps_per_epoch
    batches (Keras's validation_steps). The first batch is read here: its T and size are the
    run's (seq_len, batch_size). close() ends the thread (fit calls it however the run ends).
    vocab_size and num_labels: the model's, which a validation stream's batches must fit."""

    def __init__(self, data, name, steps_per_epoch=None, pass_per_epoch=False):
        self.data, self.name = data, name
        self.limit = None  # the batches the run takes, where known: none is read past them
        self.steps_per_epoch = steps_per_epoch or 0
        self.pass_steps = self.steps_per_epoch if pass_per_epoch else 0  # none read past a pass's
        self.vocab_size = self.num_labels = None
        self.index = 0  # the next batch's index, counted from the run's start
        self.in_pass = 1  # batches read of the current pass (the first, below)
        self.iterator = iter(data)
        first = next(self.iterator, None)
        if first is None:
            raise ValueError(f"{name}: the iterable gave no batches")
        samples, labels = batch_samples(first, 0, name)
        self.seq_len, self.batch_size = samples.seq_len, samples.num_samples
        self.first = _image(samples, labels, 0, name)
        self.index = 1
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="enhanced-stream")
        self._ahead = None  # the next batch's image (a Future), being made while the engine trains

    def next_image(self, new_pass):
        """The next batch's .ebin image, or None at the end of the data. new_pass: iter(x) again
        first (ignored for the first batch, read already). A bad batch's ValueError is raised
        here, when the engine asks for that batch. A Ctrl-C while this waits for the reading
        thread leaves the read going: the next call (new_pass False) takes its batch."""
        if self.first is not None:
            image, self.first = self.first, None  # the engine holds it now: no second reference
        else:
            if self._ahead is None:  # a pass ended, or its steps were taken: nothing was read ahead
                self._ahead = self._submit(new_pass)
            image = self._ahead.result()
            self._ahead = None
        if image is not None and (self.limit is None or self.index < self.limit) and \
                not (self.pass_steps and self.in_pass >= self.pass_steps):
            self._ahead = self._submit(False)
        return image

    def _submit(self, new_pass):
        """The next read, on the reading thread; here, in fit's thread, once Python is exiting
        (concurrent.futures then takes no new work, and fit is asked to stop and save:
        fit_hooks.stop_at_exit)."""
        try:
            return self._reader.submit(self._read, new_pass)
        except RuntimeError:
            done = concurrent.futures.Future()
            try:
                done.set_result(self._read(new_pass))
            except BaseException as e:  # raised by result(), in the caller's place, as from the thread
                done.set_exception(e)
            return done

    def _read(self, new_pass):
        if new_pass:
            self.iterator = iter(self.data)
            self.in_pass = 0
        batch = next(self.iterator, None)
        if batch is None:
            return None
        samples, labels = batch_samples(batch, self.index, self.name)
        image = _image(samples, labels, self.index, self.name)
        self.index += 1
        self.in_pass += 1
        return image

    def close(self):
        """Ends the reading thread (after the batch it reads, if any)."""
        self._ahead = None
        self._reader.shutdown(wait=True, cancel_futures=True)
