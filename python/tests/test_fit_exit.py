"""How Model.fit ends on a signal that lands in any call the engine makes into Python, and at
Python's exit while a fit runs in another thread: the step reached is saved, nothing leaks."""
import os

import pytest

from test_model import demo, new_model, run_script  # noqa: F401 (demo is a fixture)


def test_a_signal_as_the_run_gives_or_takes_back_its_access_interrupts_it(demo, tmp_path):
    """The engine's set_access call went around the interrupt handling of the other hooks: a
    SIGTERM there escaped fit as a raw fit_hooks.Terminated (exit 1), a Ctrl-C as a bare
    KeyboardInterrupt with nothing said of the save. The signal is sent from inside set_access."""
    result = run_script(demo, tmp_path, """
from enhanced import fit_hooks
original = fit_hooks.Bridge.set_access
for when in ("start", "end"):
    for name in ("SIGINT", "SIGTERM"):
        def set_access(self, access):
            if (access is None) == (when == "end"):
                os.kill(os.getpid(), getattr(signal, name))  # handled at the next bytecode, in here
                sum(range(1000))
            original(self, access)
        fit_hooks.Bridge.set_access = set_access
        out = sys.argv[2] + when + name
        try:
            model.fit(x, y, epochs=2, batch_size=16, out=out, verbose=0)
            print(when, name, "returned")
        except SystemExit as e:
            print(when, name, "SystemExit", e.code, os.path.exists(os.path.join(out, "last.safetensors")))
        except KeyboardInterrupt as e:
            print(when, name, type(e).__name__, "saved in" in str(e),
                  os.path.exists(os.path.join(out, "last.safetensors")))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "start SIGINT KeyboardInterrupt True True", "start SIGTERM SystemExit 143 True",
        "end SIGINT KeyboardInterrupt True True", "end SIGTERM SystemExit 143 True"], result.stderr
    assert result.stderr.count("training terminated (SIGTERM): the step reached is saved in") == 2


def test_a_signal_inside_the_users_generator_saves_the_step_reached(demo, tmp_path):
    """A Ctrl-C or SIGTERM raised in the user's iterable while the engine waits for the next
    batch escaped fit unsaved (a bare KeyboardInterrupt, out holding metrics.jsonl only). Here the
    iterable's second pass (epoch 2's, read in fit's thread) sends it: the first epoch is saved."""
    result = run_script(demo, tmp_path, """
class Batches:
    def __init__(self, name):
        self.name, self.passes = name, 0
    def __iter__(self):
        self.passes += 1
        if self.passes == 2:
            os.kill(os.getpid(), getattr(signal, self.name))  # handled at the next bytecode, in here
            sum(range(1000))
        for start in range(0, 64, 16):
            yield x[start:start + 16], y[start:start + 16]
for name in ("SIGINT", "SIGTERM"):
    out = sys.argv[2] + name
    try:
        model.fit(Batches(name), epochs=3, out=out, verbose=0)
        print(name, "returned")
    except SystemExit as e:
        print(name, "SystemExit", e.code, os.path.exists(os.path.join(out, "optimizer.safetensors")))
    except KeyboardInterrupt as e:
        print(name, type(e).__name__, "saved in" in str(e), os.path.exists(os.path.join(out, "optimizer.safetensors")))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        print(name, "epoch ends", sum('"kind":"epoch"' in line.replace(" ", "") for line in f))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "SIGINT KeyboardInterrupt True True", "SIGINT epoch ends 1",
        "SIGTERM SystemExit 143 True", "SIGTERM epoch ends 1"], result.stderr


def test_an_exception_of_the_users_generator_leaves_fit_unchanged(demo, tmp_path):
    class Mine(Exception):
        pass

    def batches():
        x, y = demo["train"]
        for start in range(0, 48, 16):
            yield x[start:start + 16], y[start:start + 16]
        raise Mine("the user's own")

    with pytest.raises(Mine, match="the user's own") as raised:
        new_model(demo).fit(batches(), epochs=1, out=tmp_path / "run", verbose=0)
    assert type(raised.value) is Mine


def test_ctrl_c_while_main_joins_a_fit_thread_saves_the_run_at_exit(demo, tmp_path):
    """Ctrl-C in the main thread's join of a non-daemon thread running fit: Python's exit went on
    under the running fit (the interrupted join no longer waits for it): nothing saved, and
    nanobind's leak report. At exit the run is now asked to stop, saves and is waited for."""
    result = run_script(demo, tmp_path, """
class CtrlCInMain:
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2 and model.history.epoch == []:
            os.kill(os.getpid(), signal.SIGINT)  # Python's handler runs in the main thread, in join
        time.sleep(0.01)
thread = threading.Thread(target=model.fit, args=(x, y), kwargs=dict(epochs=50, batch_size=16, out=sys.argv[2],
                          verbose=0, callbacks=[CtrlCInMain()]))
thread.start()
try:
    thread.join()
except KeyboardInterrupt:
    print("interrupted", flush=True)
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["interrupted"]
    assert os.path.exists(tmp_path / "run" / "last.safetensors")
    assert "leaked" not in result.stderr, result.stderr


def test_python_exiting_while_a_daemon_fits_saves_it_and_leaks_nothing(demo, tmp_path):
    """The daemon thread's run went on while the interpreter finalized: nanobind reported its
    objects (the run's TrainingAccess) as leaked, and its work since the last save was lost."""
    result = run_script(demo, tmp_path, """
started = threading.Event()
class Started:
    def on_train_batch_end(self, batch, logs=None):
        started.set()
threading.Thread(target=model.fit, args=(x, y), kwargs=dict(epochs=50, batch_size=16, out=sys.argv[2], verbose=0,
                 callbacks=[Started()]), daemon=True).start()
started.wait()
""")
    assert result.returncode == 0, result.stderr
    assert os.path.exists(tmp_path / "run" / "last.safetensors")
    assert result.stderr == ""


def test_python_exiting_while_a_daemon_fit_cannot_stop_in_time_reports_no_leak(demo, tmp_path):
    """A run stuck in a callback past the exit's wait still holds its objects as the interpreter
    finalizes: nanobind reported them as leaked, though no binding leaked them."""
    result = run_script(demo, tmp_path, """
import enhanced.fit_hooks
enhanced.fit_hooks.EXIT_WAIT = 0.2  # the exit's wait for the run (10 s by default)
stuck = threading.Event()
class Stuck:
    def on_train_batch_end(self, batch, logs=None):
        stuck.set()
        time.sleep(60)
threading.Thread(target=model.fit, args=(x, y), kwargs=dict(epochs=50, batch_size=16, out=sys.argv[2], verbose=0,
                 callbacks=[Stuck()]), daemon=True).start()
stuck.wait()
""")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_a_ctrl_c_while_a_validation_stream_is_read_saves_after_that_validation(demo, tmp_path):
    """The validation in progress completes (its numbers are whole, as a resume replays them), then
    the run saves and fit raises KeyboardInterrupt."""
    result = run_script(demo, tmp_path, """
import json
class Valid:
    passes = 0
    def __iter__(self):
        Valid.passes += 1
        for start in range(0, 48, 16):
            if Valid.passes == 2 and start == 16:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # read in fit's reading thread: the main thread waits for it
            yield x[start:start + 16], y[start:start + 16]
out = sys.argv[2]
try:
    model.fit(x[:64], y[:64], batch_size=16, epochs=3, validation_data=Valid(), out=out, verbose=0)
    print("returned")
except KeyboardInterrupt as e:
    print(type(e).__name__, "saved in" in str(e))
with open(os.path.join(out, "metrics.jsonl")) as f:
    lines = [json.loads(line) for line in f]
print([(line["epoch"], "valid_loss" in line) for line in lines if line["kind"] == "epoch"])
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["KeyboardInterrupt True", "[(1, True), (2, True)]"], result.stderr
