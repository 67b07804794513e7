"""The dashboard's files on the web port, through the wire: index.html at /, content types,
gzip, ETags, the page's own routes, no listing, nothing outside the directory, and a plain
page when the dashboard is not built."""

from __future__ import annotations

import gzip
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from corral_server.app import Config
from tests.support.daemon import DaemonThread

INDEX = "<!doctype html><title>corral</title><p>dashboard</p>" + "x" * 2000


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("site")
    (home / "secret.txt").write_text("outside the static directory")
    root = home / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "assets" / "app.js").write_text("console.log('corral');\n" * 100)
    (root / "assets" / "icon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (root / "manifest.webmanifest").write_text('{"name": "corral"}')
    (root / "assets" / "blob.bin").write_bytes(bytes(range(256)))
    (root / ".env").write_text("hidden")
    (root / "link.txt").symlink_to(home / "secret.txt")
    return root


@pytest.fixture(scope="module")
def static_daemon(site: Path) -> Iterator[DaemonThread]:
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0", web_static_dir=site)).start()
    yield daemon
    daemon.stop()


@pytest.fixture
def http(static_daemon: DaemonThread) -> Iterator[httpx.Client]:
    assert static_daemon.daemon is not None
    base = f"http://127.0.0.1:{static_daemon.daemon.web_port}"
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


def raw_status(port: int, target: str) -> int:
    """The status of a GET of `target` sent as it is (no client normalises its dots)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        head = sock.recv(4096).split(b"\r\n", 1)[0]
    return int(head.split()[1])


def test_the_root_is_index_html_gzipped_for_a_client_that_accepts_it(http: httpx.Client) -> None:
    answer = http.get("/", headers={"accept-encoding": "gzip"})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["content-encoding"] == "gzip"
    assert int(answer.headers["content-length"]) < len(INDEX) // 2
    assert answer.text == INDEX
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_a_client_without_gzip_gets_the_plain_file(http: httpx.Client) -> None:
    answer = http.get("/", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in answer.headers
    assert answer.content == INDEX.encode()


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/assets/app.js", "text/javascript; charset=utf-8"),
        ("/assets/icon.svg", "image/svg+xml"),
        ("/manifest.webmanifest", "application/manifest+json"),
        ("/assets/blob.bin", "application/octet-stream"),
    ],
)
def test_files_have_their_content_types(http: httpx.Client, path: str, kind: str) -> None:
    answer = http.get(path)
    assert answer.status_code == 200 and answer.headers["content-type"] == kind


def test_binary_files_are_not_gzipped(http: httpx.Client) -> None:
    answer = http.get("/assets/blob.bin", headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in answer.headers and answer.content == bytes(range(256))


def test_an_unchanged_file_answers_304_to_its_etag(http: httpx.Client) -> None:
    etag = http.get("/assets/app.js").headers["etag"]
    assert http.get("/assets/app.js", headers={"if-none-match": etag}).status_code == 304


def test_head_answers_the_headers_only(http: httpx.Client) -> None:
    answer = http.head("/assets/app.js", headers={"accept-encoding": "identity"})
    assert answer.status_code == 200 and answer.content == b""
    assert answer.headers["content-length"] == str(len("console.log('corral');\n" * 100))


def test_the_page_s_own_routes_and_directories_are_index_html_never_a_listing(
    http: httpx.Client,
) -> None:
    for path in ("/agents/abc", "/assets", "/assets/"):
        answer = http.get(path, headers={"accept-encoding": "identity"})
        assert answer.status_code == 200 and answer.text == INDEX


@pytest.mark.parametrize(
    "target",
    [
        "/../secret.txt",
        "/assets/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2e%2e%2fsecret.txt",
        "/assets/..%2f..%2fsecret.txt",
        "/link.txt",  # a symlink out of the directory
        "/.env",
        "/missing.js",
        "/assets/app.js%00.html",
        "/..\\secret.txt",
    ],
)
def test_nothing_outside_the_directory_or_hidden_is_served(
    static_daemon: DaemonThread, target: str
) -> None:
    assert static_daemon.daemon is not None
    assert raw_status(static_daemon.daemon.web_port, target) in (400, 404)


def test_a_daemon_without_a_built_dashboard_says_so(tmp_path: Path) -> None:
    daemon = DaemonThread(Config(web_listen="127.0.0.1:0", web_static_dir=tmp_path)).start()
    try:
        assert daemon.daemon is not None
        answer = httpx.get(f"http://127.0.0.1:{daemon.daemon.web_port}/", timeout=30)
        assert answer.status_code == 200 and "not built" in answer.text
    finally:
        daemon.stop()


def test_gzip_beside_a_file_is_sent_as_it_is(site: Path, http: httpx.Client) -> None:
    (site / "assets" / "pre.css").write_text("body { color: red }\n")
    (site / "assets" / "pre.css.gz").write_bytes(gzip.compress(b"body { color: blue }\n"))
    answer = http.get("/assets/pre.css", headers={"accept-encoding": "gzip, br"})
    assert answer.headers["content-encoding"] == "gzip"
    assert answer.text == "body { color: blue }\n"  # the precompressed copy, as built
