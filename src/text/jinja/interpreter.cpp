// Interpreter, statement side: frames and scoping, for/if/set/macro/call/filter/with blocks,
// output and limits (see interpreter.h). Expressions are in eval.cpp.
//
// Scoping follows Jinja: `for` bodies and macro calls get a fresh frame per iteration/call (a `set`
// inside a loop does not leak out), `if` does not; macros see their arguments and the template's
// top-level variables, not the caller's locals. Namespaces are the way to carry state out of loops.
#include "text/jinja/interpreter.h"

#include "text/jinja/pystr.h"

namespace kapitsa::text::jinja {

Interpreter::Interpreter(const Limits& limits, std::string name) : limits_(limits), name_(std::move(name)) {}

Interpreter::~Interpreter() {
  frames_.clear();
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) {
      std::vector<std::pair<Value, Value>> items;
      items.swap(ns->items);  // destroyed after the swap: a value may own this namespace
    }
  }
}

std::string Interpreter::render(const Body& body, const Dict& context) {
  frames_.clear();
  frames_.emplace_back();
  for (const auto& [k, v] : context.items)
    if (k.is_string()) frames_[0].vars.emplace_back(k.str(), v);
  base_ = 0;
  std::string result;
  out_ = &result;
  exec(body);
  out_ = nullptr;
  return result;
}

void Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) fail("template exceeded its work budget ({} steps)", limits_.max_steps);
}

void Interpreter::check_string_size(size_t bytes) {
  if (bytes > limits_.max_string) fail("string of {} bytes exceeds the limit of {} bytes", bytes, limits_.max_string);
  charge(static_cast<int64_t>(bytes / 64));
}

void Interpreter::write(const std::string& s) {
  out_->append(s);
  charge(static_cast<int64_t>(s.size() / 64));
  if (out_->size() > limits_.max_output) fail("rendered output exceeds {} bytes", limits_.max_output);
}

std::string Interpreter::capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  exec(body);
  out_ = saved;
  return buffer;
}

Value Interpreter::lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > base_;) {
    const auto& vars = frames_[i].vars;
    for (auto it = vars.rbegin(); it != vars.rend(); ++it)
      if (it->first == name) return it->second;
  }
  if (base_ > 0) {
    for (const auto& [k, v] : frames_[0].vars)
      if (k == name) return v;
  }
  Value global = find_global(name);
  if (!global.is_undefined()) return global;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value value) {
  auto& vars = frames_.back().vars;
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

void Interpreter::assign_target(const Target& t, const Value& value, const Stmt& at) {
  if (!t.attr.empty()) {
    Value ns = lookup(t.name);
    if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object '{}'", t.name);
    ns.mutable_dict().set(Value(t.attr), value);
    return;
  }
  if (t.names.empty()) {
    assign(t.name, value);
    return;
  }
  std::vector<Value> items = iterate(value);
  if (items.size() != t.names.size())
    fail("cannot unpack {} values into {} names", items.size(), t.names.size());
  for (size_t i = 0; i < items.size(); ++i) assign(t.names[i], items[i]);
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List: return v.list();
    case Kind::Dict: case Kind::Namespace: {
      if (v.is_namespace()) fail("'Namespace' object is not iterable");
      std::vector<Value> keys;
      for (const auto& [k, item] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: fail("'{}' object is not iterable", v.type_name());
  }
}

void Interpreter::rethrow_at(const TemplateError& e, int line, int col) const {
  if (e.line != 0) throw e;
  throw TemplateError(e.what(), line, col);
}

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    Flow f = exec_stmt(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s) {
  charge(1);
  try {
    switch (s.kind) {
      case StmtKind::Text: write(s.text); return Flow::Normal;
      case StmtKind::Output: {
        Value v = eval(*s.expr);
        write(v.is_string() ? v.str() : py_str(v));
        return Flow::Normal;
      }
      case StmtKind::If: {
        Flow flow = Flow::Normal;
        exec_if(s, flow);
        return flow;
      }
      case StmtKind::For: exec_for(s, eval(*s.expr), 0); return Flow::Normal;
      case StmtKind::Set: assign_target(s.target, eval(*s.expr), s); return Flow::Normal;
      case StmtKind::SetBlock: {
        Value v(capture(s.body));
        if (s.filter) {
          // The filter chain was parsed over a null input: apply it link by link.
          std::vector<const Expr*> chain;
          for (const Expr* f = s.filter.get(); f; f = f->a.get()) chain.push_back(f);
          for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            CallArgs args;
            eval_args(**it, args);
            v = apply_filter((*it)->name, v, args);
          }
        }
        assign_target(s.target, v, s);
        return Flow::Normal;
      }
      case StmtKind::Macro: assign(s.text, make_macro(s)); return Flow::Normal;
      case StmtKind::CallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.a);
        CallArgs args;
        eval_args(call, args);
        args.kwargs.emplace_back("caller", make_caller(s));
        write(py_str(this->call(callee, args)));
        return Flow::Normal;
      }
      case StmtKind::FilterBlock: {
        Value v(capture(s.body));
        std::vector<const Expr*> chain;
        for (const Expr* f = s.expr.get(); f; f = f->a.get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args;
          eval_args(**it, args);
          v = apply_filter((*it)->name, v, args);
        }
        write(py_str(v));
        return Flow::Normal;
      }
      case StmtKind::With: {
        std::vector<Value> values;
        for (const auto& [name, expr] : s.assignments) values.push_back(eval(*expr));
        frames_.emplace_back();
        for (size_t i = 0; i < values.size(); ++i) assign(s.assignments[i].first, values[i]);
        Flow f = exec(s.body);
        frames_.pop_back();
        return f;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::Generation: return exec(s.body);
    }
  } catch (const TemplateError& e) {
    rethrow_at(e, s.line, s.col);
  }
  return Flow::Normal;
}

void Interpreter::exec_if(const Stmt& s, Flow& flow) {
  for (size_t i = 0; i < s.conds.size(); ++i) {
    if (eval(*s.conds[i]).truthy()) {
      flow = exec(s.bodies[i]);
      return;
    }
  }
  flow = exec(s.else_body);
}

void Interpreter::exec_for(const Stmt& s, const Value& iterable, int depth) {
  std::vector<Value> items = iterate(iterable);
  if (s.filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      charge(1);
      frames_.emplace_back();
      assign_target(s.target, item, s);
      bool keep = eval(*s.filter).truthy();
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    frames_.emplace_back();
    exec(s.else_body);
    frames_.pop_back();
    return;
  }
  std::shared_ptr<const Callable> recurse;
  if (s.recursive) {
    const Stmt* stmt = &s;
    recurse = std::make_shared<const Callable>(Callable{"loop", [stmt, depth](Interpreter& in, CallArgs& args) {
      if (args.args.size() != 1 || !args.kwargs.empty()) fail("loop() takes exactly one argument");
      if (++in.call_depth_ > in.limits_.max_call_depth) fail("maximum recursion depth exceeded in recursive loop");
      std::string buffer;
      std::string* saved = in.out_;
      in.out_ = &buffer;
      in.exec_for(*stmt, args.args[0], depth + 1);
      in.out_ = saved;
      --in.call_depth_;
      return Value(std::move(buffer));
    }});
  }
  // The loop object's keys and fixed values are built once (a long conversation runs these loops over
  // every message; a fresh string per key and iteration was a fifth of a render's allocations).
  static const Value kIndex0("index0"), kIndex("index"), kRevindex0("revindex0"), kRevindex("revindex"), kFirst("first"),
      kLast("last"), kLength("length"), kDepth0("depth0"), kDepth("depth"), kPrevitem("previtem"), kNextitem("nextitem"),
      kCycle("cycle"), kNoPrevious(Value::undefined("there is no previous item")),
      kNoNext(Value::undefined("there is no next item"));
  const int64_t n = static_cast<int64_t>(items.size());
  // loop.cycle reads the index of the iteration it is called in (as Jinja's one LoopContext does).
  auto index = std::make_shared<int64_t>(0);
  const Value cycle = Value::function("cycle", [index](Interpreter&, CallArgs& args) -> Value {
    if (args.args.empty()) fail("no items for cycling given");
    return args.args[static_cast<size_t>(*index) % args.args.size()];
  });
  for (int64_t i = 0; i < n; ++i) {
    charge(1);
    *index = i;
    auto loop = make_dict();
    loop->call = recurse;
    loop->items.reserve(12);
    loop->items.emplace_back(kIndex0, Value(i));
    loop->items.emplace_back(kIndex, Value(i + 1));
    loop->items.emplace_back(kRevindex0, Value(n - i - 1));
    loop->items.emplace_back(kRevindex, Value(n - i));
    loop->items.emplace_back(kFirst, Value(i == 0));
    loop->items.emplace_back(kLast, Value(i == n - 1));
    loop->items.emplace_back(kLength, Value(n));
    loop->items.emplace_back(kDepth0, Value(static_cast<int64_t>(depth)));
    loop->items.emplace_back(kDepth, Value(static_cast<int64_t>(depth + 1)));
    loop->items.emplace_back(kPrevitem, i > 0 ? items[i - 1] : kNoPrevious);
    loop->items.emplace_back(kNextitem, i + 1 < n ? items[i + 1] : kNoNext);
    loop->items.emplace_back(kCycle, cycle);
    frames_.emplace_back();
    assign("loop", Value(loop));
    assign_target(s.target, items[i], s);
    Flow f = exec(s.body);
    frames_.pop_back();
    if (f == Flow::Break) break;
  }
}

Value Interpreter::make_macro(const Stmt& macro) {
  const Stmt* m = &macro;
  return Value::function(macro.text, [m](Interpreter& in, CallArgs& args) {
    Value caller;
    for (auto it = args.kwargs.begin(); it != args.kwargs.end(); ++it) {
      if (it->first == "caller") {
        caller = it->second;
        args.kwargs.erase(it);
        break;
      }
    }
    return in.call_macro(*m, args, caller);
  });
}

Value Interpreter::call_macro(const Stmt& m, CallArgs& args, const Value& caller) {
  if (call_depth_ + 1 > limits_.max_call_depth)
    fail("maximum recursion depth exceeded calling macro '{}'", m.text);
  Frame frame;
  std::vector<bool> given(m.params.size(), false);
  List varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < m.params.size()) {
      frame.vars.emplace_back(m.params[i].name, args.args[i]);
      given[i] = true;
    } else if (m.uses_varargs) {
      varargs.push_back(args.args[i]);
    } else {
      fail("macro '{}' takes not more than {} argument(s)", m.text, m.params.size());
    }
  }
  auto kwargs = make_dict();
  for (auto& [key, value] : args.kwargs) {
    size_t p = 0;
    while (p < m.params.size() && m.params[p].name != key) ++p;
    if (p < m.params.size()) {
      if (given[p]) fail("macro '{}' got multiple values for argument '{}'", m.text, key);
      frame.vars.emplace_back(key, value);
      given[p] = true;
    } else if (m.uses_kwargs) {
      kwargs->set(Value(key), value);
    } else {
      fail("macro '{}' takes no keyword argument '{}'", m.text, key);
    }
  }
  if (m.uses_varargs) frame.vars.emplace_back("varargs", Value(std::move(varargs), /*is_tuple=*/true));
  if (m.uses_kwargs) frame.vars.emplace_back("kwargs", Value(kwargs));
  if (!caller.is_undefined()) frame.vars.emplace_back("caller", caller);

  ++call_depth_;
  size_t saved_base = base_;
  size_t saved_frames = frames_.size();
  std::string* saved_out = out_;
  frames_.push_back(std::move(frame));
  base_ = frames_.size() - 1;
  for (size_t p = 0; p < m.params.size(); ++p) {  // defaults see earlier arguments
    if (given[p]) continue;
    assign(m.params[p].name, m.params[p].default_value
                                 ? eval(*m.params[p].default_value)
                                 : Value::undefined("parameter '" + m.params[p].name + "' was not provided"));
  }
  std::string buffer;
  out_ = &buffer;
  exec(m.body);
  out_ = saved_out;
  frames_.resize(saved_frames);
  base_ = saved_base;
  --call_depth_;
  return Value(std::move(buffer));
}

Value Interpreter::make_caller(const Stmt& cb) {
  // The body of a call block sees the variables visible where the block is (a snapshot).
  auto snapshot = std::make_shared<Frame>();
  for (size_t i = base_; i < frames_.size(); ++i)
    for (const auto& kv : frames_[i].vars) snapshot->vars.push_back(kv);
  const Stmt* s = &cb;
  return Value::function("caller", [s, snapshot](Interpreter& in, CallArgs& args) {
    if (in.call_depth_ + 1 > in.limits_.max_call_depth) fail("maximum recursion depth exceeded in caller()");
    Frame params;
    for (size_t i = 0; i < s->params.size(); ++i) {
      Value v = i < args.args.size() ? args.args[i] : Value::undefined("parameter was not provided");
      for (const auto& [k, kv] : args.kwargs)
        if (k == s->params[i].name) v = kv;
      params.vars.emplace_back(s->params[i].name, v);
    }
    ++in.call_depth_;
    size_t saved_base = in.base_;
    size_t saved_frames = in.frames_.size();
    in.frames_.push_back(*snapshot);
    in.base_ = in.frames_.size() - 1;
    in.frames_.push_back(std::move(params));
    for (size_t i = 0; i < s->params.size(); ++i) {
      bool given = i < args.args.size();
      for (const auto& kw : args.kwargs) given |= kw.first == s->params[i].name;
      if (!given && s->params[i].default_value) in.assign(s->params[i].name, in.eval(*s->params[i].default_value));
    }
    std::string out = in.capture(s->body);
    in.frames_.resize(saved_frames);
    in.base_ = saved_base;
    --in.call_depth_;
    return Value(std::move(out));
  });
}

}  // namespace kapitsa::text::jinja
