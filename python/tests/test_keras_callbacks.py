"""Keras' own callbacks and fit keywords with enhanced.Model.fit: what Keras' model interface
offers them (get_weights, set_weights, optimizer.learning_rate, save, save_weights, load_weights)
reads and writes the engine's live run, and each callback does what it does in keras.Model.fit.
The tests of Keras' callbacks skip where TensorFlow is not installed."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from enhanced import Model, read_ebin  # noqa: E402
from enhanced.checkpoint import load_checkpoint, parameter_shapes  # noqa: E402

FLAGS = dict(batch_size=16, hidden=4, embedding_dim=8)


def keras_or_skip():
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install tensorflow-cpu)")
    import keras
    return keras


@pytest.fixture(scope="module")
def demo(demo_data):
    train, valid = read_ebin(demo_data / "train.ebin"), read_ebin(demo_data / "valid.ebin")
    return dict(train=(train.to_lists(), np.array(train.labels)), valid=(valid.to_lists(), np.array(valid.labels)),
                vocab=max(train.max_token_id, valid.max_token_id) + 1, labels=max(train.num_labels, valid.num_labels),
                seq_len=train.seq_len, ragged=valid.to_ragged() if _has_tf() else None)


def _has_tf():
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


def new_model(demo):
    return Model(vocab_size=demo["vocab"], num_labels=demo["labels"], seq_len=demo["seq_len"],
                 embedding_dim=FLAGS["embedding_dim"], hidden=FLAGS["hidden"])


def fit(demo, out, epochs=2, **options):
    model = new_model(demo)
    options.setdefault("lr", 0.01)
    history = model.fit(*demo["train"], validation_data=demo["valid"], epochs=epochs,
                        batch_size=FLAGS["batch_size"], out=out, seed=3, verbose=0, **options)
    return model, history


def read(path):
    with open(path, "rb") as f:
        return f.read()


class EpochWeights:
    """Records get_weights and the logs at each epoch's end (a plain callback)."""

    def __init__(self):
        self.weights, self.logs = [], []

    def set_model(self, model):
        self.model = model

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())
        self.logs.append(dict(logs))


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# ---- the interface, without TensorFlow ----------------------------------------------------------

def test_get_weights_is_the_checkpoints_tensors_and_set_weights_round_trips_exactly(demo, tmp_path):
    model, _ = fit(demo, tmp_path / "run")
    weights = model.get_weights()
    _, tensors = load_checkpoint(tmp_path / "run" / "last.safetensors")
    assert [w.dtype for w in weights] == [np.float32] * len(weights)
    assert same(weights, [tensors[name] for name in parameter_shapes(model.config)])
    predicted = model.predict(demo["valid"][0])
    model.set_weights(weights)
    assert same(model.get_weights(), weights)
    assert np.array_equal(model.predict(demo["valid"][0]), predicted)
    with pytest.raises(ValueError, match="set_weights: expected 11 arrays"):
        model.set_weights(weights[:-1])
    with pytest.raises(ValueError, match="set_weights: dense.bias has shape"):
        model.set_weights(weights[:-1] + [np.zeros(99, np.float32)])


def test_live_weights_written_back_unchanged_change_no_bit(demo, tmp_path):
    fit(demo, tmp_path / "plain")

    class RoundTrip(EpochWeights):
        def on_train_batch_begin(self, batch, logs=None):
            weights = self.model.get_weights()
            self.model.set_weights(weights)
            assert same(self.model.get_weights(), weights)

    recorder = RoundTrip()
    fit(demo, tmp_path / "round-trip", callbacks=[recorder])
    for name in ("last.safetensors", "best.safetensors", "optimizer.safetensors"):
        assert read(tmp_path / "plain" / name) == read(tmp_path / "round-trip" / name), name
    # Read at an epoch's end, the live weights are the checkpoint saved there.
    _, tensors = load_checkpoint(tmp_path / "round-trip" / "last.safetensors")
    assert same(recorder.weights[-1], list(tensors.values()))


def test_predict_and_evaluate_in_a_callback_of_the_first_fit_use_the_live_weights(demo, tmp_path):
    class Infer:
        def __init__(self):
            self.seen = []

        def set_model(self, model):
            self.model = model

        def on_epoch_end(self, epoch, logs=None):
            evaluated = self.model.evaluate(*demo["valid"], batch_size=FLAGS["batch_size"])
            self.seen.append((dict(logs), evaluated, self.model.predict(demo["valid"][0])))

    infer = Infer()
    model, _ = fit(demo, tmp_path / "run", epochs=2, callbacks=[infer])  # a new model: no weights before fit
    for logs, evaluated, _ in infer.seen:  # each epoch's validation is of the weights of its end
        assert evaluated["loss"] == pytest.approx(logs["val_loss"], rel=1e-6)
        assert evaluated["accuracy"] == pytest.approx(logs["val_accuracy"], rel=1e-9)
    assert not np.array_equal(infer.seen[0][2], infer.seen[1][2])
    assert np.array_equal(infer.seen[1][2], model.predict(demo["valid"][0]))  # the last epoch's are fit's last


def test_learning_rate_set_in_a_callback_is_logged_and_a_resume_keeps_it(demo, tmp_path):
    class Halve:
        def set_model(self, model):
            self.model = model

        def on_epoch_begin(self, epoch, logs=None):
            self.read = self.model.optimizer.learning_rate
            self.model.optimizer.learning_rate = 0.005

    halve = Halve()
    _, history = fit(demo, tmp_path / "run", epochs=1, callbacks=[halve])
    assert halve.read == pytest.approx(0.01, rel=1e-6)
    assert history.history["lr"] == [np.float32(0.005)]
    resumed = new_model(demo).fit(*demo["train"], validation_data=demo["valid"], out=tmp_path / "run", epochs=2,
                                  resume=True, verbose=0)
    assert resumed.history["lr"] == [np.float32(0.005)]


def test_a_scheduled_rate_is_not_settable_and_the_optimizer_is_fits_only(demo, tmp_path):
    class Set:
        def set_model(self, model):
            self.model = model

        def on_epoch_begin(self, epoch, logs=None):
            self.model.optimizer.learning_rate = 0.001

    with pytest.raises(ValueError, match='lr_schedule "cosine"'):
        fit(demo, tmp_path / "run", callbacks=[Set()], lr_schedule="cosine")
    with pytest.raises(ValueError, match="optimizer.learning_rate is the running fit's"):
        new_model(demo).optimizer.learning_rate


def test_keras_keywords(demo, tmp_path):
    x, y = demo["train"]
    split_at = int(np.floor(len(y) * 0.75))
    model = new_model(demo)
    model.fit(x, y, validation_split=0.25, epochs=1, batch_size=16, out=tmp_path / "split", seed=3, verbose=0)
    new_model(demo).fit(x[:split_at], y[:split_at], validation_data=(x[split_at:], y[split_at:]), epochs=1,
                        batch_size=16, out=tmp_path / "given", seed=3, verbose=0)
    for name in ("last.safetensors", "best.safetensors"):
        assert read(tmp_path / "split" / name) == read(tmp_path / "given" / name), name
    assert model.history.params["epochs"] == 1 and model.params["steps"] == -(-split_at // 16)
    for keywords, message in ((dict(initial_epoch=1), "initial_epoch=1"), (dict(sample_weight=np.ones(len(y))),
                              "sample_weight"), (dict(validation_split=1.0), "validation_split must be")):
        with pytest.raises(ValueError, match=message):
            new_model(demo).fit(x, y, out=tmp_path / "refused", verbose=0, **keywords)
        assert not (tmp_path / "refused").exists()


# ---- Keras' own callbacks ------------------------------------------------------------------------

def test_early_stopping_restores_the_best_weights(demo, tmp_path):
    keras = keras_or_skip()
    recorder = EpochWeights()

    def spoil(epoch, logs):  # the last epoch starts from weights far off: it cannot be the best
        if epoch == 2:
            weights = recorder.model.get_weights()
            recorder.model.set_weights(weights[:-2] + [weights[-2] * 50, weights[-1]])

    stopping = keras.callbacks.EarlyStopping(monitor="val_loss", patience=10, restore_best_weights=True)
    model, history = fit(demo, tmp_path / "run", epochs=3,
                         callbacks=[recorder, keras.callbacks.LambdaCallback(on_epoch_begin=spoil), stopping])
    losses = history.history["val_loss"]
    best = int(np.argmin(losses))
    assert best != 2 and losses[2] > losses[best]
    assert same(model.get_weights(), recorder.weights[best])
    assert np.array_equal(model.predict(demo["valid"][0]),
                          Model.load(tmp_path / "run" / "best.safetensors").predict(demo["valid"][0]))
    # last.safetensors stays the run's last state (a resume continues the run).
    _, last = load_checkpoint(tmp_path / "run" / "last.safetensors")
    assert same(list(last.values()), recorder.weights[2])


def test_reduce_lr_on_plateau_lowers_the_rate(demo, tmp_path):
    keras = keras_or_skip()
    reduce = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=0, min_delta=10.0)
    _, history = fit(demo, tmp_path / "run", epochs=3, callbacks=[reduce])
    assert history.history["lr"] == [np.float32(0.01), np.float32(0.01), np.float32(0.005)]
    assert history.history["learning_rate"][-1] == pytest.approx(0.005, rel=1e-6)


def test_learning_rate_scheduler_sets_each_epochs_rate(demo, tmp_path):
    keras = keras_or_skip()
    recorder = EpochWeights()
    scheduler = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.01 if epoch == 0 else 0.0)
    model, history = fit(demo, tmp_path / "run", epochs=2, callbacks=[scheduler, recorder])
    assert history.history["lr"] == [np.float32(0.01), 0.0]
    assert same(model.get_weights(), recorder.weights[0])  # no step of the second epoch moved a weight
    fit(demo, tmp_path / "plain", epochs=2)
    assert read(tmp_path / "plain" / "last.safetensors") != read(tmp_path / "run" / "last.safetensors")


def test_model_checkpoint_writes_loadable_keras_files(demo, tmp_path):
    keras = keras_or_skip()
    import enhanced.keras  # noqa: F401  (registers the Keras model's class)
    callbacks = [keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras")),
                 keras.callbacks.ModelCheckpoint(str(tmp_path / "m.weights.h5"), save_weights_only=True)]
    model, _ = fit(demo, tmp_path / "run", callbacks=callbacks)
    logits = model.predict(demo["valid"][0], logits=True)
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(loaded(demo["ragged"]).numpy(), logits, rtol=1e-4, atol=1e-5)
    again = new_model(demo)
    again.load_weights(tmp_path / "m.weights.h5")
    np.testing.assert_allclose(again.predict(demo["valid"][0], logits=True), logits, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="m.h5: the name must end with .keras or .safetensors"):
        model.save(tmp_path / "m.h5")


def test_backup_and_restore_runs_and_a_left_backup_is_refused(demo, tmp_path):
    keras = keras_or_skip()
    backup = tmp_path / "backup"
    fit(demo, tmp_path / "run", callbacks=[keras.callbacks.BackupAndRestore(str(backup))])
    assert not backup.exists()  # deleted at the end of a fit that completed, as in Keras

    def fail(epoch, logs):
        if epoch == 1:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        fit(demo, tmp_path / "broken", callbacks=[keras.callbacks.BackupAndRestore(str(backup)),
                                                  keras.callbacks.LambdaCallback(on_epoch_end=fail)])
    with pytest.raises(ValueError, match="resume=True"):
        fit(demo, tmp_path / "again", callbacks=[keras.callbacks.BackupAndRestore(str(backup))])


def test_keras_tensorboard_is_refused_before_any_step(demo, tmp_path):
    keras = keras_or_skip()
    with pytest.raises(ValueError, match="enhanced.callbacks.TensorBoard"):
        fit(demo, tmp_path / "run", callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "logs"))])
    assert not (tmp_path / "run").exists()


HOOK_STEPS = 10  # steps an epoch in hook_sequences: the demo's validation set is then two batches


def hook_sequences(demo, tmp_path, epochs=2, stop_after=None):
    """The hooks an enhanced.Model.fit and a keras.Model.fit of a tiny model call, each with
    HOOK_STEPS steps an epoch and a validation of the same batches at each epoch's end: [(hook, epoch or
    batch)], in order.
    stop_after: model.stop_training is set in on_train_batch_end of that many-th batch."""
    keras = keras_or_skip()

    class Calls(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls, self.batches = [], 0

        def set_params(self, params):
            self.calls.append(("set_params", tuple(sorted(params))))
            super().set_params(params)

        def record(self, name, *args):
            self.calls.append((name, *(a for a in args[:1] if isinstance(a, int))))
            if name == "on_train_batch_end":
                self.batches += 1
                if self.batches == stop_after:
                    self.model.stop_training = True

        def __getattribute__(self, name):
            if name.startswith("on_") and not name.startswith("on_predict"):
                return lambda *args, **kwargs: self.record(name, *args)
            return super().__getattribute__(name)

    x, y = demo["train"]
    batch = -(-len(y) // HOOK_STEPS)
    engine_calls = Calls()
    new_model(demo).fit(x, y, validation_data=demo["valid"], epochs=epochs, batch_size=batch, out=tmp_path / "run",
                        verbose=0, callbacks=[engine_calls])
    dense = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    dense.compile("sgd", "sparse_categorical_crossentropy")
    keras_calls = Calls()
    features, labels = np.zeros((len(y), 3), np.float32), np.zeros(len(y), np.int64)
    valid = len(demo["valid"][1])  # as many validation batches as the engine's
    dense.fit(features, labels, validation_data=(np.zeros((valid, 3), np.float32), np.zeros(valid, np.int64)),
              epochs=epochs, batch_size=batch, verbose=0, callbacks=[keras_calls])
    return engine_calls.calls, keras_calls.calls


def test_hooks_come_in_a_keras_models_order(demo, tmp_path):
    engine, keras = hook_sequences(demo, tmp_path)
    assert engine == keras


def test_hooks_see_each_validation_batch_as_keras_test_batches(demo, tmp_path):
    engine, keras = hook_sequences(demo, tmp_path, epochs=1)
    assert ("on_test_batch_end", 1) in keras  # what the case is: two validation batches
    assert engine == keras


def test_test_batch_logs_are_the_validations_running_results(demo, tmp_path):
    class Tests:
        def __init__(self):
            self.calls = []

        def on_test_batch_end(self, batch, logs=None):
            self.calls.append(("batch", batch, dict(logs)))

        def on_test_end(self, logs=None):
            self.calls.append(("end", None, dict(logs)))

        def on_epoch_end(self, epoch, logs=None):
            self.calls.append(("epoch", epoch, dict(logs)))

    tests = Tests()
    model, _ = fit(demo, tmp_path / "run", epochs=2, callbacks=[tests])
    x, y = demo["valid"]
    batches = -(-len(y) // FLAGS["batch_size"])
    assert batches > 1
    for epoch in range(2):
        calls = tests.calls[epoch * (batches + 2):(epoch + 1) * (batches + 2)]
        assert [c[:2] for c in calls] == [("batch", b) for b in range(batches)] + [("end", None), ("epoch", epoch)]
        assert calls[batches - 1][2] == calls[batches][2]  # the last batch's running logs are the whole set's
        assert calls[batches][2] == {key: calls[-1][2]["val_" + key] for key in ("loss", "accuracy", "f1")}
    # The last epoch's first validation batch: the final weights on that batch's samples.
    first = model.evaluate(x[:FLAGS["batch_size"]], y[:FLAGS["batch_size"]], batch_size=FLAGS["batch_size"])
    assert tests.calls[-(batches + 2)][2]["loss"] == pytest.approx(first["loss"], rel=1e-6)
    assert tests.calls[-(batches + 2)][2]["accuracy"] == pytest.approx(first["accuracy"], rel=1e-9)


def test_a_stop_within_an_epoch_validates_and_ends_that_epoch_as_keras_does(demo, tmp_path):
    engine, keras = hook_sequences(demo, tmp_path, epochs=3, stop_after=HOOK_STEPS + 1)  # epoch 1's first batch
    assert ("on_epoch_end", 1) in keras and ("on_epoch_begin", 2) not in keras  # what the case is
    assert engine == keras
