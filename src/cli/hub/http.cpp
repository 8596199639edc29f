// libcurl calls behind Http (http.h): options shared by both requests, and the download's write
// callback, which sees the status before the first byte so an error body never lands in the file.
#include "cli/hub/http.h"

#include <curl/curl.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

namespace kapitsa::cli::hub {
namespace {

constexpr long kConnectTimeoutS = 30;
constexpr long kStallSeconds = 60;  // a transfer slower than 1 byte/s for this long is cut (then retried)
constexpr size_t kMaxErrorBody = 4096;

struct DownloadState {
  CURL* curl = nullptr;
  int fd = -1;
  int64_t offset = 0;
  bool started = false, error_status = false, range_honoured = false;
  int write_errno = 0;
  std::string error_body;
  const std::function<void(int64_t)>* on_bytes = nullptr;
  const std::atomic<bool>* cancel = nullptr;
};

size_t append_to_string(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<std::string*>(user);
  s->append(data, size * n);
  return size * n;
}

size_t write_to_file(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<DownloadState*>(user);
  const size_t bytes = size * n;
  if (!st->started) {  // first bytes of the final response: decide where they go
    st->started = true;
    long status = 0;
    curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 400) st->error_status = true;
    else if (status == 206) st->range_honoured = true;
    else if (st->offset > 0) {  // 200 to a range request: the whole file comes, start over
      if (::ftruncate(st->fd, 0) != 0 || ::lseek(st->fd, 0, SEEK_SET) != 0) {
        st->write_errno = errno;
        return 0;
      }
      (*st->on_bytes)(-st->offset);
    }
  }
  if (st->error_status) {
    if (st->error_body.size() < kMaxErrorBody) st->error_body.append(data, std::min(bytes, kMaxErrorBody));
    return bytes;
  }
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::write(st->fd, data + done, bytes - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      st->write_errno = errno;
      return 0;  // libcurl stops with CURLE_WRITE_ERROR
    }
    done += size_t(w);
  }
  (*st->on_bytes)(int64_t(bytes));
  return bytes;
}

int check_cancel(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* st = static_cast<DownloadState*>(user);
  return st->cancel != nullptr && st->cancel->load() ? 1 : 0;
}

void common_options(CURL* c, const std::string& url, curl_slist* headers) {
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "kapitsa/0.1");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutS);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
}

curl_slist* to_slist(const std::vector<std::string>& headers) {
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  return list;
}

}  // namespace

Http::Http() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
}

Http::~Http() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResult Http::get(const std::string& url, const std::vector<std::string>& headers) {
  CURL* c = static_cast<CURL*>(curl_);
  HttpResult r;
  curl_slist* list = to_slist(headers);
  common_options(c, url, list);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  const CURLcode code = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  if (code != CURLE_OK) r.transport = curl_easy_strerror(code);
  curl_slist_free_all(list);
  return r;
}

HttpResult Http::download(const std::string& url, const std::vector<std::string>& headers, int fd, int64_t offset,
                          const std::function<void(int64_t)>& on_bytes, const std::atomic<bool>* cancel) {
  CURL* c = static_cast<CURL*>(curl_);
  HttpResult r;
  DownloadState st;
  st.curl = c, st.fd = fd, st.offset = offset, st.on_bytes = &on_bytes, st.cancel = cancel;
  curl_slist* list = to_slist(headers);
  common_options(c, url, list);
  if (offset > 0) curl_easy_setopt(c, CURLOPT_RANGE, (std::to_string(offset) + "-").c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_to_file);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, check_cancel);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &st);
  const CURLcode code = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  if (code != CURLE_OK && st.write_errno == 0) r.transport = curl_easy_strerror(code);
  r.write_errno = st.write_errno;
  r.body = std::move(st.error_body);
  r.range_honoured = st.range_honoured || (r.status == 206);
  curl_slist_free_all(list);
  return r;
}

std::string url_path(const std::string& path) {
  CURL* c = curl_easy_init();
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    char* e = curl_easy_escape(c, path.data() + start, int(slash - start));
    if (!out.empty() || start > 0) out += '/';
    out += e;
    curl_free(e);
    start = slash + 1;
  }
  curl_easy_cleanup(c);
  return out;
}

}  // namespace kapitsa::cli::hub
