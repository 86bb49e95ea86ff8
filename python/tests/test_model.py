"""enhanced.Model: the engine in process (enhanced._core), against the CLI on the same data."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import enhanced
from enhanced import Model, read_ebin
from enhanced.callbacks import TensorBoard

from conftest import run_app

FLAGS = dict(epochs=2, batch_size=16, hidden=4, embedding_dim=8)


@pytest.fixture(scope="module")
def demo(demo_data):
    """The demo sets as a user holds them: nested lists and labels, and the model's shape."""
    train, valid = read_ebin(demo_data / "train.ebin"), read_ebin(demo_data / "valid.ebin")
    vocab = max(train.max_token_id, valid.max_token_id) + 1
    labels = max(train.num_labels, valid.num_labels)
    return dict(dir=demo_data, train=(train.to_lists(), np.array(train.labels)),
                valid=(valid.to_lists(), np.array(valid.labels)), vocab=vocab, labels=labels,
                seq_len=train.seq_len)


def new_model(demo, **extra):
    return Model(vocab_size=demo["vocab"], num_labels=demo["labels"], seq_len=demo["seq_len"],
                 embedding_dim=FLAGS["embedding_dim"], hidden=FLAGS["hidden"], **extra)


def fit(demo, out, **options):
    model = new_model(demo, **options.pop("model", {}))
    history = model.fit(*demo["train"], validation_data=demo["valid"], epochs=FLAGS["epochs"],
                        batch_size=FLAGS["batch_size"], out=out, seed=3, verbose=0, lr=0.01, **options)
    return model, history


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Recorder:
    """A Keras-protocol callback that records every call."""

    def __init__(self, stop_at=None, interrupt_at=None):
        self.calls, self.model = [], None
        self.stop_at, self.interrupt_at, self.batches = stop_at, interrupt_at, 0

    def set_model(self, model):
        self.model = model

    def on_train_begin(self, logs=None):
        self.calls.append(("train_begin", None, logs))

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(("epoch_begin", epoch, logs))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("batch_end", batch, dict(logs)))
        self.batches += 1
        if self.batches == self.stop_at:
            self.model.stop_training = True
        if self.batches == self.interrupt_at:
            signal.raise_signal(signal.SIGINT)  # as a Ctrl-C between two steps

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch, dict(logs)))

    def on_train_end(self, logs=None):
        self.calls.append(("train_end", None, logs))


def test_fit_on_nested_lists_writes_the_cli_runs_checkpoints(demo, tmp_path):
    fit(demo, tmp_path / "fit")
    run_app("enhanced-train", "--data", demo["dir"] / "train.ebin", "--valid", demo["dir"] / "valid.ebin",
            "--out", tmp_path / "cli", "--epochs", FLAGS["epochs"], "--batch-size", FLAGS["batch_size"],
            "--seed", 3, "--lr", 0.01, "--hidden", FLAGS["hidden"], "--embedding-dim", FLAGS["embedding_dim"],
            "--vocab-size", demo["vocab"], "--num-labels", demo["labels"], "--quiet", "--device", "cpu")
    for name in ("last.safetensors", "best.safetensors"):
        assert read(tmp_path / "fit" / name) == read(tmp_path / "cli" / name), name


def test_callbacks_get_keras_calls_and_keys_and_history_matches_metrics(demo, tmp_path):
    recorder = Recorder()
    _, history = fit(demo, tmp_path / "run", callbacks=[recorder])
    kinds = [c[0] for c in recorder.calls]
    assert kinds[0] == "train_begin" and kinds[-1] == "train_end"
    batches = sum(1 for k in kinds if k == "batch_end")
    steps = -(-len(demo["train"][1]) // FLAGS["batch_size"])
    assert batches == FLAGS["epochs"] * steps
    for kind, _, logs in recorder.calls:
        if kind == "batch_end":
            assert set(logs) == {"loss", "accuracy", "lr"}
            assert all(np.isfinite(v) for v in logs.values())
        if kind == "epoch_end":
            assert {"loss", "accuracy", "lr", "val_loss", "val_accuracy", "val_f1"} <= set(logs)
    assert [c[1] for c in recorder.calls if c[0] == "epoch_begin"] == list(range(FLAGS["epochs"]))
    assert len(history.history["loss"]) == FLAGS["epochs"] == len(history.history["val_loss"])
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        lines = [json.loads(line) for line in f]
    # The epoch lines' loss is the epoch's mean, as the epoch_end logs' (metrics.jsonl: "kind").
    epoch_losses = [line["loss"] for line in lines if line["kind"] == "epoch"]
    assert len(epoch_losses) == FLAGS["epochs"], lines
    np.testing.assert_allclose(history.history["loss"], epoch_losses, rtol=1e-6)


@pytest.mark.parametrize("how", ["stop_training", "KeyboardInterrupt"])
def test_a_stopped_or_interrupted_fit_resumes_to_the_uninterrupted_bits(demo, tmp_path, how):
    fit(demo, tmp_path / "whole")
    cut = tmp_path / "cut"
    recorder = Recorder(stop_at=3) if how == "stop_training" else Recorder(interrupt_at=3)
    if how == "stop_training":
        fit(demo, cut, callbacks=[recorder])
    else:
        with pytest.raises(KeyboardInterrupt):
            fit(demo, cut, callbacks=[recorder])
    assert sum(1 for c in recorder.calls if c[0] == "batch_end") == 3
    assert os.path.exists(cut / "optimizer.safetensors"), "nothing to resume from"
    model, _ = fit(demo, cut, resume=True)
    assert read(tmp_path / "whole" / "last.safetensors") == read(cut / "last.safetensors")
    assert metric_kinds(cut) == metric_kinds(tmp_path / "whole")  # the stop's validation line is cut


def metric_kinds(run):
    with open(run / "metrics.jsonl") as f:
        return [json.loads(line)["kind"] for line in f]


def test_a_stop_within_an_epoch_validates_and_ends_it_as_keras_does(demo, tmp_path):
    assert steps_per_epoch(demo) > 1
    recorder = Recorder(stop_at=steps_per_epoch(demo) + 1)  # the second epoch's first batch
    model, history = fit(demo, tmp_path / "cut", callbacks=[recorder])
    kinds = [c[0] for c in recorder.calls]
    assert kinds[-3:] == ["batch_end", "epoch_end", "train_end"] and history.epoch == [0, 1]
    last_batch, (_, epoch, logs), (_, _, end_logs) = recorder.calls[-3:]
    assert epoch == 1 and end_logs == logs == {key: values[-1] for key, values in history.history.items()}
    assert logs["loss"] == last_batch[2]["loss"] and logs["accuracy"] == last_batch[2]["accuracy"]
    # The validation is the stopped weights' (saved in last.safetensors) on validation_data.
    evaluated = model.evaluate(*demo["valid"], batch_size=FLAGS["batch_size"])
    assert logs["val_loss"] == pytest.approx(evaluated["loss"], rel=1e-6)
    assert logs["val_accuracy"] == pytest.approx(evaluated["accuracy"], rel=1e-9)
    with open(tmp_path / "cut" / "metrics.jsonl") as f:
        last_line = json.loads(f.readlines()[-1])
    assert last_line["kind"] == "valid" and last_line["step"] == steps_per_epoch(demo) + 1
    assert last_line["valid_loss"] == logs["val_loss"]


def test_evaluate_and_predict_agree_with_the_apps(demo, tmp_path):
    model, _ = fit(demo, tmp_path / "run")
    result = model.evaluate(*demo["valid"])
    cli = json.loads(run_app("enhanced-eval", "--data", demo["dir"] / "valid.ebin", "--checkpoint",
                             model.checkpoint, "--json", "--device", "cpu").stdout)
    for key in ("loss", "accuracy", "macro_f1"):
        assert result[key] == pytest.approx(cli[key], rel=1e-12, abs=1e-12), key
    probabilities = model.predict(demo["valid"][0])
    logits = model.predict(demo["valid"][0], logits=True)
    assert probabilities.shape == logits.shape == (len(demo["valid"][1]), demo["labels"])
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert (probabilities.argmax(axis=1) == logits.argmax(axis=1)).all()
    accuracy = float((logits.argmax(axis=1) == demo["valid"][1]).mean())
    assert accuracy == pytest.approx(result["accuracy"])
    loaded = Model.load(model.checkpoint)
    np.testing.assert_array_equal(loaded.predict(demo["valid"][0], logits=True), logits)


def test_label_names_round_trip_into_predict_labels(demo, tmp_path):
    names = [f"label-{i}" for i in range(demo["labels"])]
    model, _ = fit(demo, tmp_path / "run", model=dict(label_names=names))
    loaded = Model.load(model.checkpoint)
    assert loaded.label_names == names
    predicted = loaded.predict_labels(demo["valid"][0])
    indices = loaded.predict(demo["valid"][0], logits=True).argmax(axis=1)
    assert predicted == [names[i] for i in indices]


def test_tensorboard_callback_reads_back_the_fit_curves(demo, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    _, history = fit(demo, tmp_path / "run", callbacks=[TensorBoard(tmp_path / "logs")])
    for folder, key in (("train", "loss"), ("validation", "val_loss")):
        events = EventAccumulator(str(tmp_path / "logs" / folder))
        events.Reload()
        values = [e.value for e in events.Scalars("epoch_loss")]
        np.testing.assert_allclose(values, history.history[key], rtol=1e-6)


def test_bad_data_and_bad_flags_are_one_clear_error(demo, tmp_path):
    model = new_model(demo)
    lists, labels = demo["train"]
    bad = [list(sample) for sample in lists[:4]]
    bad[2] = bad[2][:-1]
    with pytest.raises(ValueError, match="sample 2"):
        model.fit(bad, labels[:4], out=tmp_path / "a", verbose=0)
    with pytest.raises(ValueError, match="^fit: lr: must be greater than 0"):
        model.fit(lists, labels, out=tmp_path / "b", verbose=0, lr=-1)
    with pytest.raises(ValueError, match="this model has no weights"):
        model.predict(lists)
    assert enhanced.Model is Model


# ---- what fit continues from, how a resume picks its plan, when a stop or a Ctrl-C lands ----

def cli_run(demo, out, *flags, epochs=FLAGS["epochs"]):
    """enhanced-train on the demo files with fit()'s settings (seed 3, lr 0.01)."""
    run_app("enhanced-train", "--data", demo["dir"] / "train.ebin", "--valid", demo["dir"] / "valid.ebin",
            "--out", out, "--epochs", epochs, "--batch-size", FLAGS["batch_size"], "--seed", 3, "--lr", 0.01,
            "--hidden", FLAGS["hidden"], "--embedding-dim", FLAGS["embedding_dim"], "--vocab-size", demo["vocab"],
            "--num-labels", demo["labels"], "--quiet", "--device", "cpu", *flags)


def fit_more(model, demo, out, **options):
    """One more epoch of `model` on the demo set, as fit() trains."""
    return model.fit(*demo["train"], validation_data=demo["valid"], epochs=1, batch_size=FLAGS["batch_size"],
                     out=out, seed=3, verbose=0, lr=0.01, **options)


def test_fit_continues_from_the_models_weights_as_init_from(demo, tmp_path):
    model, _ = fit(demo, tmp_path / "first")
    first = tmp_path / "first" / "last.safetensors"
    cli_run(demo, tmp_path / "cli", "--init-from", first, epochs=1)
    loaded = Model.load(first)
    fit_more(loaded, demo, tmp_path / "loaded")
    fit_more(model, demo, tmp_path / "again")  # a second fit on the same Model
    expected = read(tmp_path / "cli" / "last.safetensors")
    assert read(tmp_path / "loaded" / "last.safetensors") == expected
    assert read(tmp_path / "again" / "last.safetensors") == expected
    fresh = tmp_path / "fresh"
    cli_run(demo, fresh, epochs=1)
    assert read(fresh / "last.safetensors") != expected  # the test can tell a continued run from a new one


class StopAtEpochEnd(Recorder):
    def __init__(self, epoch):
        super().__init__()
        self.stop_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.stop_epoch:
            self.model.stop_training = True


def steps_per_epoch(demo):
    return -(-len(demo["train"][1]) // FLAGS["batch_size"])


def test_stop_training_at_an_epochs_end_ends_the_run_there(demo, tmp_path):
    recorder = StopAtEpochEnd(0)
    _, history = fit(demo, tmp_path / "stopped", callbacks=[recorder])
    assert sum(1 for c in recorder.calls if c[0] == "batch_end") == steps_per_epoch(demo)
    assert history.epoch == [0]
    cli_run(demo, tmp_path / "one", epochs=1)
    for name in ("last.safetensors", "best.safetensors"):
        assert read(tmp_path / "stopped" / name) == read(tmp_path / "one" / name), name


def test_a_resume_takes_the_keywords_not_given_from_the_run(demo, tmp_path):
    cut = tmp_path / "cut"
    model = new_model(demo)
    model.fit(*demo["train"], validation_data=demo["valid"], epochs=3, batch_size=FLAGS["batch_size"], out=cut,
              seed=3, verbose=0, lr=0.01, callbacks=[StopAtEpochEnd(0)])
    history = new_model(demo).fit(*demo["train"], validation_data=demo["valid"], out=cut, resume=True, verbose=0)
    assert history.epoch == [1, 2]
    assert history.params["epochs"] == 3 and history.params["batch_size"] == FLAGS["batch_size"]
    cli_run(demo, tmp_path / "whole", epochs=3)
    assert read(cut / "last.safetensors") == read(tmp_path / "whole" / "last.safetensors")


class InterruptIn(Recorder):
    """Ctrl-C inside on_train_end, or inside the last on_epoch_end."""

    def __init__(self, hook, last_epoch):
        super().__init__()
        self.hook, self.last_epoch, self.finished = hook, last_epoch, False

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if self.hook == "on_epoch_end" and epoch == self.last_epoch:
            signal.raise_signal(signal.SIGINT)
            self.finished = True

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        if self.hook == "on_train_end":
            signal.raise_signal(signal.SIGINT)
            self.finished = True


@pytest.mark.parametrize("hook", ["on_epoch_end", "on_train_end"])
def test_ctrl_c_in_the_last_callbacks_propagates_after_the_save(demo, tmp_path, hook):
    callback = InterruptIn(hook, FLAGS["epochs"] - 1)
    with pytest.raises(KeyboardInterrupt):
        fit(demo, tmp_path / "run", callbacks=[callback])
    assert not callback.finished  # the KeyboardInterrupt cut the callback short, as in Keras
    cli_run(demo, tmp_path / "cli")
    assert read(tmp_path / "run" / "last.safetensors") == read(tmp_path / "cli" / "last.safetensors")


class ChangeDirectory(Recorder):
    def __init__(self, to):
        super().__init__()
        self.to = to

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        os.chdir(self.to)


def test_a_model_owns_its_weights_and_resolves_out_once(demo, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    model, _ = fit(demo, "run", callbacks=[ChangeDirectory(elsewhere)])
    assert not (elsewhere / "run").exists()
    cli_run(demo, tmp_path / "cli")
    assert read(tmp_path / "run" / "last.safetensors") == read(tmp_path / "cli" / "last.safetensors")
    before = model.predict(demo["valid"][0], logits=True)
    other = new_model(demo)
    other.fit(*demo["train"], validation_data=demo["valid"], epochs=4, out=tmp_path / "run", resume=True,
              verbose=0)
    assert read(tmp_path / "run" / "last.safetensors") != read(tmp_path / "cli" / "last.safetensors")
    np.testing.assert_array_equal(model.predict(demo["valid"][0], logits=True), before)


def misaligned_batches(x, y, size):
    """(x, y) batches whose first y is one label short and the second one long: as many labels in all."""
    cuts = [0, size - 1, 2 * size] + list(range(3 * size, len(y), size)) + [len(y)]
    for i, start in enumerate(range(0, len(y), size)):
        yield x[start:start + size], y[cuts[i]:cuts[i + 1]]


def with_first_field(lists, value):
    """Four samples, the first one's first field replaced by `value`."""
    first = [[list(field) for field in position] for position in lists[0]]
    first[0][0] = value
    return [first] + list(lists[1:4])


def bad_arguments(demo, out):
    """(what, call, the argument the message must name): each must be one ValueError before any work."""
    lists, labels = demo["train"]
    model = new_model(demo)
    csr = read_ebin(demo["dir"] / "train.ebin").to_csr()
    transposed = dict(csr, identifier_lengths=np.asarray(csr["identifier_lengths"]).T.copy())
    common = dict(out=out, verbose=0)
    return [
        ("seq_len", lambda: Model(demo["vocab"], demo["labels"], demo["seq_len"] + 1, embedding_dim=8,
                                  hidden=4).fit(lists, labels, **common), "seq_len"),
        ("transposed CSR", lambda: model.fit(transposed, labels, **common), "identifier_lengths"),
        ("generator", lambda: model.fit(misaligned_batches(lists, labels, 16), **common), "batch 0"),
        ("bool id", lambda: model.fit(with_first_field(lists, [True]), labels[:4], **common), "bool"),
        ("bytes ids", lambda: model.fit(with_first_field(lists, b"\x01"), labels[:4], **common), "bytes"),
        ("class_weight key", lambda: model.fit(lists, labels, class_weight={demo["labels"]: 2.0}, **common),
         "class_weight"),
        ("unknown keyword", lambda: model.fit(lists, labels, data="x.ebin", **common), "data"),
        ("batch_size=0", lambda: model.fit(lists, labels, batch_size=0, **common), "batch_size"),
        ("help", lambda: model.fit(lists, labels, help=True, **common), "help"),
        ("validation_data", lambda: model.fit(lists, labels, validation_data=(lists, labels, labels), **common),
         "validation_data"),
        ("validation_data list", lambda: model.fit(lists, labels, validation_data=[lists, labels], **common),
         "validation_data"),
        ("out under a file", lambda: model.fit(lists, labels, out=demo["dir"] / "train.ebin" / "run", verbose=0),
         "out: .* is not a folder"),
        ("lr=True", lambda: model.fit(lists, labels, lr=True, **common), "lr takes a value"),
        ("lr=False", lambda: model.fit(lists, labels, lr=False, **common), "lr takes a value"),
        ("drop_last=1.5", lambda: model.fit(lists, labels, drop_last=1.5, **common), "drop_last must be True or False"),
        ("class_weight path", lambda: model.fit(lists, labels, class_weight="/etc/passwd", **common),
         "class_weight must be"),
        ("out=5", lambda: model.fit(lists, labels, out=5, verbose=0), "out must be"),
        ("callbacks=5", lambda: model.fit(lists, labels, callbacks=5, **common), "callbacks must be a list"),
        ("callbacks=[5]", lambda: model.fit(lists, labels, callbacks=[5], **common), r"callbacks: item 0 \(int\)"),
        ("verbose=7", lambda: model.fit(lists, labels, out=out, verbose=7), "verbose must be"),
        ("shuffle='yes'", lambda: model.fit(lists, labels, shuffle="yes", **common), "shuffle must be True or False"),
        ("y short", lambda: model.fit(lists, labels[:-1], **common), r"y: \d+ labels for the \d+ samples of x"),
        ("dense array", lambda: model.fit(np.zeros((4, demo["seq_len"], 3), np.int32), labels[:4], **common),
         r"x: a dense ndarray of shape \(4, \d+, 3\)"),
        ("dense tensor", lambda: model.fit(DenseTensor((4, demo["seq_len"], 3)), labels[:4], **common),
         r"x: a dense DenseTensor .* tf.RaggedTensor"),
    ]


class DenseTensor:
    """What fit sees of a dense tf.Tensor: a shape, a dtype, iterable over its first axis."""

    def __init__(self, shape):
        self.shape, self.dtype = shape, "int32"

    def __iter__(self):
        return iter(np.zeros(self.shape, np.int32))


class FitAgain(Recorder):
    """Fits its model again from on_epoch_end: a second run inside the first."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.fit(*self.data, epochs=1, verbose=0)


def test_a_fit_inside_the_running_fit_is_refused(demo, tmp_path):
    again = FitAgain()
    again.data = demo["train"]
    with pytest.raises(ValueError, match="training already"):
        fit(demo, tmp_path / "run", callbacks=[again])


def test_bad_arguments_are_one_value_error_before_any_work(demo, tmp_path):
    for what, call, name in bad_arguments(demo, tmp_path / "out"):
        with pytest.raises(ValueError, match=name):
            call()
        assert not (tmp_path / "out").exists(), what


def test_predict_and_evaluate_check_batch_size_and_threads(demo, tmp_path):
    model, _ = fit(demo, tmp_path / "run")
    x, y = demo["valid"]
    for options, name in ((dict(batch_size=0), "batch_size"), (dict(batch_size=-1), "batch_size"),
                          (dict(threads=-1), "threads"), (dict(threads=1.5), "threads")):
        with pytest.raises(ValueError, match=name):
            model.predict(x, **options)
        with pytest.raises(ValueError, match=name):
            model.evaluate(x, y, **options)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_out_is_refused_by_name(demo, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="out"):
            new_model(demo).fit(*demo["train"], out=locked / "run", verbose=0)
    finally:
        locked.chmod(0o755)


def test_a_resume_refuses_other_label_names_or_class_weights(demo, tmp_path):
    names = [f"label-{i}" for i in range(demo["labels"])]
    weights = {0: 2.0}
    recorder = Recorder(stop_at=3)
    fit(demo, tmp_path / "run", callbacks=[recorder], class_weight=weights, model=dict(label_names=names))
    with pytest.raises(ValueError, match="label_names"):
        fit(demo, tmp_path / "run", resume=True, class_weight=weights, model=dict(label_names=names[::-1]))
    with pytest.raises(ValueError, match="class_weight"):
        fit(demo, tmp_path / "run", resume=True, class_weight={0: 3.0}, model=dict(label_names=names))
    model, _ = fit(demo, tmp_path / "run", resume=True, class_weight=weights, model=dict(label_names=names))
    assert model.label_names == names


def test_label_names_and_class_weights_reach_the_engine_as_values(demo, tmp_path):
    names = [f"label-{i}" for i in range(demo["labels"])]
    weights = [1.0 + i for i in range(demo["labels"])]
    (tmp_path / "weights.txt").write_text("".join(f"{w}\n" for w in weights))
    (tmp_path / "names.txt").write_text("".join(f"{n}\n" for n in names))
    fit(demo, tmp_path / "fit", class_weight=dict(enumerate(weights)), model=dict(label_names=names))
    # fit's class_weight is Keras' (divided by the batch size): enhanced-train's --class-weight-mean batch.
    cli_run(demo, tmp_path / "cli", "--class-weights", tmp_path / "weights.txt", "--class-weight-mean", "batch",
            "--label-names", tmp_path / "names.txt")
    assert read(tmp_path / "fit" / "last.safetensors") == read(tmp_path / "cli" / "last.safetensors")
    assert sorted(os.listdir(tmp_path / "fit")) == sorted(os.listdir(tmp_path / "cli"))
    with pytest.raises(ValueError, match="^fit: lr: must be greater than 0"):
        new_model(demo, label_names=names).fit(*demo["train"], out=tmp_path / "refused", lr=-1,
                                               class_weight=weights, verbose=0)
    assert not (tmp_path / "refused").exists()


# ---- signals and threads: SIGTERM, curves kept on an interrupt, Python exiting mid-fit ----

def test_tensorboard_callback_keeps_its_batches_after_ctrl_c(demo, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    with pytest.raises(KeyboardInterrupt):
        fit(demo, tmp_path / "run", callbacks=[TensorBoard(tmp_path / "logs"), Recorder(interrupt_at=3)])
    events = EventAccumulator(str(tmp_path / "logs" / "train"))
    events.Reload()
    assert [e.step for e in events.Scalars("batch_loss")] == [1, 2, 3]
    # The resumed run's curves go on at step 4, where the interrupted one stopped: no step twice.
    Model.load(tmp_path / "run" / "last.safetensors").fit(*demo["train"], out=tmp_path / "run", resume=True,
                                                          validation_data=demo["valid"], verbose=0,
                                                          callbacks=[TensorBoard(tmp_path / "logs")])
    events = EventAccumulator(str(tmp_path / "logs" / "train"))
    events.Reload()
    total = FLAGS["epochs"] * steps_per_epoch(demo)
    assert [e.step for e in events.Scalars("batch_loss")] == list(range(1, total + 1))


SCRIPT = """
import os, signal, sys, threading, time
import numpy as np
from enhanced import Model, read_ebin
train = read_ebin(sys.argv[1])
x, y = train.to_lists(), np.array(train.labels)
model = Model(vocab_size={vocab}, num_labels={labels}, seq_len={seq_len}, embedding_dim=8, hidden=4)
"""


def run_script(demo, tmp_path, body):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(**demo) + body)
    return subprocess.run([sys.executable, script, demo["dir"] / "train.ebin", tmp_path / "run"],
                          capture_output=True, text=True, timeout=300)


def test_sigterm_during_fit_saves_then_ends_with_143(demo, tmp_path):
    result = run_script(demo, tmp_path, """
class Term:
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            os.kill(os.getpid(), signal.SIGTERM)
model.fit(x, y, epochs=2, batch_size=16, seed=3, lr=0.01, out=sys.argv[2], verbose=0, callbacks=[Term()])
""")
    assert result.returncode == 143, result.stderr
    assert "saved" in result.stderr
    assert os.path.exists(tmp_path / "run" / "optimizer.safetensors")
    model = new_model(demo)
    model.fit(*demo["train"], out=tmp_path / "run", resume=True, verbose=0)
    whole = tmp_path / "whole"
    run_app("enhanced-train", "--data", demo["dir"] / "train.ebin", "--out", whole, "--epochs", 2,
            "--batch-size", 16, "--seed", 3, "--lr", 0.01, "--hidden", 4, "--embedding-dim", 8,
            "--vocab-size", demo["vocab"], "--num-labels", demo["labels"], "--quiet", "--device", "cpu")
    assert read(tmp_path / "run" / "last.safetensors") == read(whole / "last.safetensors")


# A script's end: fit in a daemon thread with the callback `callback`, then the main thread ends
# once the event `event` is set.
def daemon_fit_then_exit(callback, event):
    return f"""
thread = threading.Thread(target=model.fit, args=(x, y), kwargs=dict(epochs=50, out=sys.argv[2], verbose=0,
                          callbacks=[{callback}()]), daemon=True)
thread.start()
{event}.wait()
print("exiting")
"""


def test_python_exiting_while_fit_runs_in_a_daemon_thread_exits_cleanly(demo, tmp_path):
    result = run_script(demo, tmp_path, """
started = threading.Event()
class Started:
    def on_train_batch_end(self, batch, logs=None):
        started.set()
""" + daemon_fit_then_exit("Started", "started"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exiting"
    assert "terminate called" not in result.stderr


def test_python_exiting_while_a_daemon_fits_callback_waits_without_the_gil_exits_cleanly(demo, tmp_path):
    """The callback releases the GIL (a blocking read, as time.sleep does) and is woken while the
    interpreter finalizes: CPython ends the thread as it takes the GIL back (pthread_exit), and
    that unwinding released a thread state no longer current, a fatal error that aborted the
    process. A garbage cycle with the gc disabled is collected by finalization's own collection,
    after finalizing starts: its __del__ wakes the callback at that moment every time."""
    result = run_script(demo, tmp_path, """
import gc
read_end, write_end = os.pipe()
class WakeAtFinalization:
    def __init__(self, fd):
        self.fd, self.write, self.sleep, self.finalizing = fd, os.write, time.sleep, sys.is_finalizing
    def __del__(self):
        self.write(1, b"woken while finalizing\\n" if self.finalizing() else b"woken early\\n")
        self.write(self.fd, b"x")
        self.sleep(0.5)  # the daemon thread meets the finalizing interpreter meanwhile
waiting = threading.Event()
class WaitWithoutTheGil:
    def on_train_batch_end(self, batch, logs=None):
        waiting.set()
        os.read(read_end, 1)
import enhanced.fit_hooks
enhanced.fit_hooks.EXIT_WAIT = 0.5  # the exit's wait for the run, which cannot stop in its callback
gc.disable()
wake = WakeAtFinalization(write_end)
wake.cycle = wake
del wake
""" + daemon_fit_then_exit("WaitWithoutTheGil", "waiting"))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["exiting", "woken while finalizing"]  # print's is buffered
    assert "Fatal Python error" not in result.stderr


def test_weights_from_another_thread_while_fit_runs_are_refused(demo, tmp_path):
    """Another thread's set_weights and get_weights went through the run's TrainingAccess while
    the engine trained, or after the run had freed it (a segfault): now refused by name. In a
    subprocess, so that a crash fails the test. The callback holds the run until the other thread
    has made a whole round of calls that began inside the fit, so the refusals are certain."""
    result = run_script(demo, tmp_path, """
model.fit(x, y, epochs=1, batch_size=8, verbose=0)
weights = model.get_weights()
rounds, done, refused = threading.Event(), False, set()
def other():
    while not done:
        for call in (lambda: model.set_weights(weights), model.get_weights,
                     lambda: model.optimizer.learning_rate):
            try:
                call()
            except ValueError as e:
                refused.add(str(e))
        rounds.set()
class WaitForTheOtherThread:
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            for _ in range(2):  # the round that ends after the second clear began after the first
                rounds.clear()
                rounds.wait()
thread = threading.Thread(target=other)
thread.start()
model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=[WaitForTheOtherThread()])
done = True
thread.join()
print("\\n".join(sorted(refused)))
""")
    assert result.returncode == 0, result.stderr
    another = "fit is running in another thread; call it from one of fit's callbacks"
    during = {f"{what}: {another}" for what in ("set_weights", "get_weights", "optimizer.learning_rate")}
    outside = "optimizer.learning_rate is the running fit's: it exists in fit's callbacks only"
    refused = set(result.stdout.splitlines())
    assert during <= refused <= during | {outside}
