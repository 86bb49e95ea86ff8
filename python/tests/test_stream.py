"""Model.fit on an iterable of (x, y) batches: read batch by batch as the engine trains, each
batch one step, with Keras's steps_per_epoch and validation_steps, never gathered whole."""
import json
import threading

import numpy as np
import pytest

from enhanced import Model, read_ebin
from enhanced.checkpoint import load_checkpoint

SIZE = 16  # the batches' size
COMMON = dict(seed=3, verbose=0, lr=0.01)


@pytest.fixture(scope="module")
def demo(demo_data):
    train = read_ebin(demo_data / "train.ebin")
    valid = read_ebin(demo_data / "valid.ebin")
    return dict(train=(train.to_lists(), np.array(train.labels)), valid=(valid.to_lists(), np.array(valid.labels)),
                vocab=max(train.max_token_id, valid.max_token_id) + 1, labels=max(train.num_labels, valid.num_labels),
                seq_len=train.seq_len, dir=demo_data)


def new_model(demo):
    return Model(vocab_size=demo["vocab"], num_labels=demo["labels"], seq_len=demo["seq_len"], embedding_dim=8,
                 hidden=4)


class Batches:
    """The set's (x, y) batches of SIZE in order, anew at each iter() (as a tf.data.Dataset); counts the batches given."""

    def __init__(self, x, y, size=SIZE):
        self.x, self.y, self.size, self.given = x, y, size, 0

    def __iter__(self):
        for start in range(0, len(self.y), self.size):
            self.given += 1
            yield self.x[start:start + self.size], self.y[start:start + self.size]


def endless(x, y, counter):
    """The set's batches round and round, for ever; counter[0] counts those taken."""
    while True:
        for batch in Batches(x, y):
            counter[0] += 1
            yield batch


def metric_lines(out, kind):
    with open(out / "metrics.jsonl") as f:
        return [line for line in map(json.loads, f) if line["kind"] == kind]


def weights(out):
    return load_checkpoint(out / "last.safetensors")[1]


def test_a_stream_of_the_sets_batches_in_order_equals_the_in_memory_run_bit_for_bit(demo, tmp_path):
    x, y = demo["train"]
    streamed = Batches(x, y)
    new_model(demo).fit(streamed, validation_data=demo["valid"], epochs=2, out=tmp_path / "stream", **COMMON)
    new_model(demo).fit(x, y, validation_data=demo["valid"], epochs=2, batch_size=SIZE, shuffle=False,
                        out=tmp_path / "memory", **COMMON)
    a, b = weights(tmp_path / "stream"), weights(tmp_path / "memory")
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    steps = -(-len(y) // SIZE)
    assert streamed.given == 2 * steps  # a pass an epoch, each batch read once
    assert [line["step"] for line in metric_lines(tmp_path / "stream", "epoch")] == [steps, 2 * steps]
    assert [line["valid_loss"] for line in metric_lines(tmp_path / "stream", "epoch")] == \
        [line["valid_loss"] for line in metric_lines(tmp_path / "memory", "epoch")]


def test_an_endless_generator_with_steps_per_epoch_takes_one_iterator_across_epochs(demo, tmp_path):
    counter = [0]
    history = new_model(demo).fit(endless(*demo["train"], counter), epochs=3, steps_per_epoch=5,
                                  out=tmp_path / "run", **COMMON)
    assert counter[0] == 15  # exactly epochs * steps_per_epoch batches taken, none gathered ahead
    assert [line["step"] for line in metric_lines(tmp_path / "run", "epoch")] == [5, 10, 15]
    assert len(history.history["loss"]) == 3 and history.params["steps"] == 5


def test_running_out_early_stops_with_one_warning_saved_as_a_normal_end(demo, tmp_path, capfd):
    x, y = demo["train"]
    seven = (batch for i, batch in zip(range(7), Batches(x, y)))
    history = new_model(demo).fit(seven, epochs=3, steps_per_epoch=5, out=tmp_path / "run", **COMMON)
    warnings = [line for line in capfd.readouterr().err.splitlines() if "ran out of data" in line]
    assert len(warnings) == 1, warnings
    assert [line["step"] for line in metric_lines(tmp_path / "run", "epoch")] == [5, 7]
    assert len(history.history["loss"]) == 2 and (tmp_path / "run" / "last.safetensors").exists()


def test_a_one_shot_generator_without_steps_per_epoch_trains_one_pass(demo, tmp_path, capfd):
    x, y = demo["train"]
    hooks = []

    class Epochs:
        def on_epoch_begin(self, epoch, logs=None):
            hooks.append(("begin", epoch))

        def on_epoch_end(self, epoch, logs=None):
            hooks.append(("end", epoch))

    history = new_model(demo).fit(iter(Batches(x, y)), epochs=2, out=tmp_path / "run", callbacks=[Epochs()],
                                  **COMMON)
    steps = -(-len(y) // SIZE)
    assert [line["step"] for line in metric_lines(tmp_path / "run", "epoch")] == [steps]  # pass 2 is empty
    assert "ran out of data" in capfd.readouterr().err
    assert hooks == [("begin", 0), ("end", 0)] and history.epoch == [0]  # no epoch begun that cannot end


def ragged_dataset(demo):
    tf = pytest.importorskip("tensorflow")
    x, y = demo["train"]
    ragged = read_ebin(demo["dir"] / "train.ebin").to_ragged()
    return tf.data.Dataset.from_tensor_slices((ragged, y)), len(y)


def test_a_tf_data_dataset_batched_at_16_gives_its_batches_as_steps(demo, tmp_path):
    ds, n = ragged_dataset(demo)
    history = new_model(demo).fit(ds.batch(16), epochs=2, out=tmp_path / "run", **COMMON)
    steps = -(-n // 16)
    assert [line["step"] for line in metric_lines(tmp_path / "run", "epoch")] == [steps, 2 * steps]
    assert history.params["steps"] is None  # unknown until a pass ends, as Keras's


def test_repeat_3_without_steps_per_epoch_is_one_epoch_of_three_passes(demo, tmp_path):
    ds, n = ragged_dataset(demo)
    new_model(demo).fit(ds.batch(16).repeat(3), epochs=1, out=tmp_path / "run", **COMMON)
    assert [line["step"] for line in metric_lines(tmp_path / "run", "epoch")] == [3 * -(-n // 16)]


def with_bad_batch(demo, index, how):
    """The set's batches, batch `index` made bad: an id past the vocabulary, a wrong T, or one label short."""
    x, y = demo["train"]
    for i, (bx, by) in enumerate(Batches(x, y)):
        if i == index:
            if how == "id":
                bx = [[[[demo["vocab"]], [], [1]]] + list(bx[0][1:])] + list(bx[1:])
            elif how == "T":
                bx = [sample[:-1] for sample in bx]
            else:
                by = by[:-1]
        yield bx, by


@pytest.mark.parametrize("how, text", [("id", "x: batch 2: sample 0: position 0: field 0"),
                                       ("T", "x: batch 2: T = "), ("labels", "x: batch 2: x has 16 samples but y has 15")])
def test_a_bad_batch_is_one_value_error_naming_it(demo, tmp_path, how, text):
    with pytest.raises(ValueError, match=text):
        new_model(demo).fit(with_bad_batch(demo, 2, how), out=tmp_path / "run", **COMMON)


def test_what_a_stream_cannot_do_is_refused_by_name_before_any_work(demo, tmp_path):
    x, y = demo["train"]
    model, out = new_model(demo), tmp_path / "run"
    for keywords, name in [(dict(batch_size=16), "batch_size"), (dict(resume=True), "resume"),
                           (dict(class_weight="balanced"), "class_weight"), (dict(steps_per_epoch=0), "steps_per_epoch"),
                           (dict(steps_per_epoch=2.5), "steps_per_epoch"), (dict(drop_last=True), "drop_last"),
                           (dict(validation_data=demo["valid"], validation_steps=2), "validation_steps")]:
        with pytest.raises(ValueError, match=name):
            model.fit(Batches(x, y), out=out, **keywords, **COMMON)
        assert not out.exists(), keywords
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model.fit(x, y, steps_per_epoch=3, out=out, **COMMON)


def test_validation_steps_takes_that_many_batches_of_an_endless_validation_stream(demo, tmp_path):
    counter = [0]
    history = new_model(demo).fit(Batches(*demo["train"]), validation_data=endless(*demo["valid"], counter),
                                  validation_steps=2, epochs=2, out=tmp_path / "run", **COMMON)
    assert counter[0] == 2 and len(history.history["val_loss"]) == 2


def test_the_next_batch_is_read_while_the_engine_trains_the_current_one(demo, tmp_path):
    x, y = demo["train"]
    second_asked = threading.Event()

    def batches():
        for index, batch in enumerate(Batches(x, y)):
            if index == 1:
                second_asked.set()
            yield batch

    class WaitForTheSecond:
        """Holds the first step's end until the second batch is asked for (not while a callback
        runs: the engine asks for a batch only between its steps)."""
        seen = None

        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                self.seen = second_asked.wait(timeout=60)

    waiting = WaitForTheSecond()
    new_model(demo).fit(batches(), epochs=1, callbacks=[waiting], out=tmp_path / "run", **COMMON)
    assert waiting.seen is True


def test_an_endless_tf_data_dataset_needs_its_steps_before_any_work(demo, tmp_path):
    """Keras would loop for ever on the first epoch, or gather the validation set for ever."""
    ds, _ = ragged_dataset(demo)
    endless_ds, out = ds.batch(16).repeat(), tmp_path / "run"
    model = new_model(demo)
    with pytest.raises(ValueError, match="^validation_steps: validation_data is an endless"):
        model.fit(Batches(*demo["train"]), validation_data=endless_ds, out=out, **COMMON)
    with pytest.raises(ValueError, match="^steps_per_epoch: x is an endless"):
        model.fit(endless_ds, out=out, **COMMON)
    assert not out.exists()
    history = model.fit(endless_ds, validation_data=endless_ds, steps_per_epoch=2, validation_steps=1, epochs=2,
                        out=out, **COMMON)
    assert len(history.history["val_loss"]) == 2


def test_predict_and_evaluate_refuse_an_endless_tf_data_dataset(demo, tmp_path):
    ds, _ = ragged_dataset(demo)
    model = new_model(demo)
    model.fit(Batches(*demo["train"]), out=tmp_path / "run", **COMMON)
    for call in (lambda: model.predict(ds.batch(16).repeat()), lambda: model.evaluate(ds.batch(16).repeat())):
        with pytest.raises(ValueError, match="^x: an endless tf.data.Dataset"):
            call()
    assert model.predict(ds.batch(16).take(2)).shape == (32, demo["labels"])


class Passes(Batches):
    """Batches that count the passes begun and, at each validation batch's end, the batches given."""

    def __init__(self, x, y, size=SIZE):
        super().__init__(x, y, size)
        self.passes = 0

    def __iter__(self):
        self.passes += 1
        return super().__iter__()


def test_a_validation_iterable_read_again_is_streamed_with_the_in_memory_numbers(demo, tmp_path):
    """A re-iterable validation_data (a tf.data.Dataset, a class with __iter__) is read a pass each
    validation, never gathered: at each validation batch's end at most the next batch has been read."""
    streamed_valid = Passes(*demo["valid"])

    class Watch:
        most_ahead = 0

        def on_test_batch_end(self, batch, logs=None):
            read = streamed_valid.given - (streamed_valid.passes - 1) * -(-len(demo["valid"][1]) // SIZE)
            self.most_ahead = max(self.most_ahead, read - (batch + 1))

    watch = Watch()
    streamed = new_model(demo).fit(Batches(*demo["train"]), validation_data=streamed_valid, epochs=2,
                                   callbacks=[watch], out=tmp_path / "streamed", **COMMON)
    gathered = new_model(demo).fit(Batches(*demo["train"]), validation_data=demo["valid"], epochs=2,
                                   out=tmp_path / "memory", **COMMON)
    assert streamed_valid.passes == 2 and watch.most_ahead <= 1
    for key in ("val_loss", "val_accuracy", "val_f1", "loss"):
        assert streamed.history[key] == gathered.history[key], key


def test_validation_steps_of_a_validation_stream_reads_no_batch_past_them(demo, tmp_path):
    """Keras's validation_steps: each validation begins the data again and takes that many batches."""
    valid = Passes(*demo["valid"])
    history = new_model(demo).fit(Batches(*demo["train"]), validation_data=valid, validation_steps=2, epochs=3,
                                  out=tmp_path / "run", **COMMON)
    assert (valid.passes, valid.given) == (3, 6) and len(history.history["val_loss"]) == 3


def test_a_validation_stream_of_batches_larger_than_the_trainings(demo, tmp_path):
    x, y = demo["valid"]
    model = new_model(demo)
    history = model.fit(Batches(*demo["train"]), validation_data=Batches(x, y, size=64), epochs=1,
                        out=tmp_path / "run", **COMMON)
    assert history.history["val_loss"][0] == model.evaluate(x, y, batch_size=64, verbose=0)["loss"]


def test_a_run_that_validated_on_a_stream_resumes_only_given_it_again(demo, tmp_path):
    x, y = demo["train"]
    out = tmp_path / "run"
    new_model(demo).fit(x, y, validation_data=Batches(*demo["valid"]), epochs=1, batch_size=SIZE, out=out, **COMMON)
    with pytest.raises(ValueError, match=r"^validation_data: .* validated on a stream of batches"):
        new_model(demo).fit(x, y, epochs=2, out=out, resume=True, verbose=0)
    history = new_model(demo).fit(x, y, validation_data=Batches(*demo["valid"]), epochs=2, out=out, resume=True,
                                  verbose=0)
    assert len(history.history["val_loss"]) == 1


def test_a_validation_batch_of_another_t_is_refused_naming_validation_data(demo, tmp_path):
    x, y = demo["valid"]
    short = [sample[:-1] for sample in x]
    with pytest.raises(ValueError, match=r"^validation_data: batch 0: its samples have T = "):
        new_model(demo).fit(Batches(*demo["train"]), validation_data=Batches(short, y), out=tmp_path / "run",
                            **COMMON)


def test_a_stream_reads_on_in_fits_thread_once_python_refuses_new_futures(demo):
    """At Python's exit concurrent.futures takes no new work ("cannot schedule new futures after
    shutdown") before fit is asked to stop and save: a streaming fit in a daemon thread raised
    that RuntimeError and saved nothing. The reader shut down stands for it here."""
    from enhanced.stream import Stream
    stream = Stream(Batches(*demo["train"]), "x")
    first = stream.next_image(False)
    stream._ahead.result()  # the read ahead done, then the executor refuses the next
    stream._reader.shutdown(wait=True)
    second, third = stream.next_image(False), stream.next_image(False)
    assert first and second and third and third != second
    stream.close()


def test_an_empty_x_is_refused_naming_x(demo, tmp_path):
    with pytest.raises(ValueError, match=r"^x: no samples"):
        new_model(demo).fit([], np.zeros(0, int), out=tmp_path / "run", **COMMON)
    with pytest.raises(ValueError, match=r"^x: batch 0: its samples have T = "):
        x, y = demo["train"]
        new_model(demo).fit(Batches([sample[:-1] for sample in x], y), out=tmp_path / "run", **COMMON)
