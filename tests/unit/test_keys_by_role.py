"""`imagekit keys generate --name ci`: ci.key (0600) and ci.pub in the current folder (or
--out), never over an existing pair, and the fingerprint a trust policy names the key by. What
it makes signs (`attest --key ci.key` loads it), and a policy naming that fingerprint trusts
the statement as `ci`. Without --name the pair is imagekit.key/imagekit.pub in the key
directory, as before.

The failing cases: a second run over the pair is one line, exit 2, and leaves the key as it
was; a name that could not name a signer is refused before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32


def _keys(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", "keys", "generate", *args],
                          capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_a_named_pair_in_the_current_folder_with_its_fingerprint(tmp_path: Path) -> None:
    from imagekit.attest.keys import load_private, load_public
    from imagekit.trust import fingerprint_of

    folder = tmp_path / "ci"
    folder.mkdir(mode=0o755)
    done = _keys("--name", "ci", cwd=folder)
    assert done.returncode == 0, done.stderr
    key, pub = folder / "ci.key", folder / "ci.pub"
    assert key.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["ci.key", "ci.pub"]
    printed = fingerprint_of(load_public(pub))
    assert done.stdout.splitlines() == ["private key: ci.key (0600)", "public key:  ci.pub",
                                        f"fingerprint: {printed}"]
    assert load_private(key).public_key().public_numbers() == \
        load_public(pub).public_numbers()

    again = _keys("--name", "ci", cwd=folder)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.splitlines() == [
        "imagekit: error: a key file exists already (use --overwrite to replace it) (ci.key)"]
    assert fingerprint_of(load_public(pub)) == printed          # the pair is untouched


def test_the_printed_fingerprint_is_the_one_a_trust_policy_names(tmp_path: Path) -> None:
    from imagekit.attest.dsse import bundle_of, sign_envelope
    from imagekit.attest.keys import load_private
    from imagekit.attest.verify import verify_trusted
    from imagekit.trust import load_trust

    tmp_path.chmod(0o755)
    done = _keys("--name", "ci", "--out-dir", "keys", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    fingerprint = done.stdout.splitlines()[-1].removeprefix("fingerprint: ")
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"keys:\n  - name: builder\n    fingerprint: {fingerprint}\n"
                      "    types: [test-result]\n")
    trust = load_trust([tmp_path / "keys" / "ci.pub"], policy, env={})
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": "r", "digest": {"sha256": DIGEST[7:]}}],
                 "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
                 "predicate": {"result": "PASSED"}}
    key = load_private(tmp_path / "keys" / "ci.key")
    _, signer = verify_trusted(bundle_of(sign_envelope(statement, key), key), trust)
    assert signer.name == "builder" and signer.fingerprint == fingerprint  # the policy's scope
    # without the policy the key file's stem names the signer
    _, signer = verify_trusted(bundle_of(sign_envelope(statement, key), key),
                               load_trust([tmp_path / "keys" / "ci.pub"], env={}))
    assert signer.name == "ci"


def test_without_a_name_the_pair_goes_to_the_key_directory_as_before(tmp_path: Path) -> None:
    key_dir = tmp_path / "key-dir"
    here = tmp_path / "here"
    here.mkdir()
    done = _keys(cwd=here, IMAGEKIT_KEY_DIR=str(key_dir))
    assert done.returncode == 0, done.stderr
    assert (key_dir / "imagekit.key").stat().st_mode & 0o777 == 0o600
    assert (key_dir / "imagekit.pub").is_file() and list(here.iterdir()) == []
    assert done.stdout.splitlines()[0] == f"private key: {key_dir / 'imagekit.key'} (0600)"


def test_a_name_that_cannot_name_a_signer_is_refused(tmp_path: Path) -> None:
    for bad in ("../ci", "", "-x", "a b"):
        done = _keys("--name", bad, cwd=tmp_path)
        assert done.returncode == 2, (bad, done.stderr)
        assert done.stderr.startswith("imagekit: error: --name is letters, digits"), done.stderr
    assert list(tmp_path.iterdir()) == []
