// The in-process training hooks (enhanced/training_observer.h) and in-memory datasets
// (Dataset::from_bytes): the calls an observer receives and their logs against metrics.jsonl, a
// stop and an interrupt that each leave a run whose resume equals the uninterrupted run bit for
// bit, a run on in-memory data equal to the run on the same file, and a damaged image refused
// with open()'s own error. Everything runs in this process, as the Python extension will.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app_runner.h"
#include "data_test_util.h"
#include "enhanced/checkpoint.h"
#include "enhanced/communicator.h"
#include "enhanced/dataset.h"
#include "enhanced/demo.h"
#include "enhanced/safetensors.h"
#include "enhanced/trainer.h"
#include "enhanced/training_observer.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using test_util::error_of;

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Records every call, as "begin", "epoch_begin 0", "batch 3", "epoch_end 0", "end", with the
// logs; stops or interrupts after the step numbered `act_at` (1-based, counted over the run).
class Recorder : public TrainingObserver {
 public:
  bool batch_logs = true;
  int64_t act_at = 0;
  TrainingDecision action = TrainingDecision::carry_on;
  bool at_epoch_end = false;  // act at the end of the epoch whose last step is act_at, not after the step
  std::vector<std::string> calls;
  std::vector<TrainingLogs> batch_log, epoch_log;
  TrainingLogs end_logs;
  int64_t steps = 0;

  void on_train_begin() override { calls.push_back("begin"); }
  void on_epoch_begin(int64_t epoch) override { calls.push_back("epoch_begin " + std::to_string(epoch)); }
  void on_train_batch_end(int64_t batch, const TrainingLogs& logs) override {
    calls.push_back("batch " + std::to_string(batch));
    batch_log.push_back(logs);
    ++steps;
    epoch_ended = false;
  }
  void on_epoch_end(int64_t epoch, const TrainingLogs& logs) override {
    calls.push_back("epoch_end " + std::to_string(epoch));
    epoch_log.push_back(logs);
    epoch_ended = true;
  }
  void on_train_end(const TrainingLogs& logs) override {
    calls.push_back("end");
    end_logs = logs;
  }
  bool wants_batch_logs() const override { return batch_logs; }
  TrainingDecision poll() override {
    return steps == act_at && epoch_ended == at_epoch_end ? action : TrainingDecision::carry_on;
  }

 private:
  bool epoch_ended = false;  // the last call was on_epoch_end
};

std::vector<std::string> keys_of(const TrainingLogs& logs) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : logs) keys.push_back(key);
  return keys;
}

class TrainObserver : public test_util::SmallDemoSuite {
 protected:
  // The small demo run (5 batches an epoch, 2 epochs), in this process, with no signal handlers.
  static TrainOptions options(const std::string& name) {
    TrainOptions o;
    o.data_path = files_.train_ebin;
    o.valid_path = files_.valid_ebin;
    o.pretrained_path = files_.embeddings;
    o.embedding_dim = 8;
    o.hidden = 6;
    o.batch_size = 16;
    o.engine.threads = 2;
    o.progress = false;
    o.epochs = 2;
    o.optimizer.learning_rate = 0.02f;
    o.log_every = 2;
    o.valid_every = 3;
    o.handle_signals = false;
    o.out_dir = (root_ / name).string();
    return o;
  }
  static Dataset memory(const std::string& path, const std::string& name) {
    return Dataset::from_bytes(file_bytes(path), name);
  }
  static int train_in_memory(const TrainOptions& o, TrainingObserver* observer) {
    const Dataset train = memory(files_.train_ebin, "memory:train");
    const Dataset valid = memory(files_.valid_ebin, "memory:valid");
    return run_training(o, train, &valid, observer);
  }
  static void expect_same_files(const std::string& a, const std::string& b) {
    for (const char* file : {"last.safetensors", "best.safetensors", "optimizer.safetensors"})
      EXPECT_TRUE(read_bytes(root_ / a / file) == read_bytes(root_ / b / file)) << a << " vs " << b << ": " << file;
  }
  // metrics.jsonl's lines without what the clock decides.
  static std::vector<nlohmann::json> metrics_without_times(const std::string& name) {
    std::ifstream in(root_ / name / "metrics.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      j.erase("seconds");
      j.erase("samples_per_s");
      lines.push_back(j);
    }
    return lines;
  }
  static int64_t saved_step(const std::string& name) {
    return std::atoll(SafetensorsReader((root_ / name / "optimizer.safetensors").string()).metadata_value("step").c_str());
  }
};

TEST_F(TrainObserver, CallsComeInKerasOrderWithKerasKeysAndTheEpochLossIsMetricsJsonls) {
  Recorder recorder;
  ASSERT_EQ(train_in_memory(options("recorded"), &recorder), 0);
  std::vector<std::string> expected{"begin"};
  for (int epoch = 0; epoch < 2; ++epoch) {
    expected.push_back("epoch_begin " + std::to_string(epoch));
    for (int batch = 0; batch < 5; ++batch) expected.push_back("batch " + std::to_string(batch));
    expected.push_back("epoch_end " + std::to_string(epoch));
  }
  expected.push_back("end");
  EXPECT_EQ(recorder.calls, expected);
  const std::vector<std::string> batch_keys{"accuracy", "loss", "lr"};
  const std::vector<std::string> epoch_keys{"accuracy", "loss", "lr", "val_accuracy", "val_f1", "val_loss"};
  for (const TrainingLogs& logs : recorder.batch_log) {
    EXPECT_EQ(keys_of(logs), batch_keys);
    for (const auto& [key, value] : logs) EXPECT_TRUE(std::isfinite(value)) << key;
  }
  // The epoch's last batch log is the running mean over the whole epoch: the epoch's mean.
  ASSERT_EQ(recorder.epoch_log.size(), 2u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    EXPECT_EQ(keys_of(recorder.epoch_log[epoch]), epoch_keys);
    EXPECT_EQ(recorder.batch_log[epoch * 5 + 4].at("loss"), recorder.epoch_log[epoch].at("loss"));
    for (const auto& [key, value] : recorder.epoch_log[epoch]) EXPECT_TRUE(std::isfinite(value)) << key;
  }
  EXPECT_EQ(recorder.end_logs, recorder.epoch_log[1]);
  std::ifstream metrics(root_ / "recorded" / "metrics.jsonl");
  std::vector<nlohmann::json> epoch_lines;
  for (std::string line; std::getline(metrics, line);)
    if (const nlohmann::json j = nlohmann::json::parse(line); j["kind"] == "epoch") epoch_lines.push_back(j);
  ASSERT_EQ(epoch_lines.size(), 2u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const TrainingLogs& logs = recorder.epoch_log[epoch];
    EXPECT_EQ(logs.at("loss"), epoch_lines[epoch]["loss"].get<double>());
    EXPECT_EQ(logs.at("accuracy"), epoch_lines[epoch]["accuracy"].get<double>());
    EXPECT_EQ(logs.at("val_loss"), epoch_lines[epoch]["valid_loss"].get<double>());
    EXPECT_EQ(logs.at("val_f1"), epoch_lines[epoch]["valid_f1"].get<double>());
    EXPECT_EQ(logs.at("lr"), epoch_lines[epoch]["lr"].get<double>());
  }
  // No handler was installed: SIGINT is the host's.
  struct sigaction action {};
  ASSERT_EQ(::sigaction(SIGINT, nullptr, &action), 0);
  EXPECT_EQ(action.sa_handler, SIG_DFL);
}

// Batch logs read each step back; the run holds those reads until the pipeline's own read points,
// so its sums group as without batch logs: the same files and metrics lines.
TEST_F(TrainObserver, BatchLogsChangeNoBitAndWithoutThemABatchLogHoldsTheRateOnly) {
  Recorder with, without;
  without.batch_logs = false;
  // One metrics line in the run and validations every 3 steps: its sums span several reads.
  TrainOptions o = options("batch-logs");
  o.epochs = 4;
  o.log_every = 1000;
  ASSERT_EQ(train_in_memory(o, &with), 0);
  o.out_dir = (root_ / "no-batch-logs").string();
  ASSERT_EQ(train_in_memory(o, &without), 0);
  expect_same_files("batch-logs", "no-batch-logs");
  EXPECT_EQ(metrics_without_times("batch-logs"), metrics_without_times("no-batch-logs"));
  ASSERT_EQ(without.batch_log.size(), 20u);
  for (const TrainingLogs& logs : without.batch_log) EXPECT_EQ(keys_of(logs), std::vector<std::string>{"lr"});
  EXPECT_EQ(without.epoch_log, with.epoch_log);
}

// model.stop_training = True after step k, and Ctrl-C after step k: each leaves the step saved,
// and the resumed run (the same data passed again) ends with the uninterrupted run's files.
TEST_F(TrainObserver, AStopOrAnInterruptAfterAStepResumesToTheUninterruptedRunsBits) {
  ASSERT_EQ(train_in_memory(options("whole"), nullptr), 0);
  struct Case {
    std::string name;
    TrainingDecision action;
    int64_t step;
    int exit_code;
    size_t epoch_ends;
  };
  for (const Case& c : {Case{"stop-7", TrainingDecision::stop, 7, 0, 2}, Case{"stop-5", TrainingDecision::stop, 5, 0, 1},
                        Case{"interrupt-7", TrainingDecision::interrupt, 7, kInterruptedExit, 1},
                        Case{"interrupt-5", TrainingDecision::interrupt, 5, kInterruptedExit, 0}}) {
    Recorder recorder;
    recorder.action = c.action;
    recorder.act_at = c.step;
    EXPECT_EQ(train_in_memory(options(c.name), &recorder), c.exit_code) << c.name;
    EXPECT_EQ(recorder.steps, c.step) << c.name;
    EXPECT_EQ(saved_step(c.name), c.step) << c.name;
    // A stop ends the run as its end does (on_train_end; at an epoch's last step, that epoch's end
    // first; within an epoch, that part's end, with its running logs, as Keras's fit ends an epoch
    // it broke out of); an interrupt as a KeyboardInterrupt does (no on_train_end).
    const bool stop = c.action == TrainingDecision::stop;
    EXPECT_EQ(recorder.calls.back() == "end", stop) << c.name;
    EXPECT_EQ(recorder.epoch_log.size(), c.epoch_ends) << c.name;
    if (stop && c.step % 5 != 0) {
      EXPECT_EQ(recorder.calls[recorder.calls.size() - 2], "epoch_end 1") << c.name;
      EXPECT_EQ(recorder.epoch_log.back().at("loss"), recorder.batch_log.back().at("loss")) << c.name;
      EXPECT_EQ(recorder.end_logs, recorder.epoch_log.back()) << c.name;
    }
    TrainOptions resumed = options(c.name);
    resumed.resume = true;
    Recorder after;
    ASSERT_EQ(train_in_memory(resumed, &after), 0) << c.name;
    EXPECT_EQ(after.steps, 10 - c.step) << c.name;
    // The resumed run goes on where the step left it: in epoch 1 at its batch, or (an interrupt
    // after epoch 0's last step) with epoch 0's end first.
    const std::vector<std::string> first(after.calls.begin(), after.calls.begin() + 3);
    if (c.step == 5 && !stop) EXPECT_EQ(first, (std::vector<std::string>{"begin", "epoch_end 0", "epoch_begin 1"}));
    else EXPECT_EQ(first, (std::vector<std::string>{"begin", "epoch_begin 1", "batch " + std::to_string(c.step - 5)}));
    expect_same_files("whole", c.name);
    EXPECT_EQ(metrics_without_times(c.name), metrics_without_times("whole")) << c.name;
  }
}

// A stop asked at an epoch's end (where Keras' EarlyStopping sets stop_training) ends the run
// there, with no step of the next epoch: the checkpoints of a run of that many epochs. An
// interrupt asked at the last epoch's end is an interrupt (kInterruptedExit, no on_train_end).
TEST_F(TrainObserver, AStopOrAnInterruptAskedAtAnEpochsEndLandsThere) {
  TrainOptions one = options("one-epoch");
  one.epochs = 1;
  ASSERT_EQ(train_in_memory(one, nullptr), 0);
  Recorder stop;
  stop.action = TrainingDecision::stop;
  stop.act_at = 5;
  stop.at_epoch_end = true;
  ASSERT_EQ(train_in_memory(options("stop-at-epoch-end"), &stop), 0);
  EXPECT_EQ(stop.steps, 5);
  EXPECT_EQ(stop.calls.back(), "end");
  for (const char* file : {"last.safetensors", "best.safetensors"})
    EXPECT_TRUE(read_bytes(root_ / "one-epoch" / file) == read_bytes(root_ / "stop-at-epoch-end" / file)) << file;
  Recorder interrupt;
  interrupt.action = TrainingDecision::interrupt;
  interrupt.act_at = 10;
  interrupt.at_epoch_end = true;
  EXPECT_EQ(train_in_memory(options("interrupt-at-the-last-epoch-end"), &interrupt), kInterruptedExit);
  EXPECT_EQ(interrupt.calls.back(), "epoch_end 1");
  EXPECT_EQ(saved_step("interrupt-at-the-last-epoch-end"), 10);
}

// The same bytes from memory train to the same files as the file: named as the files, even the
// state file (which records the data's names) is the same.
TEST_F(TrainObserver, AnImageFromTheFilesBytesTrainsToTheFilesCheckpoints) {
  ASSERT_EQ(run_training(options("from-file")), 0);
  const Dataset train = memory(files_.train_ebin, files_.train_ebin);
  const Dataset valid = memory(files_.valid_ebin, files_.valid_ebin);
  ASSERT_EQ(run_training(options("from-bytes"), train, &valid, nullptr), 0);
  expect_same_files("from-file", "from-bytes");
}

// Each damage open() refuses, from_bytes refuses with the same line (naming the name given).
TEST_F(TrainObserver, ADamagedImageGivesOpensError) {
  const std::vector<uint8_t> good = file_bytes(files_.train_ebin);
  struct Damage {
    std::string name;
    std::vector<uint8_t> bytes;
  };
  std::vector<Damage> damages{{"empty", {}}, {"short", {good.begin(), good.begin() + 100}},
                              {"truncated", {good.begin(), good.end() - 8}},
                              {"json", {'{', '"', 'a', '"', ':', '1', '}', '\n'}}};
  std::vector<uint8_t> magic = good, offset = good, id = good;
  magic[0] = 'X';
  offset[offsetof(DatasetHeader, cur_word_offset)] += 4;  // no longer 8-byte aligned
  const DatasetHeader& h = *reinterpret_cast<const DatasetHeader*>(good.data());
  id[h.cur_word_offset] = 0xff;  // a negative cur_word id
  id[h.cur_word_offset + 3] = 0xff;
  damages.push_back({"magic", magic});
  damages.push_back({"offset", offset});
  damages.push_back({"id", id});
  for (const Damage& d : damages) {
    const std::string path = (root_ / ("damaged-" + d.name + ".ebin")).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(d.bytes.data()),
                                                static_cast<std::streamsize>(d.bytes.size()));
    const std::string from_file = error_of([&] { Dataset::open(path); });
    EXPECT_NE(from_file, "<no error>") << d.name;
    EXPECT_EQ(error_of([&] { Dataset::from_bytes(d.bytes, path); }), from_file) << d.name;
  }
  EXPECT_EQ(error_of([&] { Dataset::from_bytes(std::vector<uint8_t>(good.begin(), good.begin() + 100), "in memory"); }),
            "in memory: truncated: 100 bytes, smaller than the 128-byte header");
}

// An in-process caller gets a non-finite loss's reason (Model.fit raises it) instead of stderr,
// and with narrate off the run's informational lines (engine:, model:, done:) are silent too.
TEST_F(TrainObserver, ANonFiniteLossReachesTheObserverAndNarrateOffPrintsNothing) {
  struct FailureRecorder : TrainingObserver {
    std::string reason;
    void on_failure(const std::string& text) override { reason = text; }
  } observer;
  TrainOptions o = options("halt-in-memory");
  o.optimizer.kind = OptimizerKind::sgd;
  o.optimizer.learning_rate = 1e38f;
  o.narrate = false;
  ::testing::internal::CaptureStderr();
  const int code = train_in_memory(o, &observer);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 3);
  EXPECT_EQ(observer.reason.rfind("non-finite loss (", 0), 0u) << observer.reason;
  EXPECT_NE(observer.reason.find("(epoch 1, batch "), std::string::npos) << observer.reason;
  EXPECT_EQ(printed, "");

  TrainOptions narrating = options("narrating");
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(train_in_memory(narrating, nullptr), 0);
  const std::string lines = ::testing::internal::GetCapturedStderr();
  for (const char* start : {"engine: ", "model: ", "done: "})
    EXPECT_NE(lines.find(start), std::string::npos) << start << " in:\n" << lines;
  narrating.narrate = false;
  narrating.out_dir = (root_ / "silent").string();
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(train_in_memory(narrating, nullptr), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// The run's TrainingAccess (Keras's get_weights, set_weights, optimizer.learning_rate in fit),
// used at given points: parameters read at an epoch's end are the checkpoint saved there; written
// back unchanged they change no bit of the run; written changed they are what the next step
// starts from; a rate set to 0 freezes the weights from the next step on and is recorded.
class AccessRecorder : public Recorder {
 public:
  std::function<void(TrainingAccess&, const std::string&)> act;
  std::vector<float> read_at_epoch_end_0;
  bool access_withdrawn = false;

  void set_access(TrainingAccess* access) override {
    if (access_ && !access) access_withdrawn = true;
    access_ = access;
  }
  void on_epoch_begin(int64_t epoch) override {
    Recorder::on_epoch_begin(epoch);
    if (act) act(*access_, calls.back());
  }
  void on_train_batch_begin(int64_t batch) override {
    calls.push_back("batch_begin " + std::to_string(batch));
    if (act) act(*access_, calls.back());
  }
  void on_epoch_end(int64_t epoch, const TrainingLogs& logs) override {
    Recorder::on_epoch_end(epoch, logs);
    if (epoch == 0) access_->read_parameters(read_at_epoch_end_0);
  }

 private:
  TrainingAccess* access_ = nullptr;
};

std::vector<float> checkpoint_values(const fs::path& path) {
  const ParameterBuffer<float> params = load_checkpoint(path.string());
  return std::vector<float>(params.data.begin(), params.data.end());
}

TEST_F(TrainObserver, AccessReadsTheSavedWeightsAndAnUnchangedWriteChangesNoBit) {
  ASSERT_EQ(train_in_memory(options("plain"), nullptr), 0);
  AccessRecorder recorder;
  fs::path epoch_0_last;
  recorder.act = [&](TrainingAccess& access, const std::string& call) {
    if (call != "epoch_begin 1") return;
    std::vector<float> values;
    access.read_parameters(values);
    access.write_parameters(values);
    EXPECT_EQ(values, checkpoint_values(root_ / "rewritten" / "last.safetensors"));  // saved at epoch 0's end
  };
  ASSERT_EQ(train_in_memory(options("rewritten"), &recorder), 0);
  EXPECT_TRUE(recorder.access_withdrawn);
  EXPECT_FALSE(recorder.read_at_epoch_end_0.empty());
  expect_same_files("plain", "rewritten");
  // Keras's order: a step's batch_begin before its batch end.
  EXPECT_EQ(recorder.calls[1], "epoch_begin 0");
  EXPECT_EQ(recorder.calls[2], "batch_begin 0");
  EXPECT_EQ(recorder.calls[3], "batch 0");
}

TEST_F(TrainObserver, WrittenWeightsAreWhatTheNextStepStartsFrom) {
  AccessRecorder recorder;
  std::vector<float> initial, after_write;
  recorder.act = [&](TrainingAccess& access, const std::string& call) {
    if (call == "batch_begin 0" && initial.empty()) access.read_parameters(initial);  // before any step
    if (call == "epoch_begin 1") access.write_parameters(initial);
    if (call == "batch_begin 0" && access.steps() == 5) access.read_parameters(after_write);
  };
  ASSERT_EQ(train_in_memory(options("reset"), &recorder), 0);
  ASSERT_FALSE(initial.empty());
  EXPECT_EQ(after_write, initial);
  EXPECT_NE(recorder.read_at_epoch_end_0, initial);
  std::vector<float> bad(initial.size() + 1);
  AccessRecorder wrong;
  wrong.act = [&](TrainingAccess& access, const std::string& call) {
    if (call == "epoch_begin 0") access.write_parameters(bad);
  };
  EXPECT_NE(error_of([&] { train_in_memory(options("wrong-size"), &wrong); }).find("values given, the model has"),
            std::string::npos);
}

TEST_F(TrainObserver, ARateSetAppliesFromTheNextStepIsLoggedAndRecorded) {
  AccessRecorder recorder;
  double before = 0;
  recorder.act = [&](TrainingAccess& access, const std::string& call) {
    if (call != "epoch_begin 1") return;
    before = access.learning_rate();
    access.set_learning_rate(0.0);
    EXPECT_EQ(access.learning_rate(), 0.0);
  };
  ASSERT_EQ(train_in_memory(options("frozen"), &recorder), 0);
  EXPECT_EQ(before, static_cast<double>(0.02f));
  // Adam at rate 0 moves no weight: the last checkpoint is epoch 0's end.
  EXPECT_EQ(checkpoint_values(root_ / "frozen" / "last.safetensors"), recorder.read_at_epoch_end_0);
  ASSERT_EQ(recorder.batch_log.size(), 10u);
  EXPECT_EQ(recorder.batch_log[4].at("lr"), static_cast<double>(0.02f));
  EXPECT_EQ(recorder.batch_log[5].at("lr"), 0.0);
  EXPECT_EQ(recorder.epoch_log[0].at("lr"), static_cast<double>(0.02f));
  EXPECT_EQ(recorder.epoch_log[1].at("lr"), 0.0);
  const std::string recorded =
      SafetensorsReader((root_ / "frozen" / "optimizer.safetensors").string()).metadata_value("run_options");
  EXPECT_EQ(std::strtod(nlohmann::json::parse(recorded)["lr"].get<std::string>().c_str(), nullptr), 0.0);
  // A scheduled rate is not settable, as Keras's with a LearningRateSchedule.
  TrainOptions o = options("cosine");
  o.lr_schedule = "cosine";
  AccessRecorder scheduled;
  scheduled.act = [](TrainingAccess& access, const std::string& call) {
    if (call == "epoch_begin 1") access.set_learning_rate(0.01);
  };
  EXPECT_NE(error_of([&] { train_in_memory(o, &scheduled); }).find("lr_schedule \"cosine\""), std::string::npos);
}

}  // namespace
}  // namespace enhanced
