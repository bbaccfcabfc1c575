"""An HTTP proxy that holds every request until a file exists, then forwards it: a tracking
server as slow as a test wants, for cli/mlflow_cli_test.cpp.

usage: held_proxy.py PORT UPSTREAM_URI GATE_FILE
"""
import http.server
import os
import sys
import time
import urllib.error
import urllib.request

port, upstream, gate = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Held(http.server.BaseHTTPRequestHandler):
    def forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))) if self.command == "POST" else None
        while not os.path.exists(gate):
            time.sleep(0.05)
        request = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = forward

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Held).serve_forever()
