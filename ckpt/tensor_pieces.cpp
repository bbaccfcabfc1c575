#include "ckpt/tensor_pieces.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/buffer.h"
#include "core/error.h"

namespace dt::ckpt {

namespace {

// Rows [r0, r1) × columns [c0, c1) of a whole tensor viewed as (rows, row length).
struct Box {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  bool empty() const { return r0 >= r1 || c0 >= c1; }
  int64_t numel() const { return (r1 - r0) * (c1 - c0); }
};

Box intersect(const Box& a, const Box& b) {
  return {std::max(a.r0, b.r0), std::min(a.r1, b.r1), std::max(a.c0, b.c0), std::min(a.c1, b.c1)};
}

// The whole tensor's rows and row length.
int64_t rows_of(const ParamInfo& p) { return p.slice.whole[0]; }
int64_t width_of(const ParamInfo& p) { return p.slice.whole.numel() / p.slice.whole[0]; }

// Flat elements [b, e) of a tensor of row length W as boxes: a partial first row, whole rows, a
// partial last row.
std::vector<Box> boxes_of_range(int64_t b, int64_t e, int64_t W) {
  std::vector<Box> out;
  while (b < e) {
    const int64_t r = b / W, c = b % W;
    if (c != 0 || e - b < W) {  // a partial row
      const int64_t end = std::min(e, (r + 1) * W);
      out.push_back({r, r + 1, c, end - r * W});
      b = end;
    } else {  // whole rows
      const int64_t rows = (e - b) / W;
      out.push_back({r, r + rows, 0, W});
      b += rows * W;
    }
  }
  return out;
}

// A saved piece of PREFIX as found by its name: the boxes of the whole tensor it holds, and
// where element (r, c) of the whole is in its values.
struct SavedPiece {
  std::string name;
  Shape shape;                 // as saved
  std::vector<Box> boxes;      // of the whole
  int64_t flat_begin = -1;     // a [B:E] piece: element (r, c) at r * W + c - B
  std::optional<Box> box;      // a box piece: element (r, c) at (r - r0) * width + c - c0
  int64_t index(int64_t r, int64_t c, int64_t W) const {
    if (box) return (r - box->r0) * (box->c1 - box->c0) + c - box->c0;
    return r * W + c - std::max<int64_t>(flat_begin, 0);
  }
};

// The piece `name` of PREFIX, or nullopt when the name is another tensor's.
std::optional<SavedPiece> parse_piece(const std::string& name, const std::string& prefix, const ParamInfo& p) {
  const int64_t R = rows_of(p), W = width_of(p);
  if (name == prefix) return SavedPiece{name, p.slice.whole, {{0, R, 0, W}}, -1, std::nullopt};
  if (!name.starts_with(prefix + "[") || name.back() != ']') return std::nullopt;
  const std::string inside = name.substr(prefix.size() + 1, name.size() - prefix.size() - 2);
  long long a = 0, b = 0, c = 0, d = 0;
  char tail = 0;
  if (std::sscanf(inside.c_str(), "%lld:%lld,%lld:%lld%c", &a, &b, &c, &d, &tail) == 4) {
    const Box box{a, b, c, d};
    if (box.empty() || box.r1 > R || box.c1 > W) return std::nullopt;
    return SavedPiece{name, Shape{b - a, d - c}, {box}, -1, box};
  }
  if (std::sscanf(inside.c_str(), "%lld:%lld%c", &a, &b, &tail) == 2) {
    if (a >= b || b > R * W) return std::nullopt;
    return SavedPiece{name, Shape{b - a}, boxes_of_range(a, b, W), a, std::nullopt};
  }
  return std::nullopt;
}

// Where this rank's tensor p holds whole element (r, c): its pieces as boxes of the whole, and
// the local index of each box's element.
struct LocalPiece {
  Box box;
  int64_t local_row0 = 0, local_col0 = 0;  // the box's first row and column in the local tensor
};

std::vector<LocalPiece> local_pieces(const ParamInfo& p) {
  const int64_t R = rows_of(p), W = width_of(p);
  std::vector<LocalPiece> out;
  int64_t at = 0;
  for (const SlicePiece& s : p.slice.pieces) {
    if (p.slice.dim == 0)
      out.push_back({{s.range.begin, s.range.end, 0, W}, at, 0});
    else
      out.push_back({{0, R, s.range.begin, s.range.end}, 0, at});
    at += s.range.size();
  }
  return out;
}

}  // namespace

std::vector<NamedPiece> saved_pieces(const std::string& prefix, const ParamInfo& p, int64_t begin, Tensor values) {
  const int64_t end = begin + values.numel(), W = width_of(p);
  const Tensor flat = values.reshape({values.numel()});
  std::vector<NamedPiece> out;
  const auto piece = [&](std::string name, int64_t local_begin, int64_t count, Shape shape) {
    out.push_back({std::move(name), flat.slice_rows(local_begin - begin, count).reshape(shape)});
  };
  if (p.slice.dim == 0) {
    // Each owned piece of rows is a flat range of the whole tensor.
    int64_t local = 0;
    for (const SlicePiece& s : p.slice.pieces) {
      const int64_t size = s.range.size() * W;
      const int64_t b = std::max(begin, local), e = std::min(end, local + size);
      if (s.owned && b < e) {
        const int64_t whole_b = s.range.begin * W + (b - local);
        if (e - b == p.slice.whole.numel())
          piece(prefix, b, e - b, p.slice.whole);
        else
          piece(str(prefix, "[", whole_b, ":", whole_b + (e - b), "]"), b, e - b, Shape{e - b});
      }
      local += size;
    }
    return out;
  }
  // Columns: the layouts split a row-parallel weight into one piece of columns per rank, so a
  // run of the local tensor's rows is a box of the whole.
  DT_CHECK(p.slice.pieces.size() == 1, p.name, ": a column split of ", p.slice.pieces.size(), " pieces");
  const SlicePiece& s = p.slice.pieces.front();
  if (!s.owned) return out;
  const int64_t Cl = s.range.size();
  for (const Box& b : boxes_of_range(begin, end, Cl)) {
    const Box whole{b.r0, b.r1, s.range.begin + b.c0, s.range.begin + b.c1};
    piece(str(prefix, "[", whole.r0, ":", whole.r1, ",", whole.c0, ":", whole.c1, "]"), b.r0 * Cl + b.c0, b.numel(),
          Shape{b.r1 - b.r0, b.c1 - b.c0});
  }
  return out;
}

void read_slice(const Checkpoint& checkpoint, const std::vector<std::string>& names, const std::string& prefix,
                const ParamInfo& p, Tensor dest) {
  const int64_t W = width_of(p), local_width = p.numel() / p.shape[0];
  const std::vector<LocalPiece> mine = local_pieces(p);
  float* to = static_cast<float*>(dest.data);
  std::vector<std::pair<int64_t, int64_t>> filled;  // local flat ranges written
  for (const std::string& name : names) {
    const std::optional<SavedPiece> saved = parse_piece(name, prefix, p);
    if (!saved) continue;
    // Read only a piece that overlaps this rank's slice.
    std::vector<std::pair<Box, const LocalPiece*>> overlaps;
    for (const Box& box : saved->boxes)
      for (const LocalPiece& l : mine)
        if (const Box i = intersect(box, l.box); !i.empty()) overlaps.emplace_back(i, &l);
    if (overlaps.empty()) continue;
    const Buffer values(static_cast<size_t>(saved->shape.numel()) * sizeof(float), MemTag::workspace, Device::cpu, false);
    checkpoint.read_into(name, values.view(DType::f32, saved->shape));
    const float* from = static_cast<const float*>(values.data());
    for (const auto& [i, l] : overlaps) {
      for (int64_t r = i.r0; r < i.r1; ++r) {
        const int64_t local = (l->local_row0 + r - l->box.r0) * local_width + l->local_col0 + i.c0 - l->box.c0;
        std::memcpy(to + local, from + saved->index(r, i.c0, W), static_cast<size_t>(i.c1 - i.c0) * sizeof(float));
        filled.emplace_back(local, local + i.c1 - i.c0);
      }
    }
  }
  std::sort(filled.begin(), filled.end());
  int64_t covered = 0;  // every element before it is filled
  for (const auto& [b, e] : filled) {
    if (b > covered) break;
    covered = std::max(covered, e);
  }
  if (covered < p.numel())
    throw Error(str("tensor '", prefix, "' is missing",
                    filled.empty() ? "" : str(" elements from ", covered, " of ", p.numel()),
                    ": the checkpoint holds neither it whole nor pieces that cover ",
                    p.numel() == p.slice.whole.numel() ? "it" : "this rank's slice of it",
                    "; was one rank's file lost?"));
}

}  // namespace dt::ckpt
