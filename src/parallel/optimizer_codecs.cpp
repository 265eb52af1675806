// SGD, Adam and AdamW state in PyTorch 1.13's optimizer.state_dict() format.
#include "parallel/optimizer_codecs.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "ddp/errors.h"

namespace ddp::detail {

void bad_optimizer_state(const std::string& what) { throw InvalidArgument("load_optimizer_state_dict: " + what); }

const c10::IValue* find(const GenericDict& d, const std::string& key) {
  auto it = d.find(c10::IValue(key));
  return it == d.end() ? nullptr : &it->value();
}

double number(const GenericDict& group, const std::string& key, size_t g, std::optional<double> fallback) {
  const c10::IValue* v = find(group, key);
  const std::string where = "param_groups[" + std::to_string(g) + "][\"" + key + "\"]";
  if (!v) {
    if (fallback) return *fallback;
    bad_optimizer_state(where + " is missing");
  }
  if (v->isDouble()) return v->toDouble();
  if (v->isInt()) return static_cast<double>(v->toInt());
  bad_optimizer_state(where + " is a " + v->tagKind() + ", not a number");
}

bool flag(const GenericDict& group, const std::string& key, size_t g) {
  const c10::IValue* v = find(group, key);
  if (!v || v->isNone()) return false;
  if (!v->isBool())
    bad_optimizer_state("param_groups[" + std::to_string(g) + "][\"" + key + "\"] is a " + v->tagKind() +
                        ", not a bool");
  return v->toBool();
}

namespace {

GenericDict dict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }

void refuse_maximize(const GenericDict& group, size_t g) {
  if (flag(group, "maximize", g))
    bad_optimizer_state("param_groups[" + std::to_string(g) + "] has maximize=True, which LibTorch's optimizers lack");
}

// state[i][key] as a tensor shaped like its parameter, copied in the parameter's dtype.
at::Tensor state_tensor(const GenericDict& s, const std::string& key, const std::string& where, const at::Tensor& param,
                        bool required) {
  const c10::IValue* v = find(s, key);
  if (!v || v->isNone()) {
    if (required) bad_optimizer_state(where + "[\"" + key + "\"] is missing");
    return {};
  }
  if (!v->isTensor()) bad_optimizer_state(where + "[\"" + key + "\"] is a " + v->tagKind() + ", not a tensor");
  const at::Tensor& t = v->toTensor();
  if (t.sizes() != param.sizes())
    bad_optimizer_state(where + "[\"" + key + "\"] has shape " + c10::str(t.sizes()) + ", its parameter " +
                        c10::str(param.sizes()));
  return t.detach().to(param.device(), param.scalar_type()).clone(at::MemoryFormat::Contiguous);
}

OptimizerCodec sgd_codec() {
  using torch::optim::SGDOptions;
  OptimizerCodec c;
  c.name = "SGD";
  c.write_group = [](const torch::optim::OptimizerOptions& base) {
    const auto& o = static_cast<const SGDOptions&>(base);
    GenericDict g = dict();
    g.insert("lr", o.lr());
    g.insert("momentum", o.momentum());
    g.insert("dampening", o.dampening());
    g.insert("weight_decay", o.weight_decay());
    g.insert("nesterov", o.nesterov());
    g.insert("maximize", false);  // what Python 1.13 writes besides; LibTorch has no such options
    g.insert("foreach", c10::IValue());
    g.insert("differentiable", false);
    return g;
  };
  c.tensors = [](const torch::optim::OptimizerParamState& base) {
    return std::vector<at::Tensor>{static_cast<const torch::optim::SGDParamState&>(base).momentum_buffer()};
  };
  c.write_state = [](const torch::optim::OptimizerParamState& base) {
    GenericDict s = dict();
    const auto& buf = static_cast<const torch::optim::SGDParamState&>(base).momentum_buffer();
    if (buf.defined()) s.insert("momentum_buffer", buf.detach().clone());
    return s;
  };
  c.read_group = [](const GenericDict& group, size_t g) -> std::unique_ptr<torch::optim::OptimizerOptions> {
    auto o = std::make_unique<SGDOptions>(number(group, "lr", g, std::nullopt));
    o->momentum(number(group, "momentum", g, 0.0))
        .dampening(number(group, "dampening", g, 0.0))
        .weight_decay(number(group, "weight_decay", g, 0.0))
        .nesterov(flag(group, "nesterov", g));
    refuse_maximize(group, g);
    if (o->nesterov() && (o->momentum() <= 0 || o->dampening() != 0))
      bad_optimizer_state("param_groups[" + std::to_string(g) + "]: nesterov needs momentum > 0 and dampening 0");
    return o;
  };
  c.read_state = [](const GenericDict& s, const std::string& where,
                    const at::Tensor& param) -> std::unique_ptr<torch::optim::OptimizerParamState> {
    at::Tensor buf = state_tensor(s, "momentum_buffer", where, param, false);  // None when momentum is 0
    if (!buf.defined()) return nullptr;
    auto st = std::make_unique<torch::optim::SGDParamState>();
    st->momentum_buffer(buf);
    return st;
  };
  return c;
}

// Adam and AdamW share their state; Python 1.13 writes slightly different group keys.
template <typename Options, typename State>
OptimizerCodec adam_codec(const std::string& name, bool adamw) {
  OptimizerCodec c;
  c.name = name;
  c.write_group = [adamw](const torch::optim::OptimizerOptions& base) {
    const auto& o = static_cast<const Options&>(base);
    GenericDict g = dict();
    g.insert("lr", o.lr());
    g.insert("betas", c10::ivalue::Tuple::create({std::get<0>(o.betas()), std::get<1>(o.betas())}));
    g.insert("eps", o.eps());
    g.insert("weight_decay", o.weight_decay());
    g.insert("amsgrad", o.amsgrad());
    g.insert("maximize", false);
    g.insert("foreach", c10::IValue());
    g.insert("capturable", false);
    if (!adamw) {
      g.insert("differentiable", false);
      g.insert("fused", false);
    }
    return g;
  };
  c.tensors = [](const torch::optim::OptimizerParamState& base) {
    const auto& st = static_cast<const State&>(base);
    return std::vector<at::Tensor>{st.exp_avg(), st.exp_avg_sq(), st.max_exp_avg_sq()};
  };
  c.write_state = [](const torch::optim::OptimizerParamState& base) {
    const auto& st = static_cast<const State&>(base);
    GenericDict s = dict();
    s.insert("step", at::scalar_tensor(static_cast<double>(st.step()), at::kFloat));  // Python keeps a float tensor
    s.insert("exp_avg", st.exp_avg().detach().clone());
    s.insert("exp_avg_sq", st.exp_avg_sq().detach().clone());
    if (st.max_exp_avg_sq().defined()) s.insert("max_exp_avg_sq", st.max_exp_avg_sq().detach().clone());
    return s;
  };
  c.read_group = [](const GenericDict& group, size_t g) -> std::unique_ptr<torch::optim::OptimizerOptions> {
    const std::string where = "param_groups[" + std::to_string(g) + "][\"betas\"]";
    const c10::IValue* betas = find(group, "betas");
    if (!betas) bad_optimizer_state(where + " is missing");
    std::vector<c10::IValue> items;
    if (betas->isTuple())
      items = betas->toTupleRef().elements().vec();
    else if (betas->isList())
      items = betas->toListRef().vec();
    if (items.size() != 2 || !(items[0].isDouble() || items[0].isInt()) || !(items[1].isDouble() || items[1].isInt()))
      bad_optimizer_state(where + " is not a pair of numbers");
    auto o = std::make_unique<Options>(number(group, "lr", g, std::nullopt));
    o->betas(std::make_tuple(items[0].toScalar().toDouble(), items[1].toScalar().toDouble()))
        .eps(number(group, "eps", g, 1e-8))
        .weight_decay(number(group, "weight_decay", g, Options().weight_decay()))
        .amsgrad(flag(group, "amsgrad", g));
    refuse_maximize(group, g);
    return o;
  };
  c.read_state = [](const GenericDict& s, const std::string& where,
                    const at::Tensor& param) -> std::unique_ptr<torch::optim::OptimizerParamState> {
    const c10::IValue* step = find(s, "step");
    double steps = -1;
    if (step && step->isTensor() && step->toTensor().numel() == 1)
      steps = step->toTensor().item<double>();
    else if (step && (step->isInt() || step->isDouble()))
      steps = step->toScalar().toDouble();
    if (!(steps >= 0) || steps != std::floor(steps))
      bad_optimizer_state(where + "[\"step\"] is missing or not a whole number of steps");
    auto st = std::make_unique<State>();
    st->step(static_cast<int64_t>(steps));
    st->exp_avg(state_tensor(s, "exp_avg", where, param, true));
    st->exp_avg_sq(state_tensor(s, "exp_avg_sq", where, param, true));
    st->max_exp_avg_sq(state_tensor(s, "max_exp_avg_sq", where, param, false));
    return st;
  };
  return c;
}

}  // namespace

const OptimizerCodec& codec_for(const torch::optim::Optimizer& opt) {
  static const OptimizerCodec sgd = sgd_codec();
  static const OptimizerCodec adam = adam_codec<torch::optim::AdamOptions, torch::optim::AdamParamState>("Adam", false);
  static const OptimizerCodec adamw =
      adam_codec<torch::optim::AdamWOptions, torch::optim::AdamWParamState>("AdamW", true);
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) return sgd;
  if (dynamic_cast<const torch::optim::Adam*>(&opt)) return adam;
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) return adamw;
  throw InvalidArgument("optimizer state dicts: only torch::optim::SGD, Adam and AdamW are supported");
}

}  // namespace ddp::detail
