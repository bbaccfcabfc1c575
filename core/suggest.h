// Did-you-mean suggestions for names a person typed: flags, parameter and tensor names, keys.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dt {

// Levenshtein distance between two strings.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` in edit distance, or "" when even the closest needs more than
// max(2, |word| / 3) edits (a suggestion that far off misleads more than it helps).
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace dt
