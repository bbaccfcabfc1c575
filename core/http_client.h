// HTTP and HTTPS requests, through libcurl opened on first use (dlopen) rather than linked:
// libcurl brings TLS, proxies (http_proxy, https_proxy, no_proxy from the environment) and
// certificate stores, and with them a dozen libraries that a run without experiment tracking
// (train/mlflow_tracker.h) has no use for. The headers are the build's (libcurl4-openssl-dev),
// the library the loader finds: libcurl.so.4.
//
// A client of JSON APIs: every request says Content-Type: application/json. One client is used by
// one thread at a time; clients on different threads are independent.
#pragma once

#include <string>
#include <vector>

namespace dt {

struct HttpOptions {
  std::vector<std::string> headers;  // sent with every request: "Authorization: Bearer ..."
  std::string username, password;    // HTTP basic authentication when username is not empty
  std::string ca_file;               // a PEM file of certificates to trust instead of the system's
  bool verify_tls = true;
  double timeout_s = 30;  // a request's whole time, connecting included
};

struct HttpResponse {
  long status = 0;    // the HTTP status; 0 when no response came
  std::string body;   // the response's body, when one came
  std::string error;  // why no response came ("Could not connect to server: ..."), when none did
};

// Opens libcurl (libcurl.so.4) if not yet open; throws dt::Error naming the library and the
// package that provides it when it cannot be opened. An HttpClient calls it; a caller may call it
// earlier, to fail before work starts rather than at the first request.
void load_libcurl();
// Opens `file` as libcurl and resolves what an HttpClient calls, throwing as load_libcurl()
// would: the error a machine without libcurl sees.
void check_libcurl(const std::string& file);

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse get(const std::string& url);
  HttpResponse post_json(const std::string& url, const std::string& body);

 private:
  HttpResponse perform(const std::string& url, const std::string* body);
  const HttpOptions options_;
  void* handle_;   // CURL*: reused, so that requests share a connection
  void* headers_;  // curl_slist*
};

}  // namespace dt
