"""What enhanced.Model.fit hands the engine to call back (python/src/train.cpp's PythonObserver):
the user's callbacks at Keras' points, in Keras' order, the History, the progress, the poll after
each step (model.stop_training, Ctrl-C) and SIGTERM as an interrupt."""
import atexit
import contextlib
import shutil
import signal
import sys
import tempfile
import threading
import time

_CONTINUE, _STOP, _INTERRUPT = 0, 1, 2  # TrainingDecision's carry_on, stop, interrupt (training_observer.h)


class History:
    """What Keras' fit returns: history[key] has one value per epoch (loss, accuracy, val_loss,
    val_accuracy, val_f1, lr), epoch the epochs' indices, params fit's settings; keras_params
    what Keras gives callbacks (set_params): verbose, epochs, steps."""

    def __init__(self, params, keras_params=None):
        self.history, self.epoch, self.params, self.keras_params = {}, [], params, keras_params

    def _add(self, epoch, logs):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)


class Progress:
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
            print(f"\r{batch + 1}/{self.steps or 'Unknown'} - {text}", end="", file=sys.stderr, flush=True)

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


class Bridge:
    """What the engine's TrainingObserver calls (python/src/train.cpp), with the GIL held: the
    user's callbacks with Keras' epoch, batch and logs, the History, the progress, and the poll
    after each step (stop_training, or Ctrl-C, which the extension turns into _INTERRUPT)."""

    def __init__(self, model, callbacks, history, progress):
        self.model, self.callbacks, self.history, self.progress = model, callbacks, history, progress
        self.wants_batch_logs = progress.verbose == 1 or any(hasattr(c, "on_train_batch_end") for c in callbacks)
        self.wants_batch_begin = any(hasattr(c, "on_train_batch_begin") for c in callbacks)
        self.wants_test_batches = any(hasattr(c, hook) for c in callbacks
                                      for hook in ("on_test_batch_begin", "on_test_batch_end"))
        self.stopped_by = None  # the signal that interrupted the run (first_signal_decides)
        # While a validation stream is read (set by the engine around the read), a signal is
        # deferred: the validation completes whole, and the run's next poll interrupts it.
        self.defer_signals = False
        self.signal_deferred = False
        self.ended = threading.Event()  # set when the run has ended (running_fit), waited for at exit
        self.narrate = progress.verbose != 0  # the engine's own lines (engine:, model:, done:) follow verbose
        self.failure = None  # why the run stopped on an error it reports itself (a non-finite loss)
        self.final_weights = None  # the live weights after on_train_end, where a callback set them
        model.stop_training = False
        model.history, model._initial_epoch, model._weights_set_in_fit = history, None, False
        for method, value in (("set_model", model), ("set_params", history.keras_params)):  # Keras' order
            for callback in callbacks:
                if hasattr(callback, method):
                    getattr(callback, method)(value)

    def set_access(self, access):
        """The run's TrainingAccess (get_weights, set_weights, optimizer in the callbacks), or None."""
        self.model._access = access

    def _call(self, method, *args):
        for callback in self.callbacks:
            function = getattr(callback, method, None)
            if function is not None:
                try:
                    function(*args)
                except BaseException as error:
                    self._keep_live_weights()
                    try:
                        error.from_callback = True  # fit raises it as it is (run_plan.keyword_errors)
                    except AttributeError:
                        pass
                    raise

    def _keep_live_weights(self):
        """A callback raised: as a Keras model keeps what it trained, the model takes the run's
        weights as they are now (fit's caller gets them after the exception)."""
        if self.model._access is not None and self.final_weights is None:
            try:
                self.final_weights = self.model._access.read_parameters()
            except Exception:  # the callback's exception is the one to raise
                pass

    def on_train_begin(self):
        self._call("on_train_begin", {})
        if self.model._initial_epoch:  # keras.callbacks.BackupAndRestore found a backup
            raise ValueError(f"a callback asked to start at epoch {self.model._initial_epoch} (Keras' "
                             "BackupAndRestore after an interrupted fit): enhanced.Model.fit continues an "
                             "interrupted run with fit(x, y, out=run, resume=True)")

    def on_train_batch_begin(self, batch):
        self._call("on_train_batch_begin", batch, {})

    def on_epoch_begin(self, epoch):
        self.progress.epoch_begin(epoch)
        self._call("on_epoch_begin", epoch, {})

    def on_train_batch_end(self, batch, logs):
        self.progress.batch_end(batch, logs)
        self._call("on_train_batch_end", batch, logs)

    def on_test_begin(self):
        self._call("on_test_begin", {})

    def on_test_batch_begin(self, batch):
        self._call("on_test_batch_begin", batch, {})

    def on_test_batch_end(self, batch, logs):
        self._call("on_test_batch_end", batch, logs)

    def on_test_end(self, logs):
        self._call("on_test_end", logs)

    def on_epoch_end(self, epoch, logs):
        """History last, as Keras' CallbackList has it, so it records what callbacks add to logs."""
        self.progress.epoch_end(epoch, logs)
        self._call("on_epoch_end", epoch, logs)
        self.history._add(epoch, logs)

    def on_train_end(self, logs):
        self._call("on_train_end", logs)
        if self.model._weights_set_in_fit:  # e.g. EarlyStopping's restore_best_weights, after the last save
            self.final_weights = self.model._access.read_parameters()

    def on_failure(self, reason):
        self.failure = reason

    def poll(self):
        if _exiting.is_set() or self.signal_deferred:
            # Python is exiting (stop_at_exit), or a signal came while a validation stream was read:
            # the run saves and ends, no callback more
            return _INTERRUPT
        return _STOP if self.model.stop_training else _CONTINUE

    @contextlib.contextmanager
    def flushing(self):
        """However the run ends (an interrupt, an error: no on_train_end), the TensorBoard
        callbacks' events so far are written out."""
        # Imported here: `import enhanced` does not import enhanced.tensorboard, so
        # `python -m enhanced.tensorboard` runs it without runpy's "found in sys.modules" warning.
        from .callbacks import TensorBoard
        try:
            yield
        finally:
            for callback in self.callbacks:
                if isinstance(callback, TensorBoard):
                    callback.flush()


# At Python's exit (its exit functions run after the non-daemon threads are joined), a fit still
# running in another thread (a daemon thread's, or a non-daemon one that a Ctrl-C in the main
# thread's join left behind) would train on while the interpreter finalizes under it: its work
# lost, its objects never released. So stop_at_exit asks each to end (the bridge's poll interrupts
# it after its step: it saves and returns quietly) and waits for it, at most EXIT_WAIT seconds in
# all (a callback that never returns), and only then removes fit(out=None)'s folders, so that
# nothing lands in one as it goes.
EXIT_WAIT = 10.0
_exiting = threading.Event()  # the bridges' poll reads it
_running = set()  # the bridges of the fits running now
_temporaries = set()  # the TemporaryRun folders not yet removed


@contextlib.contextmanager
def running_fit(bridge):
    """fit's run, known to stop_at_exit while it lasts."""
    _running.add(bridge)
    try:
        yield
    finally:
        _running.discard(bridge)
        bridge.ended.set()


def exiting():
    """Whether Python's exit stopped the runs (fit then ends quietly)."""
    return _exiting.is_set()


@atexit.register
def stop_at_exit():
    _exiting.set()
    deadline = time.monotonic() + EXIT_WAIT
    for bridge in list(_running):
        bridge.ended.wait(max(0.0, deadline - time.monotonic()))
    if _running:
        # A run that could not stop in time (a callback that does not return) still holds its
        # objects (its TrainingAccess) as the interpreter finalizes under it: nanobind would report
        # them as leaked, which no reference counting of the bindings caused. Its report is off.
        sys.modules["enhanced._core"].set_leak_warnings(False)
    for temporary in list(_temporaries):
        temporary.remove()


class TemporaryRun:
    """fit(out=None)'s folder and its removal (Model._temporary_out): with the model, at the next
    fit(out=None), or at exit after the fits still running have ended (stop_at_exit)."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="enhanced-run-")
        _temporaries.add(self)

    def remove(self):
        _temporaries.discard(self)
        shutil.rmtree(self.path, True)


class Terminated(KeyboardInterrupt):
    """SIGTERM during fit: to the run, an interrupt (saved as Ctrl-C saves it)."""


# The signals fit takes over, each only where Python's default for it stands.
_DEFAULT_HANDLERS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))


@contextlib.contextmanager
def first_signal_decides(bridge):
    """SIGINT or SIGTERM during fit interrupts the run (the step reached is saved), as
    enhanced-train takes either; the first one decides how fit ends: KeyboardInterrupt for
    SIGINT, SystemExit(143) for SIGTERM (enhanced-train's status), and a later one (a Ctrl-C while
    the save runs) is ignored. In the main thread only (where Python's handlers run), each signal
    where Python's default for it stands; the handlers are put back when fit ends."""
    taken = [number for number, default in _DEFAULT_HANDLERS if signal.getsignal(number) is default]
    if threading.current_thread() is not threading.main_thread() or not taken:
        yield
        return

    def handler(signum, frame):
        if bridge.stopped_by is not None:
            return  # the first signal decided already
        bridge.stopped_by = signum
        if bridge.defer_signals:
            bridge.signal_deferred = True  # the engine's next poll interrupts the run
            return
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {number: signal.signal(number, handler) for number in taken}
    try:
        yield
    except KeyboardInterrupt as interrupt:
        if bridge.stopped_by != signal.SIGTERM:
            raise
        print(f"training terminated (SIGTERM): {interrupt}".rstrip(": "), file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        for number, theirs in previous.items():  # a signal pending meanwhile meets ours first
            signal.signal(number, theirs)
