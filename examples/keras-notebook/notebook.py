"""A Keras user's notebook in one script: a tf.RaggedTensor in, enhanced.Model.fit in this process,
predict, and the trained model back in Keras. Run: python examples/keras-notebook/notebook.py
(after `pip install ./python`; TensorFlow for the Keras half)."""
import numpy as np
import tensorflow as tf

import enhanced
import enhanced.keras
from toy_data import ragged

rng = np.random.default_rng(0)  # toy_data.ragged: a tf.RaggedTensor (n, T=16, 3, None) and labels
(x, y), (xv, yv) = ragged(768, rng), ragged(256, rng)

model = enhanced.Model(vocab_size=300, num_labels=3, seq_len=16, hidden=16, label_names=["red", "green", "blue"])
history = model.fit(x, y, validation_data=(xv, yv), epochs=4, batch_size=32, lr=0.01, verbose=2)
print("validation", model.evaluate(xv, yv), "first predictions", model.predict_labels(xv)[:5])
keras_model = enhanced.keras.EnhancedModel(model.config)
enhanced.keras.load_into_keras(keras_model, model.checkpoint)
gap = np.abs(keras_model(xv).numpy() - model.predict(xv, logits=True)).max()
print(f"Keras reproduces the engine's logits within {gap:.1e}")
assert gap < 1e-4
