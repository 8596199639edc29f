// A Hub-shaped HTTP server for the pull tests (cpp-httplib on 127.0.0.1, a free port): the revision
// listing (GET /api/models/{org}/{name}/revision/{rev}?blobs=true), resolve/ downloads — small files
// served directly, LFS files redirected (302) to /cdn/{sha256} like the Hub's CDN — with Range support.
// Knobs inject what the tests need: a status for the listing or the downloads, cut connections, a
// flipped byte, a required token; it records the Range headers the CDN saw.
#pragma once

#include <httplib.h>
#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kapitsa::testing {

// sha256 / sha1 in hex (the Hub's LFS id and a stand-in git blob id).
inline std::string digest_hex(const std::string& data, const EVP_MD* md) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, md, nullptr);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < n; ++i) s += hex[out[i] >> 4], s += hex[out[i] & 15];
  return s;
}

class FakeHub {
 public:
  struct File {
    std::string path, data;
    bool lfs = false;
    std::string sha256() const { return digest_hex(data, EVP_sha256()); }
    std::string blob_id() const { return digest_hex("blob " + std::to_string(data.size()) + '\0' + data, EVP_sha1()); }
  };

  static constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

  std::atomic<int> api_status{0}, file_status{0};  // non-zero: answer with this status
  // Faults hit only responses for the file named `faulty` (the weights, larger than cut_bytes):
  std::atomic<int> cuts{0};                       // the next N responses close after cut_bytes
  std::atomic<int64_t> cut_bytes{1 << 20};
  std::atomic<int> corruptions{0};                // the next N responses flip the file's middle byte
  std::string faulty = "model.safetensors";
  std::atomic<int> file_requests{0};
  std::string required_token;                     // set before start: requests need "Bearer <token>"

  FakeHub(std::string repo, std::vector<File> files) : repo_(std::move(repo)), files_(std::move(files)) {}
  ~FakeHub() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  void start() {
    server_.Get(R"(/api/models/([^/]+/[^/]+)/revision/([^/]+))", [this](const httplib::Request& q, httplib::Response& r) {
      if (!authorized(q, r)) return;
      if (api_status != 0) return answer(r, api_status, "{\"error\":\"injected\"}");
      if (q.matches[1] != repo_) return answer(r, 404, "{\"error\":\"Repository not found\"}");
      std::string siblings;
      for (const File& f : files_) {
        siblings += (siblings.empty() ? "" : ",") + std::string("{\"rfilename\":\"") + f.path + "\",\"size\":" +
                    std::to_string(f.data.size()) + ",\"blobId\":\"" + f.blob_id() + "\"";
        if (f.lfs)
          siblings += ",\"lfs\":{\"sha256\":\"" + f.sha256() + "\",\"size\":" + std::to_string(f.data.size()) +
                      ",\"pointerSize\":134}";
        siblings += "}";
      }
      r.set_content("{\"id\":\"" + repo_ + "\",\"sha\":\"" + kCommit + "\",\"siblings\":[" + siblings + "]}", "application/json");
    });
    server_.Get(R"(/([^/]+/[^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& q, httplib::Response& r) {
      if (!authorized(q, r)) return;
      if (file_status != 0) return answer(r, file_status, "injected");
      const File* f = find(q.matches[3]);
      if (q.matches[1] != repo_ || q.matches[2] != kCommit || f == nullptr) return void(r.status = 404);
      if (f->lfs) return r.set_redirect("/cdn/" + f->sha256(), 302);
      serve(*f, q, r);
    });
    server_.Get(R"(/cdn/([0-9a-f]+))", [this](const httplib::Request& q, httplib::Response& r) {
      for (const File& f : files_)
        if (f.lfs && f.sha256() == q.matches[1]) return serve(f, q, r);
      r.status = 404;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::vector<File>& files() const { return files_; }

  std::vector<std::string> ranges() {  // "bytes=N-" of every file request that had one
    std::lock_guard<std::mutex> lock(mutex_);
    return ranges_;
  }

 private:
  static void answer(httplib::Response& r, int status, const std::string& body) {
    r.status = status;
    r.set_content(body, "application/json");
  }

  bool authorized(const httplib::Request& q, httplib::Response& r) {
    if (required_token.empty() || q.get_header_value("Authorization") == "Bearer " + required_token) return true;
    r.status = 401;
    r.set_content("{\"error\":\"Invalid credentials\"}", "application/json");
    return false;
  }

  const File* find(const std::string& path) const {
    for (const File& f : files_)
      if (f.path == path) return &f;
    return nullptr;
  }

  // The file's bytes through a provider (httplib applies a Range), cut or corrupted when asked.
  void serve(const File& f, const httplib::Request& q, httplib::Response& r) {
    ++file_requests;
    if (q.has_header("Range")) {
      std::lock_guard<std::mutex> lock(mutex_);
      ranges_.push_back(q.get_header_value("Range"));
    }
    const bool cut = f.path == faulty && cuts.fetch_sub(1) > 0;
    const bool corrupt = f.path == faulty && corruptions.fetch_sub(1) > 0;
    const int64_t cut_after = cut_bytes;
    auto first = std::make_shared<int64_t>(-1);
    const std::string* data = &f.data;
    r.set_content_provider(f.data.size(), "application/octet-stream",
                           [data, cut, corrupt, cut_after, first](size_t offset, size_t length, httplib::DataSink& sink) {
                             if (*first < 0) *first = int64_t(offset);
                             size_t n = std::min<size_t>(length, 64 * 1024);
                             if (cut) {
                               const int64_t left = *first + cut_after - int64_t(offset);
                               if (left <= 0) return false;  // drop the connection mid-file
                               n = std::min<size_t>(n, size_t(left));
                             }
                             std::string chunk = data->substr(offset, n);
                             const size_t middle = data->size() / 2;
                             if (corrupt && middle >= offset && middle < offset + n) chunk[middle - offset] ^= 0x5a;
                             return sink.write(chunk.data(), chunk.size());
                           });
  }

  std::string repo_;
  std::vector<File> files_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::string> ranges_;
};

}  // namespace kapitsa::testing
