// The CUDA optimizer's index space, run on the CPU: the kernels of optimizer.cu visit the
// StepRange space of steps/optimizer_steps.h and apply the config's update (SgdUpdate /
// AdamUpdate, picked by steps::with_update) with the step's StepScalars (the CPU's optimizer_step calls the same updates over its own ranges). Here
// the device's space runs on the host; from the same gradients and clipping factor it must give
// optimizer_step's bits, step after step, for every optimizer and both the dense and the
// touched-rows-only spaces.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "enhanced/model.h"
#include "layers/optimizer.h"
#include "enhanced/random.h"
#include "steps/optimizer_steps.h"
#include "steps/step_totals_steps.h"
#include "layers/embedding_blend.h"

namespace enhanced {
namespace {

struct Case {
  const char* name;
  OptimizerConfig config;
};

void check(const Case& c) {
  ModelConfig model;
  model.vocab_size = 13;
  model.embedding_dim = 3;
  model.hidden = 2;
  model.seq_len = 4;
  model.num_labels = 3;
  Random random(17);
  ParameterBuffer<float> cpu(model), grads(model);
  for (float& w : cpu.data) w = static_cast<float>(random.uniform(-1, 1));
  OptimizerState optimizer(c.config, model);
  ParameterBuffer<float> emulated = cpu;
  ParameterBuffer<float> first(model), second(model);  // the device's moments start at zero too
  const size_t table = static_cast<size_t>(model.vocab_size) * model.embedding_dim;
  for (int64_t step = 1; step <= 4; ++step) {
    // A gradient on a few embedding rows (the others exactly zero, as after a backward) and on
    // everything after the table.
    std::fill(grads.data.begin(), grads.data.end(), 0.0f);
    const std::vector<int32_t> ids = {static_cast<int32_t>(random.below(13)), static_cast<int32_t>(random.below(13)),
                                      static_cast<int32_t>(random.below(13))};
    std::vector<int32_t> rows;
    embedding_touched_rows(rows, ids.data(), static_cast<int64_t>(ids.size()), ids.data(), 0);
    for (int32_t row : rows)
      for (int d = 0; d < model.embedding_dim; ++d)
        grads.data[static_cast<size_t>(row) * model.embedding_dim + d] = static_cast<float>(random.uniform(-2, 2));
    for (size_t i = table; i < grads.size(); ++i) grads.data[i] = static_cast<float>(random.uniform(-2, 2));

    const double norm = optimizer_step(cpu, optimizer, grads, rows, c.config.learning_rate);
    const float scale = steps::clip_factor(norm, c.config.clip_norm);  // norm_finish_kernel's, from the same norm

    const int32_t row_count = static_cast<int32_t>(rows.size());
    steps::StepRange range;
    range.total = emulated.size();
    range.table = table;
    range.dim = model.embedding_dim;
    range.rows_only = rows_only(c.config);
    range.rows = rows.data();
    range.row_count = &row_count;
    const steps::StepScalars scalars = steps::step_scalars(c.config, step, c.config.learning_rate);
    const steps::Space space = steps::space_of(range, range.rows_only);
    const OptimizerConfig& o = c.config;
    steps::Moments moments;
    moments.at[0] = first.data.data();
    moments.at[1] = second.data.data();
    // As update_kernel: the config's update, the element's weight decay chosen per element.
    steps::with_update(o.kind, [&](auto kind) {
      using Update = decltype(kind);
      const Update update = Update::of(o, scalars);
      for (int64_t i = 0; i < space.size; ++i) {
        const int64_t k = steps::element_of(range, range.rows_only, space, i);
        update(k, emulated.data.data(), moments, grads.data.data(), scale,
               steps::decay_at(k, table, o.weight_decay_embedding, update.decay(), Update::no_decay));
      }
    });
    ASSERT_EQ(emulated.data, cpu.data) << c.name << ", step " << step << ": weights differ from the CPU's bits";
    if (optimizer.moment(0)) {
      ASSERT_EQ(first.data, optimizer.moment(0)->data) << c.name << ", step " << step;
    }
    if (optimizer.moment(1)) {
      ASSERT_EQ(second.data, optimizer.moment(1)->data) << c.name << ", step " << step;
    }
  }
}

TEST(OptimizerSteps, MatchOptimizerStepBitForBit) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.learning_rate = 0.1f;
  OptimizerConfig momentum = sgd;
  momentum.momentum = 0.9f;
  OptimizerConfig lazy_momentum = momentum;
  lazy_momentum.lazy_embedding = true;
  OptimizerConfig adam;
  adam.learning_rate = 3e-3f;
  OptimizerConfig lazy_adam = adam;
  lazy_adam.lazy_embedding = true;
  OptimizerConfig clipped = adam;
  clipped.clip_norm = 0.5f;
  // Weight decay: SGD's L2 with and without the table (plain SGD with a decaying table visits
  // every row), AdamW likewise, lazily (only the batch's rows decay).
  OptimizerConfig sgd_decay = sgd;
  sgd_decay.weight_decay = 0.05f;
  OptimizerConfig sgd_decay_table = sgd_decay;
  sgd_decay_table.weight_decay_embedding = true;
  OptimizerConfig momentum_decay_table = momentum;
  momentum_decay_table.weight_decay = 0.05f;
  momentum_decay_table.weight_decay_embedding = true;
  OptimizerConfig adamw = adam;
  adamw.weight_decay = 0.1f;
  OptimizerConfig adamw_table = adamw;
  adamw_table.weight_decay_embedding = true;
  OptimizerConfig lazy_adamw_table = adamw_table;
  lazy_adamw_table.lazy_embedding = true;
  for (const Case& c : {Case{"sgd", sgd}, Case{"sgd momentum", momentum}, Case{"lazy sgd momentum", lazy_momentum},
                        Case{"adam", adam}, Case{"lazy adam", lazy_adam}, Case{"adam clipped", clipped},
                        Case{"sgd decay", sgd_decay}, Case{"sgd decay with table", sgd_decay_table},
                        Case{"sgd momentum decay with table", momentum_decay_table}, Case{"adamw", adamw},
                        Case{"adamw with table", adamw_table}, Case{"lazy adamw with table", lazy_adamw_table}})
    check(c);
}

// Every row of optimizers() has its update in steps::Updates, a name that parses back to its
// kind, and at most steps::kMaxMoments moments (the devices' loops hold no more).
TEST(OptimizerSteps, EveryOptimizerRowHasItsUpdate) {
  for (const OptimizerInfo& row : optimizers()) {
    bool found = false;
    steps::with_update(row.kind, [&](auto kind) { found = decltype(kind)::kind == row.kind; });
    EXPECT_TRUE(found) << row.name;
    EXPECT_EQ(parse_optimizer_kind(row.name), row.kind);
    EXPECT_STREQ(to_string(row.kind), row.name);
    EXPECT_LE(row.moments.size(), steps::kMaxMoments) << row.name;
    OptimizerConfig config;
    config.kind = row.kind;
    EXPECT_LE(moment_names(config).size(), row.moments.size()) << row.name;
  }
  EXPECT_EQ(optimizer_names_text(), "sgd or adam");
}


// The step totals' rule that both engines follow (steps/step_totals_steps.h): the loss summed as
// loss * B in step order, the first largest logit, and a sticky halt, loss before gradient.
TEST(StepTotals, HaltsStickAndTheHaltedGradientStepKeepsItsLoss) {
  TrainTotals totals;
  steps::account_loss(totals, 0.5, 4, 3, 1);
  steps::account_update(totals, 2.0, 1);
  EXPECT_EQ(totals.loss_sum, 2.0);
  EXPECT_EQ(totals.samples, 4);
  EXPECT_EQ(totals.correct, 3);
  EXPECT_EQ(totals.steps, 1);
  // A finite loss with a non-finite norm: its loss and samples count, its step does not.
  steps::account_loss(totals, 0.25, 2, 1, 2);
  steps::account_update(totals, std::numeric_limits<double>::infinity(), 2);
  EXPECT_EQ(totals.halted, Halt::gradient);
  EXPECT_EQ(totals.halted_step, 2);
  EXPECT_EQ(totals.samples, 6);
  EXPECT_EQ(totals.steps, 1);
  // Nothing after a halt, not even a later non-finite loss.
  steps::account_loss(totals, std::numeric_limits<double>::quiet_NaN(), 4, 4, 3);
  steps::account_update(totals, 1.0, 3);
  EXPECT_EQ(totals.halted, Halt::gradient);
  EXPECT_EQ(totals.halted_step, 2);
  EXPECT_EQ(totals.samples, 6);
  TrainTotals lost;
  steps::account_loss(lost, std::numeric_limits<double>::quiet_NaN(), 4, 4, 7);
  EXPECT_EQ(lost.halted, Halt::loss);
  EXPECT_EQ(lost.halted_step, 7);
  EXPECT_EQ(lost.samples, 0);
  const float tie[] = {1.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(steps::predicted_label(tie, 4), 1) << "the first of equal largest logits, as std::max_element";
}

}  // namespace
}  // namespace enhanced
