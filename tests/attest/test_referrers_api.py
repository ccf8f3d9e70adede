"""The referrers API paths no registry here has (distribution 2.8 and crane's registry have no
API): a registry of ours, only for what a real program cannot be made to do — two pages
joined by `Link`, and a 500 that must be an error, never "no referrers"."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from imagekit.errors import TransportError
from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient, RegistryOptions
from imagekit.registry.referrers import list_referrers
from tests.registry.settings import FAST_RETRY

D = Digest.parse("sha256:" + "ab" * 32)
PORT = 5141


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, status: int, body: dict, link: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        self.send_header("Content-Length", str(len(data)))
        if link:
            self.send_header("Link", f'<{link}>; rel="next"')
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        entry = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 1,
                 "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json"}
        if self.path == "/v2/":
            self._json(200, {})
        elif self.path == f"/v2/paged/referrers/{D}":
            self._json(200, {"manifests": [dict(entry, digest="sha256:" + "01" * 32)]},
                       link=f"/v2/paged/referrers/{D}?last=1")
        elif self.path == f"/v2/paged/referrers/{D}?last=1":
            self._json(200, {"manifests": [dict(entry, digest="sha256:" + "02" * 32,
                                                artifactType="other")]})
        elif self.path.startswith("/v2/broken/referrers/"):
            self._json(500, {"errors": [{"code": "UNKNOWN"}]})
        else:
            self._json(404, {"errors": [{"code": "NAME_UNKNOWN"}]})


@pytest.fixture(scope="module")
def registry():
    server = ThreadingHTTPServer(("127.0.0.1", PORT), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        options = RegistryOptions(retry=FAST_RETRY.model_copy(update={"attempts": 2}))
        with RegistryClient(f"127.0.0.1:{PORT}", options) as client:
            yield client
    finally:
        server.shutdown()
        server.server_close()


def test_link_pagination_is_followed_and_artifact_type_filters(registry):
    entries = list_referrers(registry, "paged", D)
    assert [e["digest"][-4:] for e in entries] == ["0101", "0202"]
    only = list_referrers(registry, "paged", D,
                          artifact_type="application/vnd.dev.sigstore.bundle.v0.3+json")
    assert len(only) == 1


def test_a_500_is_an_error_not_no_referrers(registry):
    with pytest.raises(TransportError, match="500"):
        list_referrers(registry, "broken", D)


def test_404_falls_back_to_the_tag_schema_which_may_be_absent(registry):
    assert list_referrers(registry, "nothing", D) == []
