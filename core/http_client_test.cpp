// The HTTP client (core/http_client.h) against a real server, Python's http.server: a body comes
// back whole with its status, a port nothing listens on is an error with libcurl's reason, not a
// status, and a machine without libcurl is told which package to install.
#include "core/http_client.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing.h"

namespace dt {
namespace {

HttpOptions quick() {
  return {.headers = {}, .username = "", .password = "", .ca_file = "", .verify_tls = true, .timeout_s = 10};
}

TEST(HttpClient, GetsABodyWholeWithItsStatus) {
  const testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += str(i, i % 16 == 0 ? "\n" : " ");
  std::ofstream(dir.file("page.txt")) << text;
  const int port = testing::free_port();
  testing::BackgroundProcess server(str("/usr/bin/python3 -m http.server ", port, " --bind 127.0.0.1 --directory ",
                                        dir.path().string()));
  ASSERT_TRUE(server.wait_while_running_until([&] { return testing::port_accepts(port); }, 60)) << server.output();
  HttpClient http(quick());
  const HttpResponse page = http.get(str("http://127.0.0.1:", port, "/page.txt"));
  EXPECT_EQ(page.status, 200) << page.error;
  EXPECT_EQ(page.body, text);
  EXPECT_EQ(http.get(str("http://127.0.0.1:", port, "/missing.txt")).status, 404);
  // http.server answers no POST: a status, not an error.
  const HttpResponse post = http.post_json(str("http://127.0.0.1:", port, "/page.txt"), "{}");
  EXPECT_EQ(post.status, 501);
  EXPECT_TRUE(post.error.empty());
}

TEST(HttpClient, NoServerIsAnErrorWithTheReason) {
  HttpClient http(quick());
  const HttpResponse response = http.get(str("http://127.0.0.1:", testing::free_port(), "/"));
  EXPECT_EQ(response.status, 0);
  EXPECT_NE(response.error.find("connect"), std::string::npos) << response.error;
}

TEST(HttpClient, AMissingLibcurlNamesThePackage) {
  const std::string e = testing::error_of([] { check_libcurl("libcurl-missing.so.4"); });
  EXPECT_NE(e.find("cannot load libcurl, which experiment tracking sends its requests with: libcurl-missing.so.4"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("install it (Debian: apt-get install libcurl4) or put its directory on LD_LIBRARY_PATH"),
            std::string::npos)
      << e;
  EXPECT_EQ(testing::error_of([] { check_libcurl("libcurl.so.4"); }), "");
}

}  // namespace
}  // namespace dt
