"""enhanced.keras: the Keras model from an engine checkpoint computes the engine's model, and a
model trained in Keras goes into the engine and comes back (docs/from-keras.md)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras  # noqa: E402

import enhanced  # noqa: E402
from enhanced.keras import (EnhancedModel, checkpoint_from_keras, load_into_keras,  # noqa: E402
                            model_from_checkpoint, ragged_to_csr)
from keras_cases import (BLEND_POOL, assert_engine_agrees, engine_dataset, engine_logits, engine_train,  # noqa: E402
                         keras_eval, predict_app, ragged, random_config, random_samples, relative_difference)


def engine_case(tmp_path, seed, blend, pool, steps=8):
    rng = np.random.default_rng(seed)
    config = random_config(rng, blend, pool)
    samples, labels = random_samples(rng, config, int(rng.integers(12, 21)))
    ebin = engine_dataset(tmp_path, samples, labels)
    return config, samples, labels, ebin, engine_train(ebin, tmp_path / "engine", steps, config=config, seed=seed)


@pytest.mark.parametrize("blend,pool", BLEND_POOL)
def test_keras_model_from_engine_checkpoint_gives_engine_results(tmp_path, blend, pool):
    config, samples, labels, ebin, checkpoint = engine_case(tmp_path, 100 + BLEND_POOL.index((blend, pool)), blend, pool)
    model = EnhancedModel(config)
    assert load_into_keras(model, checkpoint) == config
    logits = model(ragged(samples)).numpy()
    assert logits.shape == (len(samples), config.num_labels) and logits.dtype == np.float32
    print(f"{blend}/{pool} {config}: engine eval vs Keras, max relative difference "
          f"{assert_engine_agrees(logits, labels, ebin, checkpoint, tmp_path):.2e}")
    # The same numbers from tf.ragged.constant's input (whose T axis is ragged).
    assert relative_difference(model(tf.ragged.constant(samples)).numpy(), logits) <= 1e-6


@pytest.mark.parametrize("blend,pool", BLEND_POOL)
def test_keras_logits_are_enhanced_predict_logits(tmp_path, blend, pool):
    predict_app()
    config, samples, labels, ebin, checkpoint = engine_case(tmp_path, 200 + BLEND_POOL.index((blend, pool)), blend, pool)
    from_engine = engine_logits(ebin, checkpoint, tmp_path)
    logits = model_from_checkpoint(checkpoint)(ragged(samples)).numpy()
    assert from_engine.shape == logits.shape == (len(samples), config.num_labels)
    difference = relative_difference(logits, from_engine)
    print(f"{blend}/{pool}: enhanced-predict vs Keras logits, max relative difference {difference:.2e}")
    assert difference <= 1e-5


def keras_variables(model):
    return [v.numpy() for v in model.weights]


def train_in_keras(model, inputs, labels):
    """model.fit as a user would; checks that the loss fell and that every weight moved."""
    model.compile(optimizer=keras.optimizers.Adam(0.02), jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before, initial = keras_eval(model(inputs).numpy(), labels)[0], keras_variables(model)
    model.fit(inputs, np.array(labels), batch_size=4, epochs=3, verbose=0)
    assert keras_eval(model(inputs).numpy(), labels)[0] < before
    assert all(not np.array_equal(a, b) for a, b in zip(initial, keras_variables(model)))  # the table too


# Both blends and both pools; two of them (a blend and a pool each) trained in Keras first (a fit
# costs a trace of the whole model), the others straight from Keras' initialisation.
@pytest.mark.parametrize("blend,pool,fit", [(*case, k % 3 == 0) for k, case in enumerate(BLEND_POOL)])
def test_keras_to_engine_and_back(tmp_path, blend, pool, fit):
    rng = np.random.default_rng(300 + BLEND_POOL.index((blend, pool)))
    config = random_config(rng, blend, pool)
    samples, labels = random_samples(rng, config, 16)
    inputs = ragged(samples)
    keras.utils.set_random_seed(300)  # Keras' initialisation and fit, so that a run repeats
    model = EnhancedModel(config)
    if fit:
        train_in_keras(model, inputs, labels)
    trained = keras_variables(model)

    # Keras -> checkpoint -> Keras without engine steps: exact.
    exported = tmp_path / "keras.safetensors"
    assert checkpoint_from_keras(model, exported) == config
    _, tensors = enhanced.load_checkpoint(exported)
    for k, suffix in enumerate(("", "_reverse")):
        kernel, recurrent, bias = trained[1 + 3 * k: 4 + 3 * k]
        assert np.array_equal(tensors[f"lstm.weight_ih_l0{suffix}"], kernel.T)
        assert np.array_equal(tensors[f"lstm.weight_hh_l0{suffix}"], recurrent.T)
        assert np.array_equal(tensors[f"lstm.bias_hh_l0{suffix}"], bias)
        assert not tensors[f"lstm.bias_ih_l0{suffix}"].any()
    assert np.array_equal(tensors["dense.weight"], trained[7].T)
    back = model_from_checkpoint(exported)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(keras_variables(back), trained))
    logits = model(inputs).numpy()
    assert np.array_equal(back(inputs).numpy(), logits)

    # The engine reads it as the same model, trains on from it, and Keras takes the result back.
    ebin = engine_dataset(tmp_path, samples, labels)
    assert_engine_agrees(logits, labels, ebin, exported, tmp_path)
    continued = engine_train(ebin, tmp_path / "continued", 5, init_from=exported)
    config_after, after = enhanced.load_checkpoint(continued)
    assert config_after == config
    assert not np.array_equal(after["dense.weight"], tensors["dense.weight"])
    # The engine trains both biases: the same gradient and Adam moments for each, so bias_ih (from
    # 0) moves as bias_hh does (a direction that never wins the max-pool gets no gradient).
    for suffix in ("", "_reverse"):
        moved = after[f"lstm.bias_hh_l0{suffix}"] - tensors[f"lstm.bias_hh_l0{suffix}"]
        np.testing.assert_allclose(after[f"lstm.bias_ih_l0{suffix}"], moved, rtol=1e-3, atol=1e-6)
    assert after["lstm.bias_ih_l0"].any() or after["lstm.bias_ih_l0_reverse"].any()
    assert load_into_keras(model, continued) == config
    for k, suffix in enumerate(("", "_reverse")):
        np.testing.assert_array_equal(model.bilstm.weights[2 + 3 * k].numpy(),
                                      after[f"lstm.bias_ih_l0{suffix}"] + after[f"lstm.bias_hh_l0{suffix}"])
    print(f"{blend}/{pool} round trip: engine eval vs Keras after engine steps, max relative difference "
          f"{assert_engine_agrees(model(inputs).numpy(), labels, ebin, continued, tmp_path):.2e}")


def user_model(config, hidden=None):
    """A user's own functional Keras model of docs/model.md's layers, weights in the same order."""
    from enhanced.keras import RaggedBlendEmbedding
    inputs = keras.Input(shape=(config.seq_len, 3, None), dtype="int32", ragged=True)
    x = RaggedBlendEmbedding(config.vocab_size, config.embedding_dim, config.seq_len, config.blend)(inputs)
    y = keras.layers.Bidirectional(keras.layers.LSTM(hidden or config.hidden, return_sequences=True))(x)
    pooled = keras.layers.Lambda(lambda v: tf.reduce_max(v, axis=2 if config.pool == "feature" else 1))(y)
    return keras.Model(inputs, keras.layers.Dense(config.num_labels)(pooled))


def test_bad_checkpoints_and_models(trained_checkpoint, tmp_path):
    config, _ = enhanced.load_checkpoint(trained_checkpoint)
    other = enhanced.ModelConfig(**{**config.__dict__, "hidden": config.hidden + 1})
    with pytest.raises(ValueError, match="is not the Keras model's"):
        load_into_keras(EnhancedModel(other), trained_checkpoint)
    with pytest.raises(ValueError, match=r"forward kernel has shape \[8, 20\].*needs \[8, 16\]"):
        load_into_keras(user_model(config, hidden=5), trained_checkpoint)
    with pytest.raises(ValueError, match=r"has 2 weights, the engine's model has 9"):
        load_into_keras(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), trained_checkpoint)
    target = tmp_path / "out.safetensors"
    with pytest.raises(ValueError, match="forward kernel has shape"):
        checkpoint_from_keras(user_model(config, hidden=5), target, config=config)
    with pytest.raises(ValueError, match="needs config="):
        checkpoint_from_keras(user_model(config), target)
    assert not target.exists()
    with pytest.raises(ValueError, match="takes an enhanced.ModelConfig"):
        EnhancedModel({"hidden": 4})


def test_users_own_model_takes_the_checkpoint(trained_checkpoint, demo_data, tmp_path):
    config, _ = enhanced.load_checkpoint(trained_checkpoint)
    model = user_model(config)
    load_into_keras(model, trained_checkpoint)
    reference = model_from_checkpoint(trained_checkpoint)
    rng = np.random.default_rng(5)
    samples, _ = random_samples(rng, config, 3)
    assert np.array_equal(model(ragged(samples)).numpy(), reference(ragged(samples)).numpy())
    target = tmp_path / "user.safetensors"
    checkpoint_from_keras(model, target, config=config)
    assert enhanced.load_checkpoint(target)[0] == config


def test_bad_ragged_inputs():
    config = enhanced.ModelConfig(vocab_size=9, num_labels=2, embedding_dim=3, hidden=2, seq_len=3)
    model = EnhancedModel(config)
    samples, _ = random_samples(np.random.default_rng(1), config, 2)
    model(ragged(samples))  # the good input runs

    def case(change):
        bad = [[[list(field) for field in position] for position in sample] for sample in samples]
        change(bad)
        return bad
    with pytest.raises(ValueError, match="the input has T = 4 positions per sample, the model's T is 3"):
        model(ragged(case(lambda s: [sample.append(sample[0]) for sample in s])))
    with pytest.raises(ValueError, match="every sample must have T = 3 positions: sample 1 has 2"):
        model(tf.ragged.constant(case(lambda s: s[1].pop())))
    with pytest.raises(ValueError, match=r"field 2 \(cur_word\) must hold exactly one id: sample 1, position 2 holds 2"):
        model(ragged(case(lambda s: s[1][2][2].append(0))))
    with pytest.raises(ValueError, match="sample 0, position 1 holds 0"):
        model(ragged(case(lambda s: s[0][1][2].clear())))
    with pytest.raises(ValueError, match="every position must have 3 fields: sample 1, position 0 has 2"):
        model(tf.ragged.constant(case(lambda s: s[1][0].pop())))
    with pytest.raises(ValueError, match=r"cur_word ids must be in \[0, 9\): sample 1, position 1 holds 9"):
        model(ragged(case(lambda s: s[1][1][2].__setitem__(0, 9))))
    with pytest.raises(ValueError, match=r"identifier ids must be in \[0, 9\)"):
        model(ragged(case(lambda s: s[0][2][0].append(-1))))
    with pytest.raises(ValueError, match="must be a tf.RaggedTensor"):
        model(tf.zeros((2, 3, 3, 1), tf.int32))
    with pytest.raises(ValueError, match="must be integers"):
        model(tf.cast(ragged(samples), tf.float32))
    # Inside a tf.function (predict, fit) the same check is a graph assertion with the same words.
    with pytest.raises(tf.errors.InvalidArgumentError, match="field 2 \\(cur_word\\) must hold exactly one id"):
        model.predict(ragged(case(lambda s: s[1][2][2].append(0))), verbose=0)


def test_csr_components_round_trip():
    config = enhanced.ModelConfig(vocab_size=9, num_labels=2, embedding_dim=3, hidden=2, seq_len=3)
    samples, _ = random_samples(np.random.default_rng(2), config, 4)
    ids, lengths, cur = (t.numpy() for t in ragged_to_csr(ragged(samples), config.seq_len))
    assert ids.tolist() == [i for sample in samples for position in sample for i in position[0]]
    assert lengths.tolist() == [[len(position[0]) for position in sample] for sample in samples]
    assert cur.tolist() == [[position[2][0] for position in sample] for sample in samples]
    model = EnhancedModel(config)
    assert np.array_equal(model.logits_from_csr(ids, lengths, cur).numpy(), model(ragged(samples)).numpy())


def small_case(seed, count=8):
    config = enhanced.ModelConfig(vocab_size=9, num_labels=3, embedding_dim=3, hidden=2, seq_len=3)
    samples, labels = random_samples(np.random.default_rng(seed), config, count)
    return config, samples, ragged(samples), np.array(labels)


def compiled(model, rate=0.05):
    model.compile(optimizer=keras.optimizers.Adam(rate), jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_keras_file_saves_and_loads(tmp_path):
    """model.save("m.keras") and keras.models.load_model with no custom_objects (the classes are
    registered by `import enhanced.keras`): the same config, bit-equal weights and logits."""
    config, samples, inputs, labels = small_case(11)
    config = enhanced.ModelConfig(**{**config.__dict__, "blend": "scalar-mean", "pool": "time"})  # not the defaults
    keras.utils.set_random_seed(11)
    model = compiled(EnhancedModel(config))
    model.fit(inputs, labels, epochs=1, batch_size=4, verbose=0)  # trained, so the optimizer has its state
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is EnhancedModel and loaded.config == config and loaded.built
    assert all(a.tobytes() == b.tobytes() for a, b in zip(keras_variables(loaded), keras_variables(model)))
    assert np.array_equal(loaded(inputs).numpy(), model(inputs).numpy())
    assert isinstance(loaded.loss, keras.losses.SparseCategoricalCrossentropy)  # compile() came back too
    assert [v.numpy().tobytes() for v in loaded.optimizer.variables] == [v.numpy().tobytes()
                                                                         for v in model.optimizer.variables]
    # The layer alone, as a user's functional model holds it.
    layer = keras.layers.deserialize(keras.layers.serialize(model.embedding))
    assert (layer.vocab_size, layer.embedding_dim, layer.seq_len, layer.blend) == (9, 3, 3, config.blend)


def test_backup_and_restore_on_a_fresh_model(tmp_path):
    """keras.callbacks.BackupAndRestore on a model that was never called: the interrupted fit's
    weights after its first epoch are what the fresh model starts its second epoch from."""
    config, _, inputs, labels = small_case(12)

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("interrupted after epoch 0")

    class Record(keras.callbacks.Callback):
        epochs, weights = [], []

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append(epoch)
            self.weights.append(keras_variables(self.model))

    backup = str(tmp_path / "backup")
    keras.utils.set_random_seed(1)
    first = compiled(EnhancedModel(config))
    with pytest.raises(RuntimeError, match="interrupted after epoch 0"):
        first.fit(inputs, labels, epochs=3, batch_size=4, shuffle=False, verbose=0,
                  callbacks=[keras.callbacks.BackupAndRestore(backup), Interrupt()])
    after_epoch_0 = keras_variables(first)
    keras.utils.set_random_seed(2)
    fresh = compiled(EnhancedModel(config))
    assert not np.array_equal(keras_variables(fresh)[0], after_epoch_0[0])
    history = fresh.fit(inputs, labels, epochs=3, batch_size=4, shuffle=False, verbose=0,
                        callbacks=[keras.callbacks.BackupAndRestore(backup), Record()])
    assert Record.epochs == [1, 2] and len(history.history["loss"]) == 2
    assert all(a.tobytes() == b.tobytes() for a, b in zip(Record.weights[0], after_epoch_0))


def test_id_checks_hold_in_graph_mode():
    """Inside tf.function (and predict) an id outside [0, V) is the documented assertion, every
    time: the gathers wait for the checks (before, a gather could fail first with its own words)."""
    config, samples, _, _ = small_case(13, count=2)
    model = EnhancedModel(config)
    graph = tf.function(lambda x: model(x))
    csr_graph = tf.function(lambda ids, lengths, cur: model.logits_from_csr(ids, lengths, cur))

    def case(change):
        bad = [[[list(field) for field in position] for position in sample] for sample in samples]
        change(bad)
        return ragged(bad)
    cases = [(case(lambda s: s[1][1][2].__setitem__(0, 9)), r"cur_word ids must be in \[0, 9\)"),
             (case(lambda s: s[0][2][0].append(9)), r"identifier ids must be in \[0, 9\)"),
             (case(lambda s: s[1][0][0].append(-1)), r"identifier ids must be in \[0, 9\)")]
    for bad, message in cases:
        csr = ragged_to_csr(bad, config.seq_len)
        for _ in range(5):  # the order of unchained graph ops varies from run to run
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                graph(bad)
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                csr_graph(*csr)
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            model.predict(bad, verbose=0)
    assert graph(ragged(samples)).shape == (2, config.num_labels)  # the good input still runs


def test_tensorboard_callback_in_keras_fit(tmp_path):
    """enhanced.callbacks.TensorBoard is a Keras-protocol object: keras.Model.fit drives it, and
    TensorBoard reads back History's numbers, per epoch, in Keras' layout."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from enhanced.callbacks import TensorBoard
    config, _, inputs, labels = small_case(14)
    keras.utils.set_random_seed(14)
    model = EnhancedModel(config)
    model.compile(optimizer=keras.optimizers.Adam(0.05), jit_compile=False, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(inputs, labels, validation_data=(inputs, labels), epochs=2, batch_size=4, verbose=0,
                        callbacks=[TensorBoard(tmp_path / "logs")])
    for folder, prefix in (("train", ""), ("validation", "val_")):
        events = EventAccumulator(str(tmp_path / "logs" / folder))
        events.Reload()
        for name in ("loss", "accuracy"):
            assert [(e.step, e.value) for e in events.Scalars(f"epoch_{name}")] == \
                [(k, float(np.float32(v))) for k, v in enumerate(history.history[prefix + name])]
    assert len(events.Scalars("evaluation_loss_vs_iterations")) == 2
