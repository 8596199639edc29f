// libcurl for the Hub client: a GET of a small body (the revision listing) and a download that continues
// a file from its current length with an HTTP Range request, following redirects (the Hub sends large
// files to a CDN). One Http per thread: a curl handle is not shared between threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kapitsa::cli::hub {

struct HttpResult {
  long status = 0;          // the final response's status (after redirects); 0 when none came
  std::string body;         // GET: the body; download: the body of an error status (for the message)
  std::string transport;    // libcurl's error when the transfer failed (connection cut, timeout, ...)
  int write_errno = 0;      // download: errno of a failed write to the file (ENOSPC, EFBIG, ...)
  bool range_honoured = false;  // download: 206 — the bytes were appended after `offset`
  bool ok() const { return transport.empty() && write_errno == 0 && status >= 200 && status < 300; }
};

class Http {
 public:
  Http();
  ~Http();
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  // headers: "Name: value" lines (Authorization goes only to the first host: libcurl drops it on a
  // redirect to another host, as huggingface_hub does).
  HttpResult get(const std::string& url, const std::vector<std::string>& headers);

  // Writes the body to `fd` from `offset` (Range: bytes=offset- when offset > 0). When the server answers
  // 200 to a range request the file is truncated and written from 0. on_bytes(n) after every chunk
  // written; `cancel` stops the transfer when set (another file failed).
  HttpResult download(const std::string& url, const std::vector<std::string>& headers, int fd, int64_t offset,
                      const std::function<void(int64_t)>& on_bytes, const std::atomic<bool>* cancel);

 private:
  void* curl_;
};

// A path's segments percent-encoded for a URL ("a b/c.json" -> "a%20b/c.json").
std::string url_path(const std::string& path);

}  // namespace kapitsa::cli::hub
