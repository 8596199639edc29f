// Interpreter: walks the AST against a context and writes the rendered text. Internal to the
// engine (the public face is template.h). Implements Jinja's runtime semantics as Hugging Face
// configures it: default Undefined (prints empty, fails on attribute access or arithmetic),
// sandboxed immutable lists/dicts, and limits on call depth, work and output size.
// Filters, tests, methods and globals live in their own files and call back through this class.
#pragma once

#include "text/jinja/ast.h"
#include "text/jinja/error.h"
#include "text/jinja/limits.h"
#include "text/jinja/value.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kapitsa::text::jinja {


class Interpreter {
 public:
  Interpreter(const Limits& limits, std::string name);
  ~Interpreter();  // empties the namespaces it created, so reference cycles through them are freed

  // Namespaces are the only mutable values, hence the only way to build a reference cycle.
  void track_namespace(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }

  // Renders a template body with `context` as the root variables.
  std::string render(const Body& body, const Dict& context);

  // Calls a callable value (builtin, macro, bound method, loop); Undefined fails with its hint.
  Value call(const Value& callee, CallArgs& args);
  // Attribute access `obj.name` and subscription `obj[key]` with Jinja's sandbox rules.
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args);

  // Accounts for work; fails when the template exceeds its budget (keeps hostile templates finite).
  void charge(int64_t steps);
  // Fails unless a string of `bytes` bytes is allowed; charges for building it.
  void check_string_size(size_t bytes);
  const Limits& limits() const { return limits_; }

  // Iterating a value the way Python's for does: list items, dict keys, string characters.
  std::vector<Value> iterate(const Value& v);

 private:
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
  };
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body);
  Flow exec_stmt(const Stmt& s);
  void exec_for(const Stmt& s, const Value& iterable, int depth);
  void exec_if(const Stmt& s, Flow& flow);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_slice(const Expr& e);
  void eval_args(const Expr& e, CallArgs& args);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void assign_target(const Target& t, const Value& value, const Stmt& at);
  Value make_macro(const Stmt& macro);
  Value call_macro(const Stmt& macro, CallArgs& args, const Value& caller);
  Value make_caller(const Stmt& call_block);
  void write(const std::string& s);
  std::string capture(const Body& body);

  [[noreturn]] void rethrow_at(const TemplateError& e, int line, int col) const;

  Limits limits_;
  std::string name_;
  std::vector<Frame> frames_;  // frames_[0]: the context and top-level assignments
  size_t base_ = 0;            // innermost call's first frame; lookups skip frames below it (but not frame 0)
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<Dict>> namespaces_;
};

// ---- implemented in their own files ----

// filters.cpp
bool has_filter(const std::string& name);
Value run_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
// tests.cpp
bool has_test(const std::string& name);
bool run_test(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
// methods.cpp: a bound method of str / dict / list, or Undefined when there is none.
Value find_method(const Value& obj, const std::string& name);
// globals.cpp: range, namespace, dict, raise_exception, strftime_now, joiner; Undefined otherwise.
Value find_global(const std::string& name);
// operators.cpp
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool compare_op(const std::string& op, const Value& a, const Value& b);
[[noreturn]] void fail_undefined(const Value& v);

// Positional/keyword argument reader for builtins: arg(i, "name") takes positional i or keyword
// `name`; finish() rejects anything left over.
class ArgReader {
 public:
  ArgReader(CallArgs& args, std::string func) : args_(args), func_(std::move(func)), used_(args.kwargs.size()) {}
  bool has(size_t index, const char* name);
  Value get(size_t index, const char* name, Value fallback = Value());
  Value required(size_t index, const char* name);
  void finish(size_t max_positional);

 private:
  CallArgs& args_;
  std::string func_;
  std::vector<bool> used_;
};

}  // namespace kapitsa::text::jinja
