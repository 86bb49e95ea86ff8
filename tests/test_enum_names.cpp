// Each enum's names come from one table (enhanced/enum_names.h): its parse and to_string agree
// with it, its names are distinct, and a name outside it is refused with the table's list.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>

#include "enhanced/class_weight_mean.h"
#include "enhanced/common.h"
#include "enhanced/device.h"
#include "enhanced/model.h"
#include "enhanced/precision.h"
#include "enhanced/train_options.h"
#include "train/schedule.h"

using namespace enhanced;

namespace {

// Every row parses back to its value and prints as its name; "nope" is refused naming the list.
template <class Enum>
void expect_table_round_trips(const EnumNames<Enum>& table, const std::function<Enum(const std::string&)>& parse) {
  std::set<std::string> names;
  for (const EnumName<Enum>& row : table) {
    EXPECT_EQ(parse(row.name), row.value) << row.name;
    EXPECT_STREQ(to_string(row.value), row.name);
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " twice";
  }
  try {
    parse("nope");
    FAIL() << "'nope' accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(names_text(table)), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(EnumNames, EveryTableRoundTripsAndRefusesOtherNames) {
  expect_table_round_trips<BlendMode>(blend_modes(), parse_blend_mode);
  expect_table_round_trips<PoolMode>(pool_modes(), parse_pool_mode);
  expect_table_round_trips<Precision>(precisions(), parse_precision);
  expect_table_round_trips<RnnAlgorithm>(rnn_algorithms(), parse_rnn_algorithm);
  expect_table_round_trips<ScheduleKind>(schedule_kinds(), parse_schedule_kind);
  expect_table_round_trips<MonitorMetric>(monitor_metrics(), parse_monitor_metric);
  expect_table_round_trips<ClassWeightMean>(class_weight_means(), parse_class_weight_mean);
  for (const EnumName<Device>& row : devices()) EXPECT_STREQ(to_string(row.value), row.name);
}

TEST(EnumNames, ListsReadAsTheErrorTextsSayThem) {
  EXPECT_EQ(names_text(std::vector<std::string>{"a"}), "a");
  EXPECT_EQ(names_text(std::vector<std::string>{"a", "b"}), "a or b");
  EXPECT_EQ(names_text(precisions()), "fp32, bf16 or bf16-emulated");
  EXPECT_EQ(lr_schedule_names(), names_of(schedule_kinds()));
  EXPECT_EQ(monitor_names(), names_of(monitor_metrics()));
}
