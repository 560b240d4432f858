"""A real S3-protocol server for the tests: moto's server on a free 127.0.0.1 port.

The server runs as a child process with a bounded lifetime (``timeout`` kills it after an hour
even if the test run dies; the fixture stops it at the end). Credentials are dummy values; the
endpoint, region and path-style addressing go into fstate's file-system options.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

LIFETIME_S = 3600
DUMMY_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
             "AWS_EC2_METADATA_DISABLED": "true"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    port: int
    proc: subprocess.Popen
    log: Path
    options: dict = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def filesystem(self, **kw):
        """A pyarrow S3 file system for test set-up (it may create buckets; fstate's never does)."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http", region="us-east-1",
                                 access_key="testing", secret_key="testing", allow_bucket_creation=True,
                                 allow_bucket_deletion=True, **kw)

    def make_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)

    def upload(self, local_dir: str | Path, uri: str) -> str:
        """Copy a local directory to ``s3://bucket/prefix``."""
        import pyarrow.fs as pafs

        fs = self.filesystem()
        dest = uri.split("://", 1)[1].rstrip("/")
        fs.create_dir(dest.split("/", 1)[0])
        pafs.copy_files(str(local_dir), dest, destination_filesystem=fs)
        return uri

    def download(self, uri: str, local_dir: str | Path) -> Path:
        import pyarrow.fs as pafs

        os.makedirs(local_dir, exist_ok=True)
        pafs.copy_files(uri.split("://", 1)[1].rstrip("/"), str(local_dir), source_filesystem=self.filesystem())
        return Path(local_dir)

    def keys(self, uri: str) -> list[str]:
        """Object keys under ``s3://bucket/prefix`` (relative to the prefix)."""
        import pyarrow.fs as pafs

        root = uri.split("://", 1)[1].rstrip("/")
        infos = self.filesystem().get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        return sorted(i.path[len(root) + 1:] for i in infos if i.type == pafs.FileType.File)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_server(tmp_dir: str | Path, *, extra_env: dict | None = None, ready_timeout: float = 60.0) -> S3Server:
    """Start moto's server on a free loopback port and wait until it answers."""
    port = free_port()
    log = Path(tmp_dir) / f"moto-{port}.log"
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    if shutil.which("timeout"):
        cmd = ["timeout", "-s", "KILL", str(LIFETIME_S)] + cmd
    env = {**os.environ, **DUMMY_ENV, **(extra_env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = S3Server(port, proc, log)
    deadline = time.time() + ready_timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
            direct.open(f"{server.endpoint}/", timeout=2).read()
            break
        except urllib.error.HTTPError:
            break  # it answers (an error status is an answer)
        except (urllib.error.URLError, OSError):
            if time.time() > deadline:
                server.stop()
                raise RuntimeError(f"moto server did not start within {ready_timeout}s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    # The dummy keys are options too, not only environment: a Spark JVM started before this server
    # (its Python workers keep the environment they were born with) must still sign its requests.
    server.options = {"endpoint": server.endpoint, "region": "us-east-1", "path_style": "true",
                      "access_key": DUMMY_ENV["AWS_ACCESS_KEY_ID"], "secret_key": DUMMY_ENV["AWS_SECRET_ACCESS_KEY"]}
    return server
