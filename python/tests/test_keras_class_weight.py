"""fit's class_weight means Keras': each sample weighs w[y] and the batch's loss is the weighted
sum over the batch size (Keras 3's "sum_over_batch_size"), not over the weights' sum (torch's
CrossEntropyLoss(weight=), enhanced-train's default). A resumed run keeps the run's mean."""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras  # noqa: E402

from enhanced import Model, read_ebin  # noqa: E402
from enhanced.safetensors import read_metadata  # noqa: E402

B = 24  # one batch: the samples fit trains on


@pytest.fixture(scope="module")
def batch(demo_data):
    """The demo set's first B samples and labels, and class weights that tell the means apart."""
    train = read_ebin(demo_data / "train.ebin")
    x, y = train.to_lists()[:B], np.array(train.labels[:B])
    weights = {label: 0.5 + 0.75 * label for label in range(train.num_labels)}
    sample_weights = np.array([weights[int(label)] for label in y], dtype=np.float32)
    assert abs(sample_weights.sum() - B) > 1, "the weights must not average 1: the two means would agree"
    return dict(x=x, y=y, labels=train.num_labels, seq_len=train.seq_len, vocab=train.max_token_id + 1,
                weights=weights, sample_weights=sample_weights)


def tiny_model(batch):
    return Model(vocab_size=batch["vocab"], num_labels=batch["labels"], seq_len=batch["seq_len"], embedding_dim=8,
                 hidden=4)


def one_step(model, batch, out, **options):
    """fit on the batch for one step (from the model's weights); that step's loss."""
    history = model.fit(batch["x"], batch["y"], epochs=1, batch_size=B, shuffle=False, out=out, seed=3, verbose=0,
                        lr=0.01, **options)
    return history.history["loss"][0]


def keras_fit_first_loss(logits, labels, class_weight):
    """Keras' own fit, first batch: a model whose output is its input (these logits), compiled with
    SparseCategoricalCrossentropy(from_logits=True) and trained with class_weight at rate 0."""
    count, num_labels = logits.shape
    model = keras.Sequential([keras.Input((num_labels,)),
                              keras.layers.Dense(num_labels, kernel_initializer="identity", bias_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(0.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(logits, labels, batch_size=count, epochs=1, class_weight=class_weight, shuffle=False,
                        verbose=0)
    return history.history["loss"][0]


def recorded_mean(out):
    return json.loads(read_metadata(os.path.join(out, "optimizer.safetensors"))["run_options"])["class_weight_mean"]


def test_fit_class_weight_is_keras_loss(batch, tmp_path):
    model = tiny_model(batch)
    one_step(model, batch, tmp_path / "start")  # weights to start from, and to take logits of
    logits = model.predict(batch["x"], logits=True).astype(np.float32)
    loss = one_step(model, batch, tmp_path / "weighted", class_weight=batch["weights"])
    keras_loss = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        batch["y"], logits, sample_weight=batch["sample_weights"]))
    assert loss == pytest.approx(keras_loss, rel=1e-5)
    assert loss == pytest.approx(keras_fit_first_loss(logits, batch["y"], batch["weights"]), rel=1e-5)
    # Not torch's mean, over the weights' sum: the test tells the two apart.
    torch_loss = keras_loss * B / float(batch["sample_weights"].sum())
    assert abs(loss - torch_loss) > 1e-2 * keras_loss
    assert recorded_mean(tmp_path / "weighted") == "batch"
    assert recorded_mean(tmp_path / "start") == "weights"  # no class_weight: enhanced-train's default


def test_a_resume_keeps_the_runs_mean(batch, tmp_path):
    model = tiny_model(batch)
    model.fit(batch["x"], batch["y"], epochs=1, batch_size=8, shuffle=False, out=tmp_path / "run", seed=3,
              verbose=0, class_weight=batch["weights"])
    with pytest.raises(ValueError, match="class_weight_mean weights conflicts with the run being resumed"):
        model.fit(batch["x"], batch["y"], epochs=2, out=tmp_path / "run", resume=True, verbose=0,
                  class_weight=batch["weights"], class_weight_mean="weights")
    model.fit(batch["x"], batch["y"], epochs=2, out=tmp_path / "run", resume=True, verbose=0,
              class_weight=batch["weights"])
    assert recorded_mean(tmp_path / "run") == "batch"
    # torch's mean stays a choice: class_weight_mean="weights", as enhanced-train --class-weight-mean.
    torch = tiny_model(batch)
    torch.fit(batch["x"], batch["y"], epochs=1, batch_size=8, shuffle=False, out=tmp_path / "torch", seed=3,
              verbose=0, class_weight=batch["weights"], class_weight_mean="weights")
    assert recorded_mean(tmp_path / "torch") == "weights"
