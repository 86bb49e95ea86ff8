// enhanced-train: trains the model on a .ebin dataset (see docs/cli.md "enhanced-train").
#include "app.h"
#include "train_flags.h"
#include "enhanced/communicator.h"
#include "enhanced/trainer.h"

namespace {

// Trains as one of the ranks mpirun or srun started (or alone), on the engine the flags choose:
// resolved once on each rank, rank 0 alone printing the device line. With several ranks, an
// error on any is one line naming it and its host, and ends the whole job with a non-zero exit.
int train_on_ranks(enhanced::TrainOptions o, const enhanced::EngineFlags& engine_flags) {
  using namespace enhanced;
  const std::unique_ptr<Communicator> communicator = make_communicator();
  const auto train = [&] {
    o.engine = resolve_engine_flags(engine_flags, communicator->rank() == 0);
    return run_training(o, *communicator);
  };
  if (communicator->size() == 1) return train();
  try {
    return train();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: %s: out of memory\n", communicator->name().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s: %s\n", communicator->name().c_str(), e.what());
  }
  communicator->abort(1);
  return 1;  // not reached: abort ends the job
}

}  // namespace

int main(int argc, char** argv) {
  using namespace enhanced;
  CLI::App app{"Train the ragged-blend BiLSTM classifier on a .ebin dataset"};
  TrainFlags flags;
  add_train_flags(app, flags);
  return run_app(app, argc, argv, [&] {
    finish_train_flags(app, flags);
    return train_on_ranks(flags.options, flags.engine);
  });
}
