// enhanced-train's flags (docs/cli.md "enhanced-train"), defined once for the app and for the
// Python extension's Model.fit (python/src/), which parses the same words: each a row of
// train_fields() (enhanced/train_fields.h), plus the engine's flags every app shares.
#include "train_flags.h"

#include <string>
#include <type_traits>
#include <vector>

#include "enhanced/label_names.h"
#include "enhanced/train_fields.h"

namespace enhanced {
namespace {

// A number's rule as the flag's check: the seed's own (every 64-bit number), else its row's.
template <class Value>
CLI::Validator number_check(const TrainField& field) {
  if constexpr (std::is_same_v<Value, uint64_t>) return seed_rule();
  else return detail::number_rule<Value>(field.rule);
}

// `field`'s flag, writing into `value`; nullptr for a value no flag takes.
template <class Value>
CLI::Option* add_value_flag(CLI::App& app, const TrainField& field, const std::string& help, Value& value) {
  if constexpr (std::is_same_v<Value, bool>) {
    if (!field.inverted) return app.add_flag(field.flag, value, help);
    return app.add_flag_function(field.flag, [&value](int64_t) { value = false; }, help);
  } else if constexpr (std::is_arithmetic_v<Value>) {
    return app.add_option(field.flag, value, help)->check(number_check<Value>(field));
  } else if constexpr (std::is_same_v<Value, std::string>) {
    CLI::Option* option = app.add_option(field.flag, value, help);
    if (field.names) option->check(CLI::IsMember(field.names()));
    return option;
  }
  return nullptr;
}

// A NamedField's flag: its name set when parsed, the options' own shown as the default.
CLI::Option* add_named_flag(CLI::App& app, const TrainField& field, const std::string& help, const NamedField& named,
                            TrainOptions& o) {
  CLI::Option* option =
      app.add_option_function<std::string>(field.flag, [&o, named](const std::string& name) { named.set(o, name); }, help);
  if (field.show_default) option->default_str(named.get(o));
  if (field.names) option->check(CLI::IsMember(field.names()));
  return option;
}

void add_field_flag(CLI::App& app, const TrainField& field, TrainOptions& o) {
  const std::string help = field.help.empty() ? names_text(field.names()) : field.help;
  CLI::Option* option = std::visit(
      [&](const auto& ref) -> CLI::Option* {
        if constexpr (std::is_same_v<std::decay_t<decltype(ref)>, NamedField>) return add_named_flag(app, field, help, ref, o);
        else {
          CLI::Option* added = add_value_flag(app, field, help, ref(o));
          if (added && field.show_default && added->get_expected_max() != 0) added->capture_default_str();
          return added;
        }
      },
      field.value);
  if (!option) fail(field.flag, ": its row holds a value no flag takes (mark it not_a_flag)");
  if (field.required) option->required();
}

}  // namespace

void add_train_flags(CLI::App& app, TrainFlags& f) {
  bool engine_flags_added = false;
  for (const TrainField& field : train_fields()) {
    if (field.engine && !engine_flags_added) add_engine_flags(app, f.engine);
    engine_flags_added |= field.engine;
    if (field.on_command_line) add_field_flag(app, field, f.options);
  }
}

void finish_train_flags(const CLI::App& app, TrainFlags& f) {
  TrainOptions& o = f.options;
  for (const CLI::Option* option : app.get_options())
    if (option->count() > 0) o.given_flags.insert(option->get_name());
  if (!o.resume && o.data_path.empty()) fail("--data is required (unless --resume)");
  if (!o.label_names_path.empty()) o.label_names = read_label_names(o.label_names_path);
}

}  // namespace enhanced
