"""What Model.fit says and leaves behind: the engine's lines follow verbose, a failed run's
exception carries its reason, fit(out=None) cleans up, a callback's missing package is named."""
import gc
import importlib.util
import os

import pytest

from enhanced import callbacks

from test_model import FLAGS, demo, new_model  # noqa: F401 (demo is a fixture)


def quick_fit(demo, out, **options):
    model = new_model(demo)
    options = {"epochs": 1, "batch_size": FLAGS["batch_size"], "seed": 3, "verbose": 0, **options}
    return model, model.fit(*demo["train"], out=out, **options)


@pytest.mark.parametrize("verbose", [0, 2])
def test_the_engines_own_lines_follow_verbose(demo, tmp_path, capfd, verbose):
    quick_fit(demo, tmp_path / "run", verbose=verbose)
    printed = capfd.readouterr().err
    for start in ("engine: ", "model: ", "done: "):
        assert (start in printed) == (verbose != 0), printed


def test_a_non_finite_loss_raises_with_its_reason(demo, tmp_path, capfd):
    out = tmp_path / "diverge"
    with pytest.raises(RuntimeError, match=r"non-finite loss \(.*\) at step \d+ \(epoch 1, batch \d+\)") as caught:
        quick_fit(demo, out, optimizer="sgd", lr=1e38)
    # metrics.jsonl is named only where it exists (no line is written before step log_every)
    assert (str(out / "metrics.jsonl") in str(caught.value)) == os.path.exists(out / "metrics.jsonl")
    assert "No checkpoint had been written yet" in str(caught.value)
    assert "non-finite" not in capfd.readouterr().err  # the exception says it, once


def test_fit_without_out_removes_its_temporary_folder(demo):
    model, history = quick_fit(demo, None)
    first = model.run_dir
    assert history.params["out"] == first and os.path.exists(os.path.join(first, "last.safetensors"))
    quick_fit_again = model.fit(*demo["train"], epochs=1, batch_size=FLAGS["batch_size"], verbose=0)
    second = model.run_dir
    assert quick_fit_again.params["out"] == second and second != first
    assert not os.path.exists(first) and os.path.isdir(second)  # the next fit(out=None) replaced it
    model.predict(demo["train"][0][:4])  # the weights are the model's own copy
    del model
    gc.collect()
    assert not os.path.exists(second)


def test_a_named_out_stays(demo, tmp_path):
    model, _ = quick_fit(demo, tmp_path / "kept")
    del model
    gc.collect()
    assert os.path.exists(tmp_path / "kept" / "last.safetensors")


def test_tensorboard_callback_without_its_package_says_so_when_created(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install \"\./python\[tensorboard\]\""):
        callbacks.TensorBoard(log_dir=tmp_path / "logs")


def test_the_engines_refusals_name_fits_keywords(demo, tmp_path):
    x, y = demo["train"]
    few = (x[:10], y[:10])
    with pytest.raises(ValueError, match=r"fewer than batch_size 64 .* give batch_size 10 or less") as caught:
        new_model(demo).fit(*few, epochs=1, verbose=0, out=tmp_path / "few")
    assert "--" not in str(caught.value)
    quick_fit(demo, tmp_path / "run")
    with pytest.raises(ValueError, match=r"pass resume=True to continue it, or overwrite=True") as caught:
        quick_fit(demo, tmp_path / "run")
    assert "--" not in str(caught.value)
    with pytest.raises(ValueError, match=r"^shuffle=False conflicts with the run being resumed"):
        quick_fit(demo, tmp_path / "run", epochs=2, resume=True, shuffle=False)


def test_a_callbacks_own_value_error_is_raised_as_it_is(demo, tmp_path):
    raised = ValueError("--not-a-flag of mine")

    class Raises:
        def on_epoch_end(self, epoch, logs=None):
            raise raised

    with pytest.raises(ValueError) as caught:
        quick_fit(demo, tmp_path / "run", callbacks=[Raises()])
    assert caught.value is raised


def test_a_model_keeps_what_it_trained_when_a_callback_raises(demo, tmp_path):
    class FailsAtTheEnd:
        def on_train_end(self, logs=None):
            raise RuntimeError("a callback failed")

    model = new_model(demo)
    with pytest.raises(RuntimeError, match="a callback failed"):
        model.fit(*demo["train"], epochs=1, batch_size=FLAGS["batch_size"], seed=3, verbose=0,
                  out=tmp_path / "run", callbacks=[FailsAtTheEnd()])
    # as a Keras model keeps its trained weights: the run's last save, which the run wrote before
    trained = type(model).load(tmp_path / "run" / "last.safetensors")
    x = demo["valid"][0][:20]
    assert (model.predict(x) == trained.predict(x)).all()


@pytest.mark.parametrize("options, named", [
    (dict(batch_size=2**31), "batch_size"), (dict(device=None), "device"), (dict(precision=None), "precision"),
    (dict(logits="no"), "logits"), (dict(device="tpu"), "device")])
def test_predict_refuses_bad_arguments_by_name(demo, tmp_path, options, named):
    model, _ = quick_fit(demo, tmp_path / "run")
    with pytest.raises(ValueError, match=rf"^{named}\b") as caught:
        model.predict(demo["valid"][0][:5], **options)
    assert "--" not in str(caught.value)


def test_a_file_that_is_no_ebin_is_named_as_such(demo, tmp_path):
    junk = tmp_path / "junk.ebin"
    junk.write_bytes(b"this is not an ebin file, only some text" * 4)
    with pytest.raises(ValueError, match="magic") as caught:
        new_model(demo).fit(junk, epochs=1, verbose=0, out=tmp_path / "run")
    assert "positions" not in str(caught.value)


@pytest.mark.parametrize("class_weight", [2, True, 1.5])
def test_a_class_weight_that_is_no_collection_is_refused(demo, tmp_path, class_weight):
    with pytest.raises(ValueError, match="^class_weight must be"):
        quick_fit(demo, tmp_path / "run", class_weight=class_weight)
