"""TensorBoard event files in Keras' layout, written through the `tensorboard` package's
EventFileWriter (no TensorFlow needed): LOG_DIR/train and LOG_DIR/validation, tags `epoch_loss`,
`epoch_accuracy`, `epoch_learning_rate` (train), `epoch_loss`, `epoch_accuracy`, `epoch_f1`
(validation) at the epoch's index (0 first, as Keras), `batch_loss`, `batch_accuracy`,
`batch_learning_rate` (train) at the step, and `evaluation_loss_vs_iterations` (and accuracy, f1)
(validation) at the step of each validation. `enhanced.callbacks.TensorBoard` writes them from
Keras' logs; `python -m enhanced.tensorboard RUN LOG_DIR [--follow]` from a CLI run's
metrics.jsonl (docs/python.md, TensorBoard).

usage: python -m enhanced.tensorboard RUN LOG_DIR [--follow]"""
import argparse
import json
import math
import os
import signal
import sys
import time
import types

from .safetensors import unwritable_folder

FOLDERS = ("train", "validation")
_LEARNING_RATE_KEYS = ("lr", "learning_rate")
_POLL_SECONDS = 0.2  # --follow: how often metrics.jsonl is looked at again


class RunWriter:
    """One run's event files: an EventFileWriter per folder of FOLDERS, made when first written."""

    def __init__(self, log_dir):
        self.log_dir = os.fspath(log_dir)
        self._writers = {}

    def scalar(self, folder, tag, value, step):
        from tensorboard.compat.proto import event_pb2, summary_pb2

        if folder not in self._writers:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
            self._writers[folder] = EventFileWriter(os.path.join(self.log_dir, folder))
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        self._writers[folder].add_event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self):
        for writer in self._writers.values():
            writer.flush()

    def close(self):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def _number(value):
    """A log value as a float, or None where it is not a number (None, a string, a list)."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return None
    try:
        return float(value)  # Python and NumPy numbers, 0-d arrays and tensors
    except (TypeError, ValueError):
        return None


def epoch_scalars(logs):
    """Keras' epoch logs -> [(folder, tag, value)]: `val_X` -> validation `epoch_X`, `lr` or
    `learning_rate` -> train `epoch_learning_rate`, any other number X -> train `epoch_X`."""
    scalars = []
    for key, value in (logs or {}).items():
        value = _number(value)
        if value is None:
            continue
        if key in _LEARNING_RATE_KEYS:
            scalars.append(("train", "epoch_learning_rate", value))
        elif key.startswith("val_"):
            scalars.append(("validation", "epoch_" + key[4:], value))
        else:
            scalars.append(("train", "epoch_" + key, value))
    return scalars


def batch_scalars(logs):
    """Keras' batch logs -> [(folder, tag, value)]: train `batch_X`, the learning rate as
    `batch_learning_rate`."""
    return [("train", "batch_learning_rate" if key in _LEARNING_RATE_KEYS else "batch_" + key, _number(value))
            for key, value in (logs or {}).items() if _number(value) is not None and not key.startswith("val_")]


def evaluation_scalars(logs):
    """The validation numbers of `logs` (val_X) as Keras' `evaluation_X_vs_iterations`."""
    return [("validation", f"evaluation_{key[4:]}_vs_iterations", _number(value))
            for key, value in (logs or {}).items() if key.startswith("val_") and _number(value) is not None]


# metrics.jsonl (written by src/train/training_run.cpp through metrics_log.cpp): each kind's keys,
# and the Keras log key of each.
_TRAIN_KEYS = {"loss": "loss", "accuracy": "accuracy", "lr": "lr"}
_VALID_KEYS = {"valid_loss": "val_loss", "valid_accuracy": "val_accuracy", "valid_f1": "val_f1"}
_KINDS = {"train": ("step", "loss", "accuracy", "lr"), "epoch": ("step", "epoch", "loss", "accuracy", "lr"),
          "valid": ("step", "valid_loss", "valid_accuracy", "valid_f1")}


_STEP_LIMIT = 2.0**63  # TensorBoard's steps are int64


class MetricsError(ValueError):
    """A line of metrics.jsonl that is not what enhanced-train writes."""


def _record(text, where):
    """One line of metrics.jsonl, checked: a JSON object of a known kind with its keys, numbers."""
    try:
        record = json.loads(text)
    except ValueError as e:
        raise MetricsError(f"{where}: not a JSON line ({e})") from None
    except RecursionError:
        raise MetricsError(f"{where}: not a line enhanced-train writes (JSON nested too deeply)") from None
    if not isinstance(record, dict):
        raise MetricsError(f"{where}: not a JSON object")
    kind = record.get("kind")
    if kind not in _KINDS:
        raise MetricsError(f"{where}: 'kind' is {json.dumps(kind)[:40]}, expected one of {', '.join(_KINDS)}")
    keys = _KINDS[kind] + (tuple(_VALID_KEYS) if kind == "epoch" and "valid_loss" in record else ())
    for key in keys:
        if key not in record:
            raise MetricsError(f"{where}: a '{kind}' line without '{key}'")
        if record[key] is None and key not in ("step", "epoch"):
            record[key] = math.nan  # how the engine's JSON writes a non-finite number
        if _number(record[key]) is None:
            raise MetricsError(f"{where}: '{key}' is {json.dumps(record[key])[:40]}, not a number")
    for key, lowest in (("step", 0), ("epoch", 1)):  # epochs count from 1 in the file
        number = _number(record.get(key, lowest))
        if number is None or not (number.is_integer() and lowest <= number < _STEP_LIMIT):
            raise MetricsError(f"{where}: '{key}' is {json.dumps(record[key])[:40]}, not a whole number from {lowest} "
                               f"to 2^63 - 1")
    return record


def write_record(writer, record):
    """A checked metrics.jsonl line as Keras' TensorBoard callback would write its logs."""
    step = int(record["step"])
    logs = {keras: record[key] for key, keras in {**_TRAIN_KEYS, **_VALID_KEYS}.items() if key in record}
    if record["kind"] == "train":
        scalars = [(s, step) for s in batch_scalars(logs)]
    else:
        scalars = [(s, step) for s in evaluation_scalars(logs)]
        if record["kind"] == "epoch":
            scalars += [(s, int(record["epoch"]) - 1) for s in epoch_scalars(logs)]  # Keras' epoch index
    for (folder, tag, value), at in scalars:
        writer.scalar(folder, tag, value, at)


class MetricsReader:
    """metrics.jsonl read as it grows: `read()` returns the records of the complete lines added
    since the last call (a line without its newline yet waits, unless `final`). A file whose lines
    read so far changed (a `--resume` cuts the lines written after its state, then appends; a new
    run in the same directory starts it again) is taken up again from its first changed line."""

    def __init__(self, path):
        self.path = path
        self.offset, self._lines = 0, []  # bytes and lines (with their newlines) read so far

    @property
    def line_number(self):
        return len(self._lines)

    def _take_up_changes(self):
        """Where the lines read so far are no longer the file's: back to the first that changed."""
        if not self._lines:
            return
        last = self._lines[-1]
        with open(self.path, "rb") as f:
            f.seek(max(self.offset - len(last), 0))
            if f.read(len(last)) == last:
                return
            f.seek(0)
            lines = f.read().split(b"\n")[:-1]
        same = 0
        while same < min(len(lines), len(self._lines)) and lines[same] + b"\n" == self._lines[same]:
            same += 1
        print(f"enhanced.tensorboard: {self.path} changed from its line {same + 1} (a --resume or a new run); "
              "reading on from there", file=sys.stderr)
        self._lines = self._lines[:same]
        self.offset = sum(map(len, self._lines))

    def read(self, final=False):
        try:
            self._take_up_changes()
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:  # removed (a new run with --overwrite): while following, wait for it
            if final:
                raise MetricsError(f"{self.path}: no such file (it was removed while being read)") from None
            return []
        lines = data.split(b"\n")
        partial = lines.pop()
        lines = [line + b"\n" for line in lines]
        if final and partial.strip():
            lines.append(partial)  # the last line, cut short: read as it is, named as such
        records = []
        for raw in lines:
            self._lines.append(raw)
            self.offset += len(raw)
            where = f"{self.path}:{self.line_number}" + ("" if raw.endswith(b"\n") else
                                                        " (the last line, cut short: no newline)")
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise MetricsError(f"{where}: not UTF-8 text") from None
            records.append(_record(text, where))
        return records


def _metrics_path(run):
    return run if os.path.isfile(run) else os.path.join(run, "metrics.jsonl")


def convert(run, log_dir, follow=False, stop=lambda: False):
    """Writes the curves of `run`'s metrics.jsonl (a run directory or the file) into `log_dir`;
    with `follow`, keeps reading appended lines until `stop()` is true. Returns the lines' count."""
    path = _metrics_path(run)
    while follow and not os.path.exists(path) and not stop():
        time.sleep(_POLL_SECONDS)
    if not os.path.isfile(path):
        raise MetricsError(f"{path}: no such file (enhanced-train --out RUN writes RUN/metrics.jsonl)")
    reader, writer = MetricsReader(path), RunWriter(log_dir)
    try:
        while True:
            done = not follow or stop()
            for record in reader.read(final=done):
                write_record(writer, record)
            writer.flush()
            if done:
                return reader.line_number
            time.sleep(_POLL_SECONDS)
    finally:
        writer.close()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m enhanced.tensorboard",
                                     description="A CLI run's metrics.jsonl as TensorBoard curves, in Keras' layout.")
    parser.add_argument("run", metavar="RUN", help="the run's directory (enhanced-train --out) or its metrics.jsonl")
    parser.add_argument("log_dir", metavar="LOG_DIR", help="where train/ and validation/ go (tensorboard --logdir)")
    parser.add_argument("--follow", action="store_true",
                        help="keep reading lines as the run appends them, until Ctrl-C (or SIGTERM)")
    args = parser.parse_args(argv)
    if "tensorflow" not in sys.modules:  # tensorboard's file layer: its own stub, not TensorFlow's (5 s, log lines)
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    stopping = []
    if args.follow:  # a flag, looked at between reads: Ctrl-C never cuts a write short
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopping.append(True))
    # Said before anything is read: the folder writers (tensorboard's or TensorFlow's file layer)
    # fail with their own errors.
    if problem := unwritable_folder(args.log_dir):
        print(f"enhanced.tensorboard: LOG_DIR {args.log_dir}: {problem}", file=sys.stderr)
        return 1
    try:
        lines = convert(args.run, args.log_dir, args.follow, stop=lambda: bool(stopping))
    except MetricsError as e:
        print(f"enhanced.tensorboard: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # LOG_DIR cannot be made or written (permission, a file in its path, a full disk)
        print(f"enhanced.tensorboard: {e.filename or args.log_dir}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"enhanced.tensorboard: {lines} lines of {_metrics_path(args.run)} in {args.log_dir} "
          f"(tensorboard --logdir {args.log_dir})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
