"""The model in TensorFlow/Keras, timed on a bench case. Prints one JSON object.

  --design vectorised: the fix a user would write (ragged gather, mean over the ragged axis with
                       the empty case handled), Bidirectional(LSTM), max over features, Dense.
  --design original:   the original layer: an Embedding subclass whose call walks the batch with
                       tf.map_fn over samples and, inside, tf.map_fn over positions with a tf.cond
                       for an empty identifier, and tf.reduce_mean without an axis (the contract's
                       scalar-mean blend), run as a tf.function.

  --bf16:              Keras' mixed_bfloat16 policy (bfloat16 compute, FP32 variables): its LSTM
                       keeps the gates and the cell state in bfloat16 too, unlike the engine.

usage: peer_tf.py CASE_DIR --design vectorised|original --threads N [--warmup W] [--repeats R] [--bf16]"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--design", choices=("vectorised", "original"), required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="keras.mixed_precision policy mixed_bfloat16")
    return parser.parse_args()


args = parse()
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(args.threads)
import keras  # noqa: E402

from case_io import load_case, timed  # noqa: E402

if args.bf16:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")


class OriginalBlend(keras.layers.Layer):
    """The original design, walking (B, T, 3, ragged) with nested map_fn."""

    def __init__(self, table, seq_len, **kwargs):
        super().__init__(**kwargs)
        self.table = self.add_weight(shape=table.shape, initializer=keras.initializers.Constant(table), name="embeddings")
        self.seq_len = seq_len

    def call(self, tokens):  # RaggedTensor (B, T, 3, None)
        dim = self.table.shape[1]

        def position(fields):  # RaggedTensor (3, None)
            identifier, cur = fields[0], fields[2]
            current = tf.gather(self.table, cur[0])
            return tf.cond(tf.size(identifier) == 0, lambda: current,
                           lambda: 0.5 * tf.reduce_mean(tf.gather(self.table, identifier)) + 0.5 * current)

        def sample(positions):  # RaggedTensor (T, 3, None)
            return tf.map_fn(position, positions, fn_output_signature=tf.TensorSpec((dim,), tf.float32))

        return tf.map_fn(sample, tokens, fn_output_signature=tf.TensorSpec((self.seq_len, dim), tf.float32))


def vectorised_blend(table, ids, offsets, cur, blend):
    ragged = tf.RaggedTensor.from_row_splits(ids, offsets)
    counts = tf.cast(ragged.row_lengths(), tf.float32)[:, None]
    gathered = tf.gather(table, ragged)  # (P, None, D)
    current = tf.gather(table, cur)
    if blend == "mean":
        identifier = tf.reduce_sum(gathered, axis=1) / tf.maximum(counts, 1.0)
    else:
        identifier = tf.reduce_sum(gathered, axis=[1, 2])[:, None] / (tf.maximum(counts, 1.0) * table.shape[1])
    return tf.where(counts > 0, 0.5 * identifier + 0.5 * current, current)


def main():
    c, w, batch = load_case(args.case)
    B, T, D, H, L = c["batch_size"], c["seq_len"], c["embedding_dim"], c["hidden"], c["num_labels"]
    if args.design == "original" and c["blend"] != "scalar-mean":
        sys.exit("peer_tf.py: the original design is the scalar-mean blend; dump the case with --blend scalar-mean")
    lstm = keras.layers.Bidirectional(keras.layers.LSTM(H, return_sequences=True))
    dense = keras.layers.Dense(L)
    lstm.build((B, T, D))
    dense.build((B, T if c["pool"] == "feature" else 2 * H))
    lstm.set_weights([w["lstm.weight_ih_l0"].T, w["lstm.weight_hh_l0"].T, w["lstm.bias_ih_l0"] + w["lstm.bias_hh_l0"],
                      w["lstm.weight_ih_l0_reverse"].T, w["lstm.weight_hh_l0_reverse"].T,
                      w["lstm.bias_ih_l0_reverse"] + w["lstm.bias_hh_l0_reverse"]])
    dense.set_weights([w["dense.weight"].T, w["dense.bias"]])
    offsets = tf.constant(batch["identifier_offsets"].astype(np.int64))
    ids = tf.constant(batch["identifier_ids"].astype(np.int64))
    cur = tf.constant(batch["cur_word_ids"].astype(np.int64))
    labels = tf.constant(batch["labels"].astype(np.int64))
    if args.design == "original":
        blend_layer = OriginalBlend(w["embedding.weight"], T)
        identifier = tf.RaggedTensor.from_row_splits(ids, offsets)
        empty = tf.RaggedTensor.from_row_splits(tf.zeros([0], tf.int64), tf.zeros([B * T + 1], tf.int64))
        current = tf.RaggedTensor.from_row_splits(cur, tf.range(B * T + 1, dtype=tf.int64))
        fields = tf.concat([identifier[:, None], empty[:, None], current[:, None]], axis=1)  # (P, 3, None)
        tokens = tf.RaggedTensor.from_uniform_row_length(fields, T)  # (B, T, 3, None)
        table = blend_layer.table
        embed = lambda: blend_layer(tokens)  # noqa: E731
    else:
        table = tf.Variable(w["embedding.weight"])
        embed = lambda: tf.reshape(vectorised_blend(table, ids, offsets, cur, c["blend"]), (B, T, D))  # noqa: E731
    variables = [table] + lstm.trainable_variables + dense.trainable_variables
    optimizer = keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-7)
    optimizer.build(variables)

    def logits():
        y = lstm(embed())
        pooled = tf.reduce_max(y, axis=2) if c["pool"] == "feature" else tf.reduce_max(y, axis=1)
        return dense(pooled)

    def loss_of(output):
        output = tf.cast(output, tf.float32)  # the loss in FP32, as the mixed-precision guide has it
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=output))

    @tf.function
    def inference_step():
        return loss_of(logits())

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_of(logits())
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    loss = float(inference_step())

    inference = timed(lambda: float(inference_step()), args.warmup, args.repeats)
    train = timed(lambda: float(train_step()), args.warmup, args.repeats)
    print(json.dumps({"peer": f"tensorflow-{args.design}" + ("-bf16" if args.bf16 else ""), "version": tf.__version__,
                      "threads": args.threads, "precision": "mixed_bfloat16" if args.bf16 else "fp32",
                      "batch_size": B, "loss": loss, "times": {"train step": train, "inference step": inference}}))


if __name__ == "__main__":
    main()
