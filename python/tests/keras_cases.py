"""Random small cases for the Keras/ONNX tests: samples as nested lists (the user's to_list()),
their tf.RaggedTensor, the engine's dataset, training run and evaluation of them."""
import csv
import json
import os

import numpy as np
import pytest

import enhanced
from conftest import run_app

BLEND_POOL = [(blend, pool) for blend in enhanced.checkpoint.BLENDS for pool in enhanced.checkpoint.POOLS]


def random_config(rng, blend, pool):
    return enhanced.ModelConfig(vocab_size=int(rng.integers(5, 30)), num_labels=int(rng.integers(2, 6)),
                                embedding_dim=int(rng.integers(1, 7)), hidden=int(rng.integers(1, 6)),
                                seq_len=int(rng.integers(2, 9)), blend=blend, pool=pool)


def random_samples(rng, config, count):
    """`count` samples of T positions [identifier 0..4 ids, auxiliary 0..2 ids, [cur_word]], and labels."""
    V, T = config.vocab_size, config.seq_len
    samples = [[[rng.integers(0, V, rng.integers(0, 5)).tolist(), rng.integers(0, V, rng.integers(0, 3)).tolist(),
                 [int(rng.integers(0, V))]] for _ in range(T)] for _ in range(count)]
    samples[0][0][0] = []  # an empty identifier list is always among them
    return samples, rng.integers(0, config.num_labels, count).tolist()


def ragged(samples):
    """Nested lists (N, T, 3, None) -> tf.RaggedTensor with uniform T and 3 axes (as a user builds it)."""
    import tensorflow as tf
    fields = [field for sample in samples for position in sample for field in position]
    rows = tf.RaggedTensor.from_row_lengths(tf.constant([i for f in fields for i in f], tf.int32, shape=[sum(map(len, fields))]),
                                            [len(f) for f in fields])
    return tf.RaggedTensor.from_uniform_row_length(tf.RaggedTensor.from_uniform_row_length(rows, 3), len(samples[0]))


def engine_dataset(directory, samples, labels):
    """JSONL written here, then `enhanced-data convert` -> .ebin path."""
    jsonl, ebin = directory / "data.jsonl", directory / "data.ebin"
    with open(jsonl, "w") as f:
        for tokens, label in zip(samples, labels):
            f.write(json.dumps({"label": label, "tokens": tokens}) + "\n")
    run_app("enhanced-data", "convert", jsonl, ebin, "--seq-len", len(samples[0]))
    return ebin


def engine_train(ebin, out, steps, config=None, init_from=None, seed=0):
    """A tiny CPU run; a large rate so the weights leave their initialisation. -> last checkpoint."""
    args = ["--data", ebin, "--out", out, "--steps", steps, "--batch-size", 4, "--lr", 0.05, "--seed", seed,
            "--device", "cpu", "--threads", 1, "--quiet"]
    if init_from is not None:
        args += ["--init-from", init_from]
    else:
        args += ["--vocab-size", config.vocab_size, "--num-labels", config.num_labels, "--hidden", config.hidden,
                 "--embedding-dim", config.embedding_dim, "--blend", config.blend, "--pool", config.pool]
    run_app("enhanced-train", *args)
    return out / "last.safetensors"


def engine_eval(ebin, checkpoint, directory):
    """`enhanced-eval --json --predictions` -> (loss, predicted (N,), probability (N,))."""
    predictions = directory / f"{os.path.basename(checkpoint)}.predictions.csv"
    result = json.loads(run_app("enhanced-eval", "--data", ebin, "--checkpoint", checkpoint, "--json",
                                "--predictions", predictions, "--device", "cpu", "--threads", 1).stdout)
    with open(predictions) as f:
        rows = list(csv.DictReader(f))
    return (result["loss"], np.array([int(r["predicted"]) for r in rows]),
            np.array([float(r["probability"]) for r in rows]))


def keras_eval(logits, labels):
    """From logits (N, L): the mean cross-entropy (what enhanced-eval's loss is) and the softmax."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_p[np.arange(len(labels)), labels].mean(), np.exp(log_p)


def assert_engine_agrees(logits, labels, ebin, checkpoint, directory, tolerance=1e-5):
    """The engine's evaluation of `checkpoint` on `ebin` is the one these logits give: the loss and,
    per sample, the probability of the engine's top class within `tolerance` relative, and that
    class Keras' top class. Returns the largest relative difference seen."""
    loss, predicted, probability = engine_eval(ebin, checkpoint, directory)
    keras_loss, softmax = keras_eval(logits, labels)
    mine = softmax[np.arange(len(labels)), predicted]
    loss_difference = abs(keras_loss - loss) / abs(loss)
    probability_difference = float(np.max(np.abs(mine - probability) / probability))
    assert loss_difference <= tolerance, (keras_loss, loss)
    assert probability_difference <= tolerance, (mine, probability)
    assert np.all(mine >= softmax.max(axis=1) * (1 - tolerance)), (predicted, softmax.argmax(axis=1))
    worst = max(loss_difference, probability_difference)
    if predict_app(skip=False):  # and the logits themselves, once enhanced-predict is built
        logits_difference = relative_difference(logits, engine_logits(ebin, checkpoint, directory))
        assert logits_difference <= tolerance, logits_difference
        worst = max(worst, logits_difference)
    return worst


def engine_logits(ebin, checkpoint, directory):
    """`enhanced-predict --logits` -> (N, L) float32."""
    out = directory / f"{os.path.basename(checkpoint)}.logits.npy"
    run_app(predict_app(), "--checkpoint", checkpoint, "--data", ebin, "--logits", out, "--device", "cpu")
    logits = np.load(out)
    assert logits.dtype == np.float32
    return logits


def relative_difference(a, b):
    """max |a - b| over max |b|: the difference relative to the reference's scale."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), np.finfo(np.float32).tiny))


def predict_app(skip=True):
    """The path of enhanced-predict; where it is not built: a skip, or None with skip=False."""
    directory = os.environ.get("ENHANCED_APP_DIR")
    path = os.path.join(directory or "", "enhanced-predict")
    if not directory or not os.access(path, os.X_OK):
        if skip:
            pytest.skip("enhanced-predict is not built in ENHANCED_APP_DIR (the exact-logits comparison runs once it is)")
        return None
    return path
