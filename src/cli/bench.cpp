// `kapitsa bench [--model M] [--json] [--submit [--submit-url URL] [--yes]]`: a standard suite on any
// model (cli/bench/suite.h) with the machine it ran on and the memory-bandwidth roofline (doctor's
// measured read bandwidth ÷ the weight bytes one decode step reads); a table, or JSON. --submit prints
// the exact JSON it would send and asks y/N on stdin (--yes for scripts); nothing is sent without that
// consent. There is no built-in destination: the URL comes from --submit-url or $KAPITSA_BENCH_URL.
#include "cli/bench/suite.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/doctor/system_info.h"
#include "cli/generate_common.h"
#include "cli/kv_dtype_option.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

namespace kapitsa::cli {
namespace {

struct BenchOptions {
  std::string model, device = "cpu", submit_url, ttft = "4096,16384";
  bool json = false, submit = false, yes = false, pull = false, no_spec = false;
  double seconds = 1.0;  // of bandwidth measurement
  bench::SuiteOptions suite;
};

Expected<std::vector<int64_t>> parse_contexts(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return error("--ttft: '{}' is not a positive token count (give a list like 4096,16384)", item);
    }
  }
  return out;
}

// POSTs `body` as JSON; an error names the URL and what came back.
Status post_json(const std::string& url, const std::string& body) {
  CURL* c = curl_easy_init();
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  std::string answer;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, long(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* u) {
    static_cast<std::string*>(u)->append(d, s * n);
    return s * n;
  });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
  const CURLcode code = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  if (code != CURLE_OK) return error("could not send to {}: {} (nothing was sent)", url, curl_easy_strerror(code));
  if (status < 200 || status >= 300) return error("{} answered HTTP {}: {}", url, status, answer.substr(0, 200));
  return ok_status();
}

std::string rate(const Json& j, const char* key) { return fmt::format("{:.1f} tok/s", j.value(key, 0.0)); }

void print_table(const Json& r) {
  const Json& sys = r["system"];
  std::printf("Model      %s (%s)\n", r["model"]["path"].get<std::string>().c_str(), r["model"]["summary"].get<std::string>().c_str());
  const double bandwidth = sys["read_bandwidth_bytes_per_s"].get<double>();
  std::printf("System     %s, %d cores, %.1f GiB RAM, read bandwidth %s, device %s, KV %s\n",
              sys["cpu"].get<std::string>().c_str(), sys["cores"].get<int>(), sys["memory_bytes"].get<double>() / (1 << 30),
              bandwidth > 0 ? fmt::format("{:.1f} GB/s", bandwidth / 1e9).c_str() : "not measured",
              r["device"].get<std::string>().c_str(), r["kv_dtype"].get<std::string>().c_str());
  for (const Json& g : sys["gpus"]) std::printf("GPU        %s\n", g.get<std::string>().c_str());
  const Json& roof = r["roofline"];
  if (roof.contains("decode_tokens_per_s"))
    std::printf("Roofline   %.1f tok/s decode (bandwidth ÷ %.1f MB of weights read per token)\n\n",
                roof["decode_tokens_per_s"].get<double>(), roof["weight_bytes_per_token"].get<double>() / 1e6);
  else
    std::printf("Roofline   %s\n\n", roof["note"].get<std::string>().c_str());
  const Json& res = r["results"];
  std::printf("%-40s %s\n", "measurement", "result");
  std::printf("%-40s %s (%.2f s)\n", fmt::format("prefill {} tokens", res["prefill"]["tokens"].get<int>()).c_str(),
              rate(res["prefill"], "tokens_per_s").c_str(), res["prefill"]["seconds"].get<double>());
  std::string of_roof;
  if (roof.contains("decode_tokens_per_s") && roof["decode_tokens_per_s"].get<double>() > 0)
    of_roof = fmt::format("  ({:.0f}% of the roofline)", 100 * res["decode"]["tokens_per_s"].get<double>() /
                                                             roof["decode_tokens_per_s"].get<double>());
  std::printf("%-40s %s%s\n", fmt::format("decode {} tokens, batch 1", res["decode"]["tokens"].get<int>()).c_str(),
              rate(res["decode"], "tokens_per_s").c_str(), of_roof.c_str());
  for (const Json& t : res["ttft"]) {
    const std::string label = fmt::format("time to first token at {} tokens", t["context"].get<int64_t>());
    if (t.contains("skipped")) std::printf("%-40s skipped: %s\n", label.c_str(), t["skipped"].get<std::string>().c_str());
    else std::printf("%-40s %.2f s\n", label.c_str(), t["seconds"].get<double>());
  }
  std::printf("%-40s %s\n", fmt::format("aggregate decode, {} sequences", res["aggregate_decode"]["sequences"].get<int>()).c_str(),
              rate(res["aggregate_decode"], "tokens_per_s").c_str());
  if (res.contains("speculation")) {
    const Json& s = res["speculation"];
    std::printf("%-40s off %s, on %s (%d of %d guesses accepted%s)\n", "decode with n-gram speculation",
                rate(s, "off_tokens_per_s").c_str(), rate(s, "on_tokens_per_s").c_str(), s["accepted"].get<int>(),
                s["proposed"].get<int>(), s["same_output"].get<bool>() ? ", same output" : "; OUTPUT DIFFERS");
  }
}

int run_bench(BenchOptions o) {
  auto fail = [](const std::string& m) { return std::fprintf(stderr, "kapitsa bench: %s\n", m.c_str()), 1; };
  // Where --submit sends, known before the long run rather than after it.
  if (o.submit && o.submit_url.empty())
    if (const char* env = std::getenv("KAPITSA_BENCH_URL")) o.submit_url = env;
  if (o.submit && o.submit_url.empty())
    return fail("--submit needs somewhere to send: give --submit-url URL or set KAPITSA_BENCH_URL");
  if (!o.submit && (o.yes || !o.submit_url.empty())) return fail("--yes and --submit-url only go with --submit");
  auto contexts = parse_contexts(o.ttft);
  if (!contexts.ok()) return fail(contexts.error().message);
  o.suite.ttft = *contexts;
  o.suite.speculation = !o.no_spec;
  auto dir = resolve_model_dir(o.model, o.pull);
  if (!dir.ok()) return fail(dir.error().message);
  auto device = choose_device(o.device);
  if (!device.ok()) return fail(device.error().message);
  o.suite.device = *device;

  // Progress on stderr (stdout stays the table or the JSON): each step as it starts, with the time so far.
  const auto started = std::chrono::steady_clock::now();
  auto progress = [&](const std::string& step) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr, "kapitsa bench [%6.1f s] %s\n", s, step.c_str());
  };
  const doctor::CpuInfo cpu = doctor::probe_cpu();
  const doctor::MemoryInfo mem = doctor::probe_memory();
  double bandwidth = 0;  // --seconds 0: not measured, no roofline
  if (o.seconds > 0) {
    progress("measuring memory read bandwidth");
    bandwidth = doctor::measure_read_bandwidth(cpu.usable_cores, o.seconds);
  }
  const doctor::GpuReport gpu = doctor::probe_gpus();
  progress("loading " + *dir);
  auto results = bench::run_suite(*dir, o.suite, progress);
  if (!results.ok()) return fail(results.error().message);
  progress("done");

  Json model = (*results)["model"];
  results->erase("model");
  model["path"] = *dir;
  Json gpus = Json::array();
  for (const doctor::GpuInfo& g : gpu.devices) gpus.push_back(g.name);
  Json report = {{"kapitsa_version", version()},
                 {"system", {{"cpu", cpu.model}, {"arch", cpu.arch}, {"cores", cpu.usable_cores}, {"features", cpu.features},
                             {"memory_bytes", mem.total_bytes}, {"read_bandwidth_bytes_per_s", bandwidth}, {"gpus", gpus}}},
                 {"device", o.device},
                 {"kv_dtype", o.suite.kv_dtype},
                 {"model", model},
                 {"results", *results}};
  const double per_token = model.value("weight_bytes_per_token", 0.0);
  if (*device != Device::cpu)
    report["roofline"] = {{"note", "not computed (the GPU's bandwidth is not measured by bench yet)"}};
  else if (bandwidth <= 0)
    report["roofline"] = {{"note", "not computed (--seconds 0: the memory bandwidth was not measured)"}};
  else if (per_token <= 0)
    report["roofline"] = {{"note", "not computed (the model reports no weight bytes per token)"}};
  else
    report["roofline"] = {{"weight_bytes_per_token", per_token}, {"decode_tokens_per_s", bandwidth / per_token}};

  const std::string text = report.dump(2);
  if (!o.submit) {
    if (o.json) std::printf("%s\n", text.c_str());
    else print_table(report);
    return 0;
  }
  // --submit: the exact bytes that would be sent, then consent.
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (!o.yes) {
    std::fprintf(stderr, "Send the JSON above to %s? [y/N] ", o.submit_url.c_str());
    std::string answer;
    if (!std::getline(std::cin, answer) || (answer != "y" && answer != "Y" && answer != "yes")) {
      std::fprintf(stderr, "\nkapitsa bench: nothing sent.\n");
      return 0;
    }
  }
  const Status sent = post_json(o.submit_url, text);
  if (!sent.ok()) return fail(sent.error().message);
  std::fprintf(stderr, "kapitsa bench: sent to %s\n", o.submit_url.c_str());
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark a model: prefill, decode, time to first token, batching, speculation");
  cmd->add_option("--model", o->model, "Model folder, catalog alias or org/name[:quant] (default: the bundled demo model)");
  cmd->add_flag("--pull", o->pull, "Download --model first when it is an alias or Hub id not in the cache");
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->add_option("--prompt", o->suite.prompt, "Prefill tokens (default 512)");
  cmd->add_option("--decode", o->suite.decode, "Decoded tokens at batch 1 and per sequence (default 128)");
  cmd->add_option("--ttft", o->ttft, "Contexts for time to first token, comma-separated (default 4096,16384; "
                                     "those past the model's context are skipped)");
  cmd->add_option("--sequences", o->suite.sequences, "Sequences decoding together for the aggregate (default 4)");
  cmd->add_flag("--no-spec", o->no_spec, "Skip the n-gram speculation on/off comparison");
  cmd->add_option("--spec-k", o->suite.spec_k, "Most guesses per step with speculation (default 4)");
  add_kv_dtype_option(cmd, o->suite.kv_dtype);
  cmd->add_option("--device", o->device, "cpu (default) or cuda[:N]");
  cmd->add_option("--seconds", o->seconds, "Seconds of memory bandwidth measurement for the roofline (default 1; 0 skips it)");
  cmd->add_flag("--submit", o->submit, "After the run, print the JSON that would be sent and ask y/N before POSTing it");
  cmd->add_option("--submit-url", o->submit_url, "Where --submit sends (default: $KAPITSA_BENCH_URL; there is no built-in one)");
  cmd->add_flag("--yes", o->yes, "With --submit: send without asking (for scripts)");
  cmd->callback([o] { exit_code() = run_bench(*o); });
}

}  // namespace kapitsa::cli
