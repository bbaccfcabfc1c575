#include "core/http_client.h"

#include <curl/curl.h>

#include "core/error.h"
#include "core/shared_library.h"

namespace dt {

namespace {

struct Libcurl {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_setopt) easy_setopt;
  decltype(&::curl_easy_perform) easy_perform;
  decltype(&::curl_easy_getinfo) easy_getinfo;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
};

Libcurl open_libcurl(const std::string& file) {
  const SharedLibrary library(file, "libcurl, which experiment tracking sends its requests with",
                              "install it (Debian: apt-get install libcurl4) or put its directory on LD_LIBRARY_PATH");
  const std::string mismatch = str("it is older than the libcurl ", LIBCURL_VERSION,
                                   " dtrain was built with; install that version or later");
  const auto resolve = [&](auto& function, const char* symbol) { library.resolve(function, symbol, mismatch); };
  Libcurl l{};
  resolve(l.global_init, "curl_global_init");
  resolve(l.easy_init, "curl_easy_init");
  resolve(l.easy_setopt, "curl_easy_setopt");
  resolve(l.easy_perform, "curl_easy_perform");
  resolve(l.easy_getinfo, "curl_easy_getinfo");
  resolve(l.easy_cleanup, "curl_easy_cleanup");
  resolve(l.easy_strerror, "curl_easy_strerror");
  resolve(l.slist_append, "curl_slist_append");
  resolve(l.slist_free_all, "curl_slist_free_all");
  if (const CURLcode code = l.global_init(CURL_GLOBAL_DEFAULT); code != CURLE_OK)
    throw Error(str("libcurl did not start: ", l.easy_strerror(code)));
  return l;
}

const Libcurl& libcurl() {
  static const Libcurl library = open_libcurl("libcurl.so.4");
  return library;
}

size_t append_to_string(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

}  // namespace

void load_libcurl() { libcurl(); }

void check_libcurl(const std::string& file) { open_libcurl(file); }

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)), handle_(libcurl().easy_init()) {
  if (handle_ == nullptr) throw Error("libcurl could not make a request handle (out of memory?)");
  // The headers every request sends, with the Content-Type of the JSON APIs it talks to.
  curl_slist* headers = nullptr;
  for (const std::string& h : options_.headers) headers = libcurl().slist_append(headers, h.c_str());
  headers_ = libcurl().slist_append(headers, "Content-Type: application/json");
}

HttpClient::~HttpClient() {
  libcurl().easy_cleanup(handle_);
  libcurl().slist_free_all(static_cast<curl_slist*>(headers_));
}

HttpResponse HttpClient::get(const std::string& url) { return perform(url, nullptr); }

HttpResponse HttpClient::post_json(const std::string& url, const std::string& body) { return perform(url, &body); }

HttpResponse HttpClient::perform(const std::string& url, const std::string* body) {
  const Libcurl& l = libcurl();
  CURL* curl = handle_;
  HttpResponse response;
  char error[CURL_ERROR_SIZE] = "";
  l.easy_setopt(curl, CURLOPT_URL, url.c_str());
  l.easy_setopt(curl, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers_));
  if (body) {
    l.easy_setopt(curl, CURLOPT_POST, 1L);
    l.easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    l.easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
  } else {
    l.easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  }
  l.easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_to_string);
  l.easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  l.easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  l.easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout_s * 1e3));
  l.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: this runs beside other threads
  if (!options_.username.empty()) {
    l.easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    l.easy_setopt(curl, CURLOPT_USERNAME, options_.username.c_str());
    l.easy_setopt(curl, CURLOPT_PASSWORD, options_.password.c_str());
  }
  if (!options_.ca_file.empty()) l.easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  l.easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
  l.easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
  const CURLcode code = l.easy_perform(curl);
  l.easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  if (code != CURLE_OK) {
    response.error = error[0] != '\0' ? error : l.easy_strerror(code);
    response.body.clear();
    return response;
  }
  l.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace dt
