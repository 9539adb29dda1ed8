"""A fresh `sextant dev` for the Python scripts, as scripts/dev_server.sh is for the shell
ones: free ports, readiness, credentials, sign-in and the server's CPU time.

  dev = DevServer(binary, data_dir, log_path, extra_args)   # unlimited=False: default request limits
  status, body = dev.request("GET", "/api/v1/usage", headers=dev.bearer())

Standard library only: the image's build stage runs scripts/pgo_train.py with it.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import time

# No request limits: the scripts measure the server, not its admission.
UNLIMITED = ["--api-rps", "1000000", "--ingest-rps", "1000000", "--analytics-rps", "1000000",
             "--auth-rps", "100000"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevServer:
    def __init__(self, binary, data_dir, log_path, extra=(), unlimited=True, seconds=120):
        self.dir, self.log_path = data_dir, log_path
        self.port, self.internal_port, grpc = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.internal_url = f"http://127.0.0.1:{self.internal_port}"
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen(
                [binary, "dev", "--data-dir", data_dir, "--listen", f"127.0.0.1:{self.port}",
                 "--internal-listen", f"127.0.0.1:{self.internal_port}",
                 "--otlp-grpc-listen", f"127.0.0.1:{grpc}", *(UNLIMITED if unlimited else []), *extra],
                stdout=log, stderr=subprocess.STDOUT)
        self.creds_path = os.path.join(data_dir, "credentials.json")
        deadline = time.monotonic() + seconds
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                with open(log_path, errors="replace") as log:
                    tail = log.read()[-3000:]
                raise RuntimeError(f"sextant dev did not become ready ({log_path}):\n{tail}")
            time.sleep(0.1)
        with open(self.creds_path) as f:
            self.creds = json.load(f)
        self._token, self._token_at = None, 0.0

    def _ready(self):
        # The credentials are written after the server listens; a refused connection is "not yet".
        try:
            return os.path.getsize(self.creds_path) > 0 and self.request("GET", "/readyz", timeout=5)[0] == 200
        except OSError:
            return False

    def request(self, method, path, body=None, headers=None, conn=None, timeout=300):
        """(status, body bytes). `body` may be bytes, text, or a value sent as JSON; `conn`, a
        kept-alive `http.client.HTTPConnection` to reuse."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        own = conn is None
        conn = conn or self.connection(timeout)
        try:
            conn.request(method, path, body, headers or {})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            if own:
                conn.close()

    def connection(self, timeout=300):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def bearer(self):
        """The owner's `Authorization` header; access tokens last 15 minutes, so one is renewed
        every 5."""
        if self._token is None or time.monotonic() - self._token_at > 300:
            status, data = self.request("POST", "/auth/login",
                                        {"email": self.creds["email"], "password": self.creds["password"]},
                                        {"Content-Type": "application/json"})
            if status != 200:
                raise RuntimeError(f"login answered {status}: {data[:200]!r}")
            self._token, self._token_at = json.loads(data)["access_token"], time.monotonic()
        return {"Authorization": f"Bearer {self._token}"}

    def cpu_seconds(self):
        """The server's user and system CPU time so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def settle(self, window=5.0, busy=0.05, bound=900):
        """Waits until flushes and compactions are done: under `busy` of a core for `window`
        seconds. False if the server was still busy after `bound` seconds."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            before = self.cpu_seconds()
            time.sleep(window)
            if (self.cpu_seconds() - before) / window < busy:
                return True
        return False

    def stop(self, sig=signal.SIGKILL, seconds=120):
        """Sends `sig` and waits; true if the server exited within `seconds`."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False
