"""Model's calls as Keras' users make them: Keras' positional order, unknown keywords refused by
name, evaluate's return_dict, predict's steps; and what a call that goes wrong leaves or says (a
callback raising before the run's first save, a resume without its validation set, samples of
another T, non-finite weights)."""
import inspect
import math

import numpy as np
import pytest

from enhanced import Model
from enhanced.checkpoint import parameter_shapes
from enhanced.run_plan import recorded_options

from test_model import FLAGS, demo, new_model  # noqa: F401 (demo is a fixture)


@pytest.fixture(scope="module")
def trained(demo, tmp_path_factory):
    model = new_model(demo)
    model.fit(*demo["train"], epochs=1, batch_size=FLAGS["batch_size"], seed=3, verbose=0,
              out=tmp_path_factory.mktemp("trained") / "run")
    return model


class StopAfterFirstEpoch:
    def set_model(self, model):
        self.model = model

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


def test_fit_evaluate_and_predict_take_keras_positional_order():
    keras = pytest.importorskip("keras")
    for method in ("fit", "evaluate", "predict"):
        ours = [p for p in inspect.signature(getattr(Model, method)).parameters.values()
                if p.kind == p.POSITIONAL_OR_KEYWORD]
        theirs = list(inspect.signature(getattr(keras.Model, method)).parameters)
        assert [p.name for p in ours] == theirs[:len(ours)], method
    assert "steps_per_epoch" in inspect.signature(Model.fit).parameters
    assert inspect.signature(Model.fit).parameters["out"].kind == inspect.Parameter.KEYWORD_ONLY


def test_fit_reads_keras_positional_arguments_as_keras_does(demo, tmp_path, capfd):
    x, y = demo["train"]
    history = new_model(demo).fit(x, y, FLAGS["batch_size"], 1, 0, out=tmp_path / "run")  # batch_size, epochs, verbose
    assert (history.params["batch_size"], history.params["epochs"]) == (FLAGS["batch_size"], 1)
    assert history.params["steps"] == math.ceil(len(y) / FLAGS["batch_size"])
    assert "engine: " not in capfd.readouterr().err  # verbose=0


def test_evaluate_returns_keras_list_with_return_dict_false(demo, trained):
    x, y = demo["valid"]
    values = trained.evaluate(x, y, 16, 0)
    assert sorted(values) == ["accuracy", "loss", "macro_f1"]
    assert trained.evaluate(x, y, return_dict=True) == values
    assert trained.evaluate(x, y, return_dict=False) == [values["loss"], values["accuracy"], values["macro_f1"]]


def test_predict_steps_draws_that_many_batches(demo, trained):
    x, y = demo["valid"]
    batches = [(x[i:i + 4], y[i:i + 4]) for i in range(0, 12, 4)]
    drawn = trained.predict(iter(batches), steps=2)  # an iterator of batches: 2 of its 3
    assert drawn.shape == (8, demo["labels"])
    np.testing.assert_array_equal(drawn, trained.predict(x[:8]))
    with pytest.raises(ValueError, match=r"^steps: only for x given as an iterable"):
        trained.predict(x, steps=2)


@pytest.mark.parametrize("call, match", [
    (lambda m, x, y: m.predict(x, foo=1), r"^predict: unknown keyword argument 'foo'"),
    (lambda m, x, y: m.evaluate(x, y, foo=1), r"^evaluate: unknown keyword argument 'foo'"),
    (lambda m, x, y: m.predict(x, callbacks=[object()]), r"^callbacks: predict calls no callbacks"),
    (lambda m, x, y: m.evaluate(x, y, sample_weight=np.ones(len(y))), r"^sample_weight: evaluate"),
    (lambda m, x, y: m.evaluate(x, y, return_dict=1), r"^return_dict must be True or False"),
])
def test_predict_and_evaluate_refuse_keywords_by_name(demo, trained, call, match):
    with pytest.raises(ValueError, match=match):
        call(trained, *demo["valid"])


def test_a_callback_raising_before_the_first_save_leaves_the_live_weights(demo):
    class Raise:
        def set_model(self, model):
            self.model = model

        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                self.weights = self.model.get_weights()
                raise RuntimeError("stop here")

    model, raising = new_model(demo), Raise()
    with pytest.raises(RuntimeError, match="stop here"):
        model.fit(*demo["train"], epochs=1, batch_size=FLAGS["batch_size"], verbose=0, callbacks=[raising])
    for kept, live in zip(model.get_weights(), raising.weights):
        np.testing.assert_array_equal(kept, live)
    assert model.predict(demo["valid"][0]).shape == (len(demo["valid"][1]), demo["labels"])


def _stopped_run(demo, out, validation_data):
    new_model(demo).fit(*demo["train"], epochs=2, batch_size=FLAGS["batch_size"], seed=3, verbose=0, out=out,
                        validation_data=validation_data, callbacks=[StopAfterFirstEpoch()])


def test_resuming_a_run_validated_in_memory_asks_for_its_validation_data(demo, tmp_path):
    out = tmp_path / "run"
    _stopped_run(demo, out, demo["valid"])
    count = len(demo["valid"][1])
    assert recorded_options(out)["valid"] == f"<validation_data: {count} samples in memory>"  # no path
    with pytest.raises(ValueError, match=rf"^validation_data: .* validated on {count} samples given in memory"):
        new_model(demo).fit(*demo["train"], out=out, resume=True, verbose=0)
    history = new_model(demo).fit(*demo["train"], out=out, resume=True, verbose=0, validation_data=demo["valid"])
    assert len(history.history["val_loss"]) == 1


def test_resuming_a_run_validated_on_a_file_takes_it_from_the_record(demo, tmp_path):
    out = tmp_path / "run"
    _stopped_run(demo, out, str(demo["dir"] / "valid.ebin"))
    history = new_model(demo).fit(*demo["train"], out=out, resume=True, verbose=0)
    assert len(history.history["val_loss"]) == 1


def test_samples_of_another_T_name_the_models_seq_len_and_checkpoint(demo, trained):
    longer = [sample + [sample[-1]] for sample in demo["valid"][0]]
    with pytest.raises(ValueError, match=rf"^x: .*T = {demo['seq_len'] + 1} .*seq_len is {demo['seq_len']}") as e:
        trained.predict(longer)
    assert "enhanced-weights-" not in str(e.value) and trained.checkpoint in str(e.value)
    with pytest.raises(ValueError, match=r"seq_len is"):
        trained.evaluate(longer, demo["valid"][1])


def test_set_weights_refuses_a_value_that_is_not_finite(demo, trained):
    weights = trained.get_weights()
    weights[3] = weights[3].copy()
    weights[3].flat[5] = np.nan
    name = list(parameter_shapes(trained.config))[3]
    with pytest.raises(ValueError, match=rf"^set_weights: array 3 \({name}\) .*nan at flat index 5"):
        trained.set_weights(weights)

    class SetNan:
        def set_model(self, model):
            self.model = model

        def on_train_batch_end(self, batch, logs=None):
            self.model.set_weights(weights)

    with pytest.raises(ValueError, match=r"^set_weights: array 3"):
        new_model(demo).fit(*demo["train"], epochs=1, batch_size=FLAGS["batch_size"], verbose=0,
                            callbacks=[SetNan()])


def test_batch_size_defaults_to_keras_32_in_fit_evaluate_and_predict(demo, tmp_path):
    x, y = demo["train"]
    history = new_model(demo).fit(x, y, epochs=1, seed=3, verbose=0, out=tmp_path / "run")
    assert history.params["steps"] == math.ceil(len(y) / 32)
    assert recorded_options(str(tmp_path / "run"))["batch_size"] == 32  # enhanced-train's own default is 64
    for method in (Model.evaluate, Model.predict):
        assert inspect.signature(method).parameters["batch_size"].default == 32


def test_a_set_smaller_than_batch_size_trains_one_partial_batch_an_epoch(demo, tmp_path):
    """As Keras's fit: 10 samples at batch_size 64 are one step of 10 an epoch (the engine's CLI
    refuses such a set; with drop_last there would be no step at all, and fit refuses it too)."""
    x, y = demo["train"]
    few = (x[:10], y[:10])
    small = new_model(demo)
    history = small.fit(*few, batch_size=64, epochs=2, seed=3, verbose=0, out=tmp_path / "small")
    assert history.params["steps"] == 1 and len(history.history["loss"]) == 2
    exact = new_model(demo)
    exact.fit(*few, batch_size=10, epochs=2, seed=3, verbose=0, out=tmp_path / "exact")
    for mine, theirs in zip(small.get_weights(), exact.get_weights()):
        assert np.array_equal(mine, theirs)
    small.fit(*few, resume=True, epochs=3, batch_size=64, verbose=0, out=tmp_path / "small")  # the same rule resumes
    assert recorded_options(str(tmp_path / "small"))["batch_size"] == 10
