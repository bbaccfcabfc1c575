#include "kernels/cuda/cudnn_attention.h"

// The frontend's JSON serialisation of graphs is not used; leaving it out keeps its bundled copy
// of nlohmann::json away from the one the rest of dtrain uses. cuDNN (and the NVRTC some of the
// frontend's engines compile with) is loaded when first used, not linked: dtrain starts, and
// runs its own kernels, on machines without cuDNN.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <dlfcn.h>

#include <cmath>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/buffer.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

// The frontend finds cuDNN's functions through this handle, which its user opens.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace dt::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;

// libcudnn.so.9, opened on first use: its version, or 0 and why it could not be opened.
struct LoadedCudnn {
  int version = 0;
  std::string error;
};
const LoadedCudnn& loaded_cudnn() {
  static const LoadedCudnn loaded = [] {
    fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (fe::cudnn_dlhandle == nullptr) return LoadedCudnn{0, dlerror()};
    return LoadedCudnn{static_cast<int>(fe::detail::get_backend_version()), ""};
  }();
  return loaded;
}
using fe::graph::Tensor_attributes;

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) throw Error(str(call, " failed: ", fe::detail::get_error_string(status)));
}

// One handle for the process, on the compute stream every kernel runs on.
cudnnHandle_t handle() {
  static const cudnnHandle_t made = [] {
    if (loaded_cudnn().version == 0) throw Error(str("attention: cuDNN could not be loaded: ", loaded_cudnn().error));
    cudnnHandle_t h = nullptr;
    check_cudnn(fe::detail::create_handle(&h), "cudnnCreate");
    check_cudnn(fe::detail::set_stream(h, ::dt::cuda::compute_stream()), "cudnnSetStream");
    return h;
  }();
  return made;
}

// The graphs' tensors, by the uid the variant pack names them with.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// One call's shapes and where its tensors' rows lie. A whole sequence's attention reads q, k and
// v from one packed qkv and writes dq, dk, dv into one dqkv (every row (NH + 2*NKV) * HS long,
// Tq = Tk, causal); a block's (kernels/attention_block.h) reads q's query columns of a packed qkv
// and k, v from a kv tensor (rows 2*NKV*HS), and writes dq and dk, dv into tensors of those
// shapes, full or causal. out and dout are (B, Tq, NH*HS) in both.
struct Shape {
  int64_t B, Tq, Tk, NH, NKV, HS;
  int64_t q_row, kv_row;    // elements between positions of q's buffer and of k's and v's
  int64_t dq_row, dkv_row;  // of dq's and of dk's and dv's (a backward's)
  bool causal;
  int64_t out_row() const { return NH * HS; }
  auto operator<=>(const Shape&) const = default;
};

// `heads` heads of HS elements at each of B x T positions of a buffer whose positions are `row`
// elements apart (the packed qkv, kv, or out): cuDNN's (B, heads, T, HS) view of it.
Tensor_attributes& as_heads(Tensor_attributes& t, Uid uid, const Shape& s, int64_t heads, int64_t T, int64_t row) {
  return t.set_uid(uid).set_dim({s.B, heads, T, s.HS}).set_stride({T * row, s.HS, row, 1});
}

// lse (B, NH, Tq) in f32 as cuDNN's (B, NH, Tq, 1) softmax statistics.
Tensor_attributes& as_stats(Tensor_attributes& t, const Shape& s) {
  return t.set_uid(kStats)
      .set_dim({s.B, s.NH, s.Tq, 1})
      .set_stride({s.NH * s.Tq, s.Tq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

struct Key {
  bool backward;
  DType dtype;
  Shape shape;
  auto operator<=>(const Key&) const = default;
};

struct Graph {
  std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN refused the shape
  std::string refusal;
  int64_t workspace_bytes = 0;
};

std::string version_text() {
  const int v = cudnn_version();
  return str(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

Graph build(const Key& key) {
  const Shape& s = key.shape;
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(key.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto input = [&](const char* name, Uid uid, int64_t heads, int64_t T, int64_t row) {
    Tensor_attributes t;
    return graph->tensor(as_heads(t.set_name(name), uid, s, heads, T, row));
  };
  const auto q = input("q", kQ, s.NH, s.Tq, s.q_row), k = input("k", kK, s.NKV, s.Tk, s.kv_row);
  const auto v = input("v", kV, s.NKV, s.Tk, s.kv_row);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HS));  // as the CPU kernel computes it
  // The causal mask is aligned top left: query i sees keys j <= i, which is the diagonal block's
  // mask (and the whole sequence's), where Tq == Tk.
  if (!key.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention")
                       .set_generate_stats(true)
                       .set_causal_mask(s.causal)
                       .set_attn_scale(scale);
    const auto [o, stats] = graph->sdpa(q, k, v, options);
    as_heads(o->set_output(true), kO, s, s.NH, s.Tq, s.out_row());
    as_stats(stats->set_output(true), s);
  } else {
    const auto o = input("o", kO, s.NH, s.Tq, s.out_row()), dout = input("dout", kDO, s.NH, s.Tq, s.out_row());
    Tensor_attributes stats_attributes;
    const auto stats = graph->tensor(as_stats(stats_attributes.set_name("lse"), s));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(s.causal)
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
    const auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
    as_heads(dq->set_output(true), kDQ, s, s.NH, s.Tq, s.dq_row);
    as_heads(dk->set_output(true), kDK, s, s.NKV, s.Tk, s.dkv_row);
    as_heads(dv->set_output(true), kDV, s, s.NKV, s.Tk, s.dkv_row);
  }
  fe::error_t built = graph->build(handle(), {fe::HeurMode_t::A});
  if (!built.is_good())
    return {nullptr, str("cuDNN ", version_text(), " builds no ", key.backward ? "backward" : "forward",
                         " engine for it: ", built.get_message())};
  Graph made{graph, "", 0};
  fe::error_t sized = graph->get_workspace_size(made.workspace_bytes);
  if (!sized.is_good()) throw Error(str("attention (cuDNN): workspace size: ", sized.get_message()));
  return made;
}

std::mutex graphs_mutex;

// The graph of a key, built on first use.
const Graph& graph_for(const Key& key) {
  // The frontend reaches cuDNN through the handle loaded_cudnn() opens: open it first.
  if (loaded_cudnn().version == 0) throw Error(str("attention: cuDNN could not be loaded: ", loaded_cudnn().error));
  static std::map<Key, Graph> graphs;
  const std::lock_guard lock(graphs_mutex);
  auto found = graphs.find(key);
  if (found == graphs.end()) found = graphs.emplace(key, build(key)).first;
  return found->second;
}

int64_t head_size_of(const Tensor& qkv, const AttentionHeads& heads) {
  return qkv.dim(2) / (heads.n_head + 2 * int64_t{heads.n_kv_head});
}

Key whole_key(const Tensor& qkv, const AttentionHeads& heads, bool backward) {
  const int64_t HS = head_size_of(qkv, heads), row = qkv.dim(2);
  return {backward, qkv.dtype,
          Shape{.B = qkv.dim(0), .Tq = qkv.dim(1), .Tk = qkv.dim(1), .NH = heads.n_head, .NKV = heads.n_kv_head,
                .HS = HS, .q_row = row, .kv_row = row, .dq_row = row, .dkv_row = row, .causal = true}};
}

// A block's: dq is (B, Tq, NH*HS) and dkv has kv's shape, as their f32 accumulators do.
Key block_key(const Tensor& q, const Tensor& kv, const AttentionHeads& heads, BlockMask mask, bool backward) {
  const int64_t HS = head_size_of(q, heads);
  return {backward, q.dtype,
          Shape{.B = q.dim(0), .Tq = q.dim(1), .Tk = kv.dim(1), .NH = heads.n_head, .NKV = heads.n_kv_head, .HS = HS,
                .q_row = q.dim(2), .kv_row = kv.dim(2), .dq_row = heads.n_head * HS, .dkv_row = kv.dim(2),
                .causal = mask == BlockMask::causal}};
}

// Why cuDNN cannot take a call of this key (empty when it can), checked in the order of cost:
// what no graph expresses, then the buffers, the library and the GPU, then the graph itself.
std::string refusal_of(const Key& key, const AttentionHeads& heads, std::initializer_list<const void*> buffers) {
  if (key.dtype != DType::bf16 && key.dtype != DType::f16)
    return str("cuDNN's fused attention takes bf16 and f16, not ", dtype_name(key.dtype));
  if (heads.phase != 0 || int64_t{heads.group} * heads.n_kv_head != heads.n_head)
    return "a tensor-parallel rank's query heads start mid-group (kernels/attention.h), which cuDNN's grouping "
           "cannot express";
  const int64_t HS = key.shape.HS;
  if (HS % 8 != 0 || HS > 128) return str("head size ", HS, ": cuDNN's attention takes multiples of 8 up to 128");
  for (const void* buffer : buffers)
    if (reinterpret_cast<uintptr_t>(buffer) % 16 != 0) return "a buffer is not 16-byte aligned";
  if (cudnn_version() == 0)
    return str("cuDNN 9 could not be loaded (", loaded_cudnn().error,
               "): install it, or put its lib folder on LD_LIBRARY_PATH");
  if (::dt::cuda::device_info().compute_capability < 80)
    return str(::dt::cuda::device_info().name, " is older than Ampere (compute capability 8.0)");
  return graph_for(key).refusal;
}

// The key in words, for an error to name the call that failed.
std::string describe(const Key& k) {
  const Shape& s = k.shape;
  return str(k.backward ? "backward" : "forward", " of ", dtype_name(k.dtype), " B ", s.B, ", ", s.Tq, " queries x ",
             s.Tk, " keys, ", s.NH, " heads over ", s.NKV, " key/value heads of ", s.HS, ", ",
             s.causal ? "causal" : "full");
}

void execute(const Key& key, std::unordered_map<int64_t, void*> pack) {
  const Graph& g = graph_for(key);
  const Buffer workspace(static_cast<size_t>(g.workspace_bytes), MemTag::workspace, Device::cuda, /*zero=*/false);
  fe::error_t ran = g.graph->execute(handle(), pack, workspace.data());
  if (!ran.is_good())
    throw Error(str("attention (cuDNN ", version_text(), "): execute failed for the ", describe(key), ": ",
                    ran.get_message()));
}

// The q heads at q, the k heads at kv and the v heads NKV heads after them, in each position's
// row: a packed qkv is (q, kv = q + NH heads), a block's pair of tensors (q, kv).
std::unordered_map<int64_t, void*> parts(void* q, void* kv, const Shape& s, DType dtype, Uid uq, Uid uk, Uid uv) {
  const int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  return {{uq, q}, {uk, kv}, {uv, static_cast<char*>(kv) + s.NKV * s.HS * bytes}};
}

// A packed qkv's parts: q, then k and v NH heads on.
std::unordered_map<int64_t, void*> qkv_parts(const Tensor& qkv, const Shape& s, Uid uq, Uid uk, Uid uv) {
  char* base = static_cast<char*>(qkv.data);
  return parts(base, base + s.NH * s.HS * static_cast<int64_t>(dtype_size(qkv.dtype)), s, qkv.dtype, uq, uk, uv);
}

void run_forward(const Key& key, std::unordered_map<int64_t, void*> pack, Tensor out, Tensor lse) {
  pack.emplace(kO, out.data);
  pack.emplace(kStats, lse.data);
  execute(key, std::move(pack));
}

void run_backward(const Key& key, std::unordered_map<int64_t, void*> pack, Tensor dout, Tensor out, Tensor lse) {
  pack.emplace(kO, out.data);
  pack.emplace(kDO, dout.data);
  pack.emplace(kStats, lse.data);
  execute(key, std::move(pack));
}

}  // namespace

int cudnn_version() { return loaded_cudnn().version; }

std::string attention_kernels_chosen(const std::string& forward_refusal, const std::string& backward_refusal,
                                     const std::string& ours) {
  const std::string cudnn = str("cuDNN ", version_text(), " fused attention");
  if (forward_refusal.empty() && backward_refusal.empty()) return cudnn;
  if (forward_refusal.empty()) return str(cudnn, " forward, ", ours, " backward (cuDNN: ", backward_refusal, ")");
  return str(ours, " (cuDNN: ", forward_refusal, ")");
}

std::string cudnn_attention_refusal(const Tensor& qkv, AttentionHeads heads, bool backward,
                                    std::initializer_list<const void*> buffers) {
  return refusal_of(whole_key(qkv, heads, backward), heads, buffers);
}

void cudnn_attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads) {
  const Key key = whole_key(qkv, heads, /*backward=*/false);
  run_forward(key, qkv_parts(qkv, key.shape, kQ, kK, kV), out, lse);
}

void cudnn_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads) {
  const Key key = whole_key(qkv, heads, /*backward=*/true);
  std::unordered_map<int64_t, void*> pack = qkv_parts(qkv, key.shape, kQ, kK, kV);
  pack.merge(qkv_parts(dqkv, key.shape, kDQ, kDK, kDV));
  run_backward(key, std::move(pack), dout, out, lse);
}

std::string cudnn_attention_block_refusal(const Tensor& q, const Tensor& kv, AttentionHeads heads, BlockMask mask,
                                          bool backward, std::initializer_list<const void*> buffers) {
  if (kv.dim(1) == 0) return "a block without keys";
  return refusal_of(block_key(q, kv, heads, mask, backward), heads, buffers);
}

void cudnn_attention_block_forward(Tensor out_b, Tensor lse_b, Tensor q, Tensor kv, AttentionHeads heads,
                                   BlockMask mask) {
  const Key key = block_key(q, kv, heads, mask, /*backward=*/false);
  run_forward(key, parts(q.data, kv.data, key.shape, q.dtype, kQ, kK, kV), out_b, lse_b);
}

void cudnn_attention_block_backward(Tensor dq_b, Tensor dkv_b, Tensor dout, Tensor q, Tensor kv, Tensor out,
                                    Tensor lse, AttentionHeads heads, BlockMask mask) {
  const Key key = block_key(q, kv, heads, mask, /*backward=*/true);
  std::unordered_map<int64_t, void*> pack = parts(q.data, kv.data, key.shape, q.dtype, kQ, kK, kV);
  pack.merge(parts(dq_b.data, dkv_b.data, key.shape, q.dtype, kDQ, kDK, kDV));
  run_backward(key, std::move(pack), dout, out, lse);
}

}  // namespace dt::kernels::cuda
