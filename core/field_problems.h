// What a validator finds wrong with a set of named fields, each problem as the field, its value
// and what is wrong, under the caller's names for the fields: a run configuration's keys
// ("optim.beta1", so train/run_config.cpp files each problem under its key without reading
// message text), or the fields' own names ("beta1") for a caller that throws them as one error.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace dt {

struct FieldProblem {
  std::string field;  // the caller's name for it
  std::string value;  // as str() writes it
  std::string what;
};

// Fields to the caller's names for them; a field named "" is not reported (the caller checks it
// itself), and a field not in the map keeps its own name.
using FieldNames = std::map<std::string, std::string, std::less<>>;

class FieldProblems {
 public:
  explicit FieldProblems(FieldNames names = {}) : names_(std::move(names)) {}

  // The caller's name for `field`, for messages that mention another field.
  std::string name(std::string_view field) const {
    const auto it = names_.find(field);
    return it == names_.end() ? std::string(field) : it->second;
  }

  template <typename V>
  void require(bool ok, std::string_view field, const V& value, std::string_view what) {
    if (ok) return;
    std::string reported = name(field);
    if (!reported.empty()) problems_.push_back({std::move(reported), str(value), std::string(what)});
  }

  const std::vector<FieldProblem>& all() const { return problems_; }

  // Throws dt::Error: the heading, then one line per problem, "  field = value: what".
  void throw_if_any(std::string_view heading) const;

 private:
  FieldNames names_;
  std::vector<FieldProblem> problems_;
};

}  // namespace dt
