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

struct Shape4 {
  int64_t B, T, NH, NKV, HS;
  int64_t qkv_row() const { return (NH + 2 * NKV) * HS; }
  int64_t out_row() const { return NH * HS; }
};

// `heads` heads of HS elements at each of B x T positions of a buffer whose positions are `row`
// elements apart (the packed qkv, or out): cuDNN's (B, heads, T, HS) view of it.
Tensor_attributes& as_heads(Tensor_attributes& t, Uid uid, const Shape4& s, int64_t heads, int64_t row) {
  return t.set_uid(uid).set_dim({s.B, heads, s.T, s.HS}).set_stride({s.T * row, s.HS, row, 1});
}

// lse (B, NH, T) in f32 as cuDNN's (B, NH, T, 1) softmax statistics.
Tensor_attributes& as_stats(Tensor_attributes& t, const Shape4& s) {
  return t.set_uid(kStats)
      .set_dim({s.B, s.NH, s.T, 1})
      .set_stride({s.NH * s.T, s.T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

struct Key {
  bool backward;
  DType dtype;
  int64_t B, T, NH, NKV, HS;
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
  const Shape4 s{key.B, key.T, key.NH, key.NKV, key.HS};
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(key.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto input = [&](const char* name, Uid uid, int64_t heads, int64_t row) {
    Tensor_attributes t;
    return graph->tensor(as_heads(t.set_name(name), uid, s, heads, row));
  };
  const auto q = input("q", kQ, s.NH, s.qkv_row()), k = input("k", kK, s.NKV, s.qkv_row());
  const auto v = input("v", kV, s.NKV, s.qkv_row());
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HS));  // as the CPU kernel computes it
  if (!key.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    const auto [o, stats] = graph->sdpa(q, k, v, options);
    as_heads(o->set_output(true), kO, s, s.NH, s.out_row());
    as_stats(stats->set_output(true), s);
  } else {
    const auto o = input("o", kO, s.NH, s.out_row()), dout = input("dout", kDO, s.NH, s.out_row());
    Tensor_attributes stats_attributes;
    const auto stats = graph->tensor(as_stats(stats_attributes.set_name("lse"), s));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
    const auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
    as_heads(dq->set_output(true), kDQ, s, s.NH, s.qkv_row());
    as_heads(dk->set_output(true), kDK, s, s.NKV, s.qkv_row());
    as_heads(dv->set_output(true), kDV, s, s.NKV, s.qkv_row());
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

Key key_of(const Tensor& qkv, AttentionHeads heads, bool backward) {
  const int64_t HS = qkv.dim(2) / (heads.n_head + 2 * int64_t{heads.n_kv_head});
  return {backward, qkv.dtype, qkv.dim(0), qkv.dim(1), heads.n_head, heads.n_kv_head, HS};
}

void execute(const Graph& g, std::unordered_map<int64_t, void*> pack) {
  const Buffer workspace(static_cast<size_t>(g.workspace_bytes), MemTag::workspace, Device::cuda, /*zero=*/false);
  fe::error_t ran = g.graph->execute(handle(), pack, workspace.data());
  if (!ran.is_good()) throw Error(str("attention (cuDNN ", version_text(), "): execute failed: ", ran.get_message()));
}

// qkv's parts at their offsets in each position's row: q, then k, then v.
std::unordered_map<int64_t, void*> qkv_parts(const Tensor& qkv, AttentionHeads heads, Uid q, Uid k, Uid v) {
  char* base = static_cast<char*>(qkv.data);
  const int64_t HS = qkv.dim(2) / (heads.n_head + 2 * int64_t{heads.n_kv_head});
  const int64_t bytes = static_cast<int64_t>(dtype_size(qkv.dtype));
  return {{q, base},
          {k, base + heads.n_head * HS * bytes},
          {v, base + (heads.n_head + int64_t{heads.n_kv_head}) * HS * bytes}};
}

}  // namespace

int cudnn_version() { return loaded_cudnn().version; }

std::string cudnn_attention_refusal(const Tensor& qkv, AttentionHeads heads, bool backward,
                                    std::initializer_list<const void*> buffers) {
  if (qkv.dtype != DType::bf16 && qkv.dtype != DType::f16)
    return str("cuDNN's fused attention takes bf16 and f16, not ", dtype_name(qkv.dtype));
  if (heads.phase != 0 || int64_t{heads.group} * heads.n_kv_head != heads.n_head)
    return "a tensor-parallel rank's query heads start mid-group (kernels/attention.h), which cuDNN's grouping "
           "cannot express";
  const int64_t HS = qkv.dim(2) / (heads.n_head + 2 * int64_t{heads.n_kv_head});
  if (HS % 8 != 0 || HS > 128) return str("head size ", HS, ": cuDNN's attention takes multiples of 8 up to 128");
  for (const void* buffer : buffers)
    if (reinterpret_cast<uintptr_t>(buffer) % 16 != 0) return "a buffer is not 16-byte aligned";
  if (cudnn_version() == 0)
    return str("cuDNN 9 could not be loaded (", loaded_cudnn().error,
               "): install it, or put its lib folder on LD_LIBRARY_PATH");
  if (::dt::cuda::device_info().compute_capability < 80)
    return str(::dt::cuda::device_info().name, " is older than Ampere (compute capability 8.0)");
  return graph_for(key_of(qkv, heads, backward)).refusal;
}

void cudnn_attention_forward(Tensor out, Tensor lse, Tensor qkv, AttentionHeads heads) {
  const Graph& g = graph_for(key_of(qkv, heads, /*backward=*/false));
  std::unordered_map<int64_t, void*> pack = qkv_parts(qkv, heads, kQ, kK, kV);
  pack.emplace(kO, out.data);
  pack.emplace(kStats, lse.data);
  execute(g, std::move(pack));
}

void cudnn_attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, AttentionHeads heads) {
  const Graph& g = graph_for(key_of(qkv, heads, /*backward=*/true));
  std::unordered_map<int64_t, void*> pack = qkv_parts(qkv, heads, kQ, kK, kV);
  pack.merge(qkv_parts(dqkv, heads, kDQ, kDK, kDV));
  pack.emplace(kO, out.data);
  pack.emplace(kDO, dout.data);
  pack.emplace(kStats, lse.data);
  execute(g, std::move(pack));
}

}  // namespace dt::kernels::cuda
