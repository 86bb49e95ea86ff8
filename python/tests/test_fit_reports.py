"""What Model.fit says and leaves behind: the engine's lines follow verbose, a failed run's
exception carries its reason, fit(out=None) cleans up, a callback's missing package is named."""
import gc
import importlib.util
import os

import pytest

from enhanced import Model, callbacks

from test_model import FLAGS, demo, new_model, run_script  # noqa: F401 (demo is a fixture)


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
        new_model(demo).fit(*few, batch_size=64, drop_last=True, epochs=1, verbose=0, out=tmp_path / "few")
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


def test_keywords_of_another_type_are_refused_by_name(demo, tmp_path):
    model, _ = quick_fit(demo, tmp_path / "run")
    x, y = demo["valid"]
    with pytest.raises(ValueError, match="^resume must be True or False, got 'yes'"):
        model.fit(*demo["train"], out=tmp_path / "run", resume="yes", verbose=0)
    for call in (lambda: model.predict(x, verbose="loud"), lambda: model.evaluate(x, y, verbose="loud")):
        with pytest.raises(ValueError, match="^verbose must be 'auto', 0, 1 or 2, got 'loud'"):
            call()


def test_paths_that_cannot_be_read_or_written_are_named(demo, tmp_path):
    model, _ = quick_fit(demo, tmp_path / "run")
    missing = tmp_path / "no" / "such"
    for call, name in ((lambda: model.save(missing / "m.keras"), "save"),
                       (lambda: model.save(missing / "m.safetensors"), "save"),
                       (lambda: model.save_weights(missing / "m.weights.h5"), "save_weights")):
        with pytest.raises(ValueError, match=rf"^{name}: .*m\.[a-z.5]+: the folder .*such does not exist"):
            call()
    path = os.fsencode(tmp_path / "run" / "last.safetensors")
    with pytest.raises(ValueError, match=r"^x: a path given as bytes \(b'/"):
        model.fit(os.fsencode(demo["dir"] / "train.ebin"), out=tmp_path / "other", verbose=0)
    with pytest.raises(ValueError, match=r"^Model.load: path: a path given as bytes"):
        type(model).load(path)
    with pytest.raises(ValueError, match=r"^validation_data: a path given as bytes"):
        model.fit(*demo["train"], validation_data=path, out=tmp_path / "other", verbose=0)
    assert not (tmp_path / "other").exists()


def test_model_load_of_a_keras_file_says_how_to_get_a_checkpoint(demo, tmp_path):
    model, _ = quick_fit(demo, tmp_path / "run")
    model.save(tmp_path / "m.keras")
    model.save_weights(tmp_path / "m.weights.h5")
    os.rename(tmp_path / "m.keras", tmp_path / "m.bin")  # known by its first bytes too
    for name in ("m.bin", "m.weights.h5"):
        with pytest.raises(ValueError, match=rf"^Model.load: .*{name} is a Keras file; .*checkpoint_from_keras"):
            type(model).load(tmp_path / name)


@pytest.mark.parametrize("setting, value", [("hidden", 8), ("embedding_dim", 4), ("blend", "scalar-mean"),
                                            ("pool", "time"), ("vocab_size", None), ("num_labels", None),
                                            ("seq_len", None)])
def test_a_resume_of_a_model_of_another_shape_is_refused_before_any_work(demo, tmp_path, setting, value):
    quick_fit(demo, tmp_path / "run")
    before = {name: (tmp_path / "run" / name).read_bytes() for name in os.listdir(tmp_path / "run")}
    shape = dict(vocab_size=demo["vocab"], num_labels=demo["labels"], seq_len=demo["seq_len"],
                 embedding_dim=FLAGS["embedding_dim"], hidden=FLAGS["hidden"])
    theirs = shape.get(setting, {"blend": "mean", "pool": "feature"}.get(setting))
    shape[setting] = value if value is not None else theirs + 1
    with pytest.raises(ValueError, match=rf"^{setting}: the model's is {shape[setting]!r}, the run being resumed "
                                         rf"in .* has {theirs!r}"):
        Model(**shape).fit(*demo["train"], out=tmp_path / "run", resume=True, verbose=0)
    after = {name: (tmp_path / "run" / name).read_bytes() for name in os.listdir(tmp_path / "run")}
    assert after == before


def test_sigterm_then_ctrl_c_during_the_save_still_ends_with_143(demo, tmp_path):
    """The first signal decides: a Ctrl-C that lands while the run saves after a SIGTERM (back in
    fit's own code, out of the engine) is ignored, and the process ends as terminated."""
    result = run_script(demo, tmp_path, """
main = threading.main_thread().ident
def ctrl_c_once_fit_runs_its_own_code():
    while sys._current_frames()[main].f_code.co_name != "fit":
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGINT)
class Term:
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            threading.Thread(target=ctrl_c_once_fit_runs_its_own_code, daemon=True).start()
            os.kill(os.getpid(), signal.SIGTERM)
model.fit(x, y, epochs=2, batch_size=16, seed=3, lr=0.01, out=sys.argv[2], verbose=0, callbacks=[Term()])
""")
    assert result.returncode == 143, result.stderr
    assert "training terminated (SIGTERM): the step reached is saved in" in result.stderr
    assert os.path.exists(tmp_path / "run" / "optimizer.safetensors")


def test_python_exiting_while_a_daemon_fits_without_out_leaves_no_folder(demo, tmp_path):
    """Exit functions run while a daemon thread's fit trains on: the temporary folder was removed
    as the engine went on saving into it (a save every step here; an exit function run after the
    removal gives it time), so a file could land in it as it went and keep it. The run now ends
    before its folder goes."""
    for attempt in range(2):
        result = run_script(demo, tmp_path, f"""
import atexit, tempfile
atexit.register(time.sleep, 0.5)  # an exit function: the daemon trains on meanwhile
tempfile.tempdir = {str(tmp_path / str(attempt))!r}
os.mkdir(tempfile.tempdir)
started = threading.Event()
class Started:
    def on_train_batch_end(self, batch, logs=None):
        if not os.path.isdir(model.history.params["out"]):
            os.write(1, b"trained with its folder removed\\n")
        started.set()
thread = threading.Thread(target=model.fit, args=(x, y), kwargs=dict(epochs=50, verbose=0, checkpoint_every=1,
                          callbacks=[Started()]), daemon=True)
thread.start()
started.wait()
print("exiting", flush=True)
""")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["exiting"]
        assert "Traceback" not in result.stderr and "error" not in result.stderr.lower()
        assert os.listdir(tmp_path / str(attempt)) == []
