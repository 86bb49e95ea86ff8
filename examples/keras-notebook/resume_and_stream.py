"""What a Keras user does next, in one script: fit again (it continues from the model's weights),
stop a run early and resume it to its planned end (the same bytes as a run never stopped), and
train on a tf.data.Dataset read batch by batch. Run: python examples/keras-notebook/resume_and_stream.py"""
import filecmp
import numpy as np
import tensorflow as tf

import enhanced
from toy_data import ragged

rng = np.random.default_rng(0)  # toy_data.ragged: a tf.RaggedTensor (n, T=16, 3, None) and labels
(x, y), (xv, yv) = ragged(512, rng), ragged(128, rng)
shape = dict(vocab_size=300, num_labels=3, seq_len=16, hidden=16)

# 1. fit again continues from the weights the model holds, as a Keras model's does.
model = enhanced.Model(**shape)
first = model.fit(x, y, epochs=2, batch_size=32, lr=0.01, verbose=0).history["loss"]
again = model.fit(x, y, epochs=1, batch_size=32, lr=0.01, verbose=0).history["loss"]
print(f"loss by epoch {np.round(first, 3).tolist()}, then the next fit's epoch {np.round(again, 3).tolist()}")
assert again[0] < first[-1], "the second fit started from the first one's weights"

# 2. A 3-epoch run stopped after its first epoch, then resumed: keywords not given take the
#    run's recorded values (epochs=3, batch_size=32, lr), and the end is the uninterrupted run's.
class StopAfterFirstEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True
plan = dict(epochs=3, batch_size=32, lr=0.01, verbose=0)
enhanced.Model(**shape).fit(x, y, validation_data=(xv, yv), out="runs/stopped", callbacks=[StopAfterFirstEpoch()],
                            overwrite=True, **plan)
resumed = enhanced.Model(**shape).fit(x, y, validation_data=(xv, yv), out="runs/stopped", resume=True, verbose=0)
enhanced.Model(**shape).fit(x, y, validation_data=(xv, yv), out="runs/straight", overwrite=True, **plan)
same = filecmp.cmp("runs/stopped/last.safetensors", "runs/straight/last.safetensors", shallow=False)
print(f"resumed epochs {resumed.epoch}; the same bytes as the run never stopped: {same}")
assert same and resumed.epoch == [1, 2]

# 3. A tf.data.Dataset is read batch by batch as the engine trains: each batch one step.
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=0).batch(32).repeat()
history = enhanced.Model(**shape).fit(train, steps_per_epoch=16, epochs=2, validation_data=(xv, yv), lr=0.01,
                                      verbose=0)
print(f"streamed: {history.params['steps']} steps an epoch, val_accuracy {np.round(history.history['val_accuracy'], 3).tolist()}")
