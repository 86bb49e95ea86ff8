"""The examples' toy task: n samples of T positions, each position's three fields ragged
(identifier ids, auxiliary ids, [current word]) as a tf.RaggedTensor (n, T, 3, None), and a label
each: the first position's current word mod 3."""
import numpy as np
import tensorflow as tf


def ragged(n, rng, T=16, V=300):
    rows = [[[rng.integers(1, V, rng.integers(0, 4)).tolist(), [], [int(rng.integers(1, V))]] for _ in range(T)]
            for _ in range(n)]
    return tf.ragged.constant(rows, dtype=tf.int64), np.array([row[0][2][0] % 3 for row in rows])
