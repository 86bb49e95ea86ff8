"""enhanced.callbacks.TensorBoard and `python -m enhanced.tensorboard`: TensorBoard's own
EventAccumulator reads back, in Keras' layout, the values and steps of the logs given to the
callback and of a CLI run's metrics.jsonl, also while the run is still writing it (--follow)."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import run_app
from enhanced.callbacks import TensorBoard
from enhanced.tensorboard import main as tensorboard_main

VALID = ("loss", "accuracy", "f1")


def curves(log_dir):
    """{(folder, tag): [(step, value), ...]} of every scalar TensorBoard reads in log_dir."""
    found = {}
    for folder in ("train", "validation"):
        if not os.path.isdir(os.path.join(log_dir, folder)):
            continue
        events = EventAccumulator(os.path.join(log_dir, folder), size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            found[folder, tag] = [(e.step, e.value) for e in events.Scalars(tag)]
    return found


def f32(value):
    return float(np.float32(value))  # what a summary's simple_value keeps


def expected_from_metrics(lines):
    """Keras' layout of metrics.jsonl's lines: train lines per step, epoch lines at the epoch's
    index (epoch - 1), every validation also against the step."""
    expected = {}

    def add(folder, tag, step, value):
        expected.setdefault((folder, tag), []).append((step, f32(value)))
    for r in lines:
        if r["kind"] == "train":
            for key, tag in (("loss", "loss"), ("accuracy", "accuracy"), ("lr", "learning_rate")):
                add("train", f"batch_{tag}", r["step"], r[key])
        if r["kind"] == "epoch":
            for key, tag in (("loss", "loss"), ("accuracy", "accuracy"), ("lr", "learning_rate")):
                add("train", f"epoch_{tag}", r["epoch"] - 1, r[key])
            for name in VALID:
                add("validation", f"epoch_{name}", r["epoch"] - 1, r[f"valid_{name}"])
        if "valid_loss" in r:
            for name in VALID:
                add("validation", f"evaluation_{name}_vs_iterations", r["step"], r[f"valid_{name}"])
    return expected


@pytest.fixture(scope="module")
def cli_run(demo_data, tmp_path_factory):
    """A CLI run with validations between epochs and a cosine rate (so every epoch's rate differs)."""
    out = tmp_path_factory.mktemp("tb") / "run"
    run_app("enhanced-train", "--data", demo_data / "train.ebin", "--valid", demo_data / "valid.ebin",
            "--out", out, "--epochs", 2, "--hidden", 4, "--embedding-dim", 4, "--log-every", 20,
            "--valid-every", 30, "--lr-schedule", "cosine", "--device", "cpu", "--threads", 1, "--quiet")
    text = (out / "metrics.jsonl").read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert {r["kind"] for r in lines} == {"train", "valid", "epoch"}
    return out, text, lines


def converter(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "enhanced.tensorboard", *map(str, args)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def test_cli_run_as_tensorboard_curves(cli_run, tmp_path):
    run, _, lines = cli_run
    process = converter(run, tmp_path / "logs")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    found, expected = curves(tmp_path / "logs"), expected_from_metrics(lines)
    assert found == expected
    assert len(found["train", "epoch_learning_rate"]) == 2 and len(set(found["train", "epoch_learning_rate"])) == 2
    assert f"{len(lines)} lines" in stderr
    assert "Warning" not in stderr  # runpy's, when `import enhanced` had imported enhanced.tensorboard


def test_callback_writes_keras_logs(tmp_path):
    """The callback driven as Keras' fit drives it, with Keras' keys."""
    rng = np.random.default_rng(3)
    callback = TensorBoard(tmp_path / "logs")
    callback.on_train_begin()
    batch_logs, epoch_logs = [], []
    for epoch in range(3):
        callback.on_epoch_begin(epoch)
        for batch in range(4):
            batch_logs.append({"loss": float(rng.random()), "accuracy": float(rng.random())})
            callback.on_train_batch_end(batch, batch_logs[-1])
        epoch_logs.append({key: float(rng.random()) for key in
                           ("loss", "accuracy", "val_loss", "val_accuracy", "val_f1", "lr")})
        callback.on_epoch_end(epoch, epoch_logs[-1])
    callback.on_train_end()
    found = curves(tmp_path / "logs")
    expected = {("train", "batch_loss"): [(k + 1, f32(logs["loss"])) for k, logs in enumerate(batch_logs)],
                ("train", "batch_accuracy"): [(k + 1, f32(logs["accuracy"])) for k, logs in enumerate(batch_logs)],
                ("train", "epoch_loss"): [(e, f32(logs["loss"])) for e, logs in enumerate(epoch_logs)],
                ("train", "epoch_accuracy"): [(e, f32(logs["accuracy"])) for e, logs in enumerate(epoch_logs)],
                ("train", "epoch_learning_rate"): [(e, f32(logs["lr"])) for e, logs in enumerate(epoch_logs)]}
    for name in VALID:
        expected["validation", f"epoch_{name}"] = [(e, f32(logs[f"val_{name}"])) for e, logs in enumerate(epoch_logs)]
        expected["validation", f"evaluation_{name}_vs_iterations"] = [(4 * (e + 1), f32(logs[f"val_{name}"]))
                                                                      for e, logs in enumerate(epoch_logs)]
    assert found == expected
    # update_freq="epoch" (Keras' default): no batch curves; a bad update_freq is refused.
    quiet = TensorBoard(tmp_path / "epoch_only", update_freq="epoch")
    quiet.on_train_begin()
    quiet.on_train_batch_end(0, {"loss": 1.0})
    quiet.on_epoch_end(0, {"loss": 1.0})
    quiet.on_train_end()
    assert list(curves(tmp_path / "epoch_only")) == [("train", "epoch_loss")]
    with pytest.raises(ValueError, match="update_freq must be 'epoch' or a positive integer, got 0"):
        TensorBoard(tmp_path, update_freq=0)


def wait_for(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"--follow did not write {what} within {seconds} s")
        time.sleep(0.1)


def test_follow_reads_appended_lines_until_ctrl_c(cli_run, tmp_path):
    _, text, lines = cli_run
    run, logs = tmp_path / "run", tmp_path / "logs"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    raw = text.splitlines(keepends=True)
    half = len(raw) // 2
    metrics.write_text("".join(raw[:half]))
    process = converter(run, logs, "--follow")
    try:
        wait_for(lambda: curves(logs) == expected_from_metrics(lines[:half]), "the first lines")
        with open(metrics, "a") as f:  # the rest, the last line in two writes (a line being written)
            f.write("".join(raw[half:-1]) + raw[-1][:10])
            f.flush()
            time.sleep(0.5)
            f.write(raw[-1][10:])
        wait_for(lambda: curves(logs) == expected_from_metrics(lines), "the appended lines")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and f"{len(lines)} lines" in stderr
    assert curves(logs) == expected_from_metrics(lines)


def test_follow_takes_up_a_file_that_changed(cli_run, tmp_path):
    """A --resume cuts the lines written after its state and appends its own: --follow goes on
    from the first changed line (the curves keep the earlier points too, then the new ones)."""
    _, text, lines = cli_run
    run, logs = tmp_path / "run", tmp_path / "logs"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    raw = text.splitlines(keepends=True)
    first, kept = len(raw) // 2, len(raw) // 3
    metrics.write_text("".join(raw[:first]))
    process = converter(run, logs, "--follow")
    try:
        wait_for(lambda: curves(logs) == expected_from_metrics(lines[:first]), "the first lines")
        changed = [{**r, **({"loss": r["loss"] * 2} if "loss" in r else {"valid_loss": r["valid_loss"] * 2})}
                   for r in lines[kept:]]
        with open(metrics, "r+") as f:  # as the trainer's resume does: cut in place, then append
            f.truncate(len("".join(raw[:kept])))
            f.seek(0, os.SEEK_END)
            f.write("".join(json.dumps(r) + "\n" for r in changed))
        before, after = expected_from_metrics(lines[:first]), expected_from_metrics(changed)
        expected = {tag: before.get(tag, []) + after.get(tag, []) for tag in {**before, **after}}
        wait_for(lambda: curves(logs) == expected, "the changed lines")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert f"changed from its line {kept + 1} (a --resume or a new run)" in stderr


BAD_LINES = [  # (change of metrics.jsonl's lines, the error it must give)
    (lambda raw: raw[:3] + ['{"kind": "train", "step": 4,\n'] + raw[3:], r"metrics.jsonl:4: not a JSON line"),
    (lambda raw: raw[:1] + [raw[1].replace('"step"', '"stop"')] + raw[2:],
     r"metrics.jsonl:2: a '\w+' line without 'step'"),
    (lambda raw: raw[:2] + [raw[2].replace('"loss":', '"loss":"x","l":')] + raw[3:],
     r"metrics.jsonl:3: 'loss' is \"x\", not a number"),
    (lambda raw: raw[:5] + ['{"kind": "other", "step": 1}\n'], r"metrics.jsonl:6: 'kind' is \"other\""),
    (lambda raw: raw[:1] + [raw[1].replace('"step":', '"step":null,"s":')] + raw[2:],
     r"metrics.jsonl:2: 'step' is null, not a number"),
    (lambda raw: raw[:1] + [raw[1].replace('"epoch":1,', '"epoch":"1",')] + raw[2:],
     r"metrics.jsonl:2: 'epoch' is \"1\", not a whole number from 1"),
    (lambda raw: [line.replace('"epoch":1,', '"epoch":0,') for line in raw],
     r"metrics.jsonl:1: 'epoch' is 0, not a whole number from 1"),
    (lambda raw: raw[:1] + [raw[1].replace('"step":', '"step":99999999999999999999999999,"s":')] + raw[2:],
     r"metrics.jsonl:2: 'step' is 99999999999999999999999999, not a whole number from 0 to 2\^63 - 1"),
    (lambda raw: raw[:2] + ["[" * 100000 + "]" * 100000 + "\n"], r"metrics.jsonl:3: .*JSON nested too deeply"),
    (lambda raw: raw[:-1] + [raw[-1][:len(raw[-1]) // 2]],
     r"metrics.jsonl:\d+ \(the last line, cut short: no newline\): not a JSON line"),
]


@pytest.mark.parametrize("change,message", BAD_LINES)
def test_bad_metrics_is_one_line_naming_the_file_and_line(cli_run, tmp_path, capsys, change, message):
    """In process (main() is what `python -m` runs; the subprocess tests above start it that way)."""
    _, text, lines = cli_run
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(change(text.splitlines(keepends=True))))
    assert tensorboard_main([str(run), str(tmp_path / "logs")]) == 1
    stderr = capsys.readouterr().err
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(f"enhanced.tensorboard: {run / 'metrics.jsonl'}:") and re.search(message, stderr), stderr
    if "cut short" in message:
        assert f"metrics.jsonl:{len(lines)} (" in stderr


def test_a_log_dir_that_is_a_file_is_one_line(cli_run, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    for log_dir in (tmp_path / "afile", tmp_path / "afile" / "logs"):
        message = f"LOG_DIR {log_dir}: {tmp_path / 'afile'} is not a folder"
        assert tensorboard_main([str(cli_run[0]), str(log_dir)]) == 1
        stderr = capsys.readouterr().err
        assert len(stderr.splitlines()) == 1 and stderr.startswith(f"enhanced.tensorboard: {message}"), stderr


def test_missing_metrics_file(tmp_path, capsys):
    assert tensorboard_main([str(tmp_path / "nothing"), str(tmp_path / "logs")]) == 1
    assert capsys.readouterr().err.strip() == (f"enhanced.tensorboard: {tmp_path / 'nothing' / 'metrics.jsonl'}: "
                                               "no such file (enhanced-train --out RUN writes RUN/metrics.jsonl)")
    assert not (tmp_path / "logs").exists()


def test_a_non_finite_number_is_nan(cli_run, tmp_path, capsys):
    """The engine's JSON writes a non-finite loss as null: a NaN point, not an error."""
    _, text, lines = cli_run
    raw = text.splitlines(keepends=True)
    (tmp_path / "metrics.jsonl").write_text(raw[0].replace('"loss":', '"loss":null,"l":') + "".join(raw[1:]))
    assert tensorboard_main([str(tmp_path / "metrics.jsonl"), str(tmp_path / "logs")]) == 0
    found = curves(tmp_path / "logs")
    assert np.isnan(found["train", "batch_loss"][0][1]) and found["train", "batch_loss"][0][0] == lines[0]["step"]
    assert found["train", "batch_loss"][1:] == expected_from_metrics(lines)["train", "batch_loss"][1:]
