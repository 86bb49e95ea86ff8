#!/usr/bin/env python3
"""Loads an engine checkpoint into the Keras model (enhanced.keras) and predicts samples
of an .ebin there, from a (B, T, 3, None) tf.RaggedTensor as a user's own code would hold them;
then compares with the engine's answer for the same samples: enhanced-predict's logits (.npy)
where given, else enhanced-eval's predictions CSV (top class and its probability)."""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def samples_ragged(path, count, app_dir):
    """`count` samples spread evenly over an .ebin (the test set is in label order) as a
    tf.RaggedTensor (count, T, 3, None), their indices and labels: through enhanced.read_ebin
    where the package has it, else `enhanced-data convert` to JSON Lines."""
    import tensorflow as tf
    import enhanced
    if hasattr(enhanced, "read_ebin"):
        data = enhanced.read_ebin(path)
        picked = np.unique(np.linspace(0, data.num_samples - 1, count).astype(np.int64))
        return tf.gather(data.to_ragged(), picked), picked, np.asarray(data.labels)[picked]
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = os.path.join(tmp, "samples.jsonl")
        subprocess.run([os.path.join(app_dir, "enhanced-data"), "convert", path, jsonl], check=True,
                       stdout=subprocess.DEVNULL)
        with open(jsonl) as f:
            rows = f.readlines()
    picked = np.unique(np.linspace(0, len(rows) - 1, count).astype(np.int64))
    rows = [json.loads(rows[i]) for i in picked]
    tokens = tf.ragged.constant([row["tokens"] for row in rows], dtype=tf.int32, ragged_rank=3)
    return tokens, picked, np.array([row["label"] for row in rows])


def softmax(logits):
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def engine_answer(args, picked):
    """(top class, its probability) of the picked samples from the engine, and their logits when
    available."""
    if args.engine_logits and os.path.exists(args.engine_logits):
        logits = np.load(args.engine_logits)[picked]
        probs = softmax(logits)
        return probs.argmax(axis=1), probs.max(axis=1), logits
    with open(args.engine_predictions) as f:
        rows = list(csv.DictReader(f))
    rows = [rows[i] for i in picked]
    return (np.array([int(r["predicted"]) for r in rows]), np.array([float(r["probability"]) for r in rows]), None)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help=".ebin")
    p.add_argument("--labels", required=True, help="labels.txt (line i: label i's name)")
    p.add_argument("--samples", type=int, default=10, help="how many, spread evenly over the file")
    p.add_argument("--engine-logits", help="enhanced-predict --logits output (.npy)")
    p.add_argument("--engine-predictions", help="enhanced-eval --predictions output (.csv)")
    p.add_argument("--app-dir", required=True)
    args = p.parse_args(argv)
    import enhanced
    from enhanced.keras import EnhancedModel, load_into_keras

    config, _ = enhanced.load_checkpoint(args.checkpoint)
    model = EnhancedModel(config)
    load_into_keras(model, args.checkpoint)
    x, picked, labels = samples_ragged(args.data, args.samples, args.app_dir)
    logits = model(x).numpy()  # (n, L)
    probs = softmax(logits)
    names = open(args.labels).read().split()
    top, top_p, engine_logits = engine_answer(args, picked)
    print(f"Keras ({config}), {len(labels)} test samples:")
    print(f"{'sample':>6} {'true':>16} {'keras':>16} {'p':>6} {'engine':>16} {'p':>6}")
    for s in range(len(labels)):
        k = int(probs[s].argmax())
        print(f"{picked[s]:>6} {names[labels[s]]:>16} {names[k]:>16} {probs[s, k]:6.3f} {names[top[s]]:>16} {top_p[s]:6.3f}")
    agree = int((probs.argmax(axis=1) == top).sum())
    diff = float(np.abs(probs.max(axis=1) - top_p).max())
    print(f"top class: Keras and the engine agree on {agree}/{len(labels)}; top probability differs by at most {diff:.2e}")
    if engine_logits is not None:
        print(f"logits differ by at most {float(np.abs(logits - engine_logits).max()):.2e} (absolute)")
    if agree != len(labels) or diff > 1e-4:
        sys.exit("error: the Keras model does not reproduce the engine's predictions")


if __name__ == "__main__":
    main(sys.argv[1:])
