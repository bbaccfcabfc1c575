#include "model/mlp.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/rng.h"
#include "kernels/gelu.h"
#include "kernels/linear.h"
#include "kernels/swiglu.h"

namespace dt {
namespace {

namespace k = kernels;

// An (rows, width) f32 matrix of N(0, 1) values drawn from `name`.
struct Matrix {
  Matrix(int64_t rows, int64_t width, const std::string& name = "")
      : buffer(static_cast<size_t>(rows * width) * sizeof(float), MemTag::activations),
        t(buffer.view(DType::f32, {rows, width})) {
    if (!name.empty()) fill_normal(t.ptr<float>(), rows * width, 0, ElementRng(7, name), 0, 1);
  }
  std::vector<float> values() const { return {t.ptr<float>(), t.ptr<float>() + t.numel()}; }
  Buffer buffer;
  Tensor t;
};

// The seam: a block's MLP branch run through the Mlp interface gives, forward and backward, what
// its declared layers compute with the kernels one after the other — mlp.proj(act(mlp.fc(x)))
// and its gradients, bit for bit — whether the weights' gradients are taken at once or deferred.
TEST(Mlp, TheDenseMlpThroughTheSeamIsItsLayersInOrder) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"})
    for (const bool weights_now : {true, false}) {
      const ModelConfig c = model_preset(preset);
      const ParameterLayout layout(c);
      FlatTensors weights(layout, MemTag::parameters), grads(layout, MemTag::gradients), reference(layout, MemTag::gradients);
      init_parameters(weights, 3);
      grads.zero(), reference.zero();
      const std::unique_ptr<Mlp> mlp = make_mlp(layout, 1, ParallelRegions::single_rank());
      const int64_t N = 10, C = c.d_model, F = c.ffn_hidden(), F_in = c.ffn_in_width();
      const Matrix ln2(N, C, "ln2"), fch(N, F_in), fch_act(N, F), proj_out(N, C), dout(N, C, "dout");
      const Matrix dact(N, F), dfch(N, F_in), dtmp(N, C);
      // The views the MLP reads and writes; the block's others stay undefined.
      BlockActivations a;
      a.proj_out = proj_out.t, a.ln2 = ln2.t, a.fch = fch.t, a.fch_act = fch_act.t;
      BlockGradients d;
      d.dout = dout.t, d.dtmp = dtmp.t, d.dact = dact.t, d.dfch = dfch.t;
      mlp->forward_to_activation(weights, a);
      const Tensor out = mlp->forward_output(weights, a);
      PendingSum dln2 = mlp->backward_input(weights, grads, a, d, weights_now);
      dln2.done.wait();
      if (!weights_now) mlp->backward_weight(grads, a, d);

      // The same by hand.
      const bool gelu = c.traits().mlp == MlpKind::gelu, bias = c.traits().biases;
      const auto w = [&](const FlatTensors& f, const char* name) { return f.stored(str("h.1.mlp.", name)); };
      const Matrix h(N, F_in), act(N, F), y(N, C), dact_ref(N, F), dh(N, F_in), dx(N, C);
      k::linear_forward(h.t, ln2.t, w(weights, "fc.weight"), bias ? w(weights, "fc.bias") : Tensor{});
      gelu ? k::gelu_forward(act.t, h.t) : k::swiglu_forward(act.t, h.t);
      k::linear_forward(y.t, act.t, w(weights, "proj.weight"), bias ? w(weights, "proj.bias") : Tensor{});
      k::linear_backward_input(dact_ref.t, dout.t, w(weights, "proj.weight"));
      k::linear_backward_weight(w(reference, "proj.weight"), bias ? w(reference, "proj.bias") : Tensor{}, dout.t, act.t);
      gelu ? k::gelu_backward(dh.t, h.t, dact_ref.t) : k::swiglu_backward(dh.t, dact_ref.t, h.t);
      k::linear_backward_input(dx.t, dh.t, w(weights, "fc.weight"));
      k::linear_backward_weight(w(reference, "fc.weight"), bias ? w(reference, "fc.bias") : Tensor{}, dh.t, ln2.t);

      const std::string where = str(preset, weights_now ? ", weights now" : ", weights deferred");
      EXPECT_EQ(fch.values(), h.values()) << where;
      EXPECT_EQ(fch_act.values(), act.values()) << where;
      EXPECT_EQ(std::vector<float>(out.ptr<float>(), out.ptr<float>() + out.numel()), y.values()) << where;
      EXPECT_EQ(std::vector<float>(dln2.value.ptr<float>(), dln2.value.ptr<float>() + dln2.value.numel()), dx.values())
          << where;
      for (const char* name : {"fc.weight", "proj.weight"}) {
        const Tensor got = w(grads, name), want = w(reference, name);
        EXPECT_EQ(0, std::memcmp(got.data, want.data, got.bytes())) << where << " " << name;
      }
    }
}

}  // namespace
}  // namespace dt
