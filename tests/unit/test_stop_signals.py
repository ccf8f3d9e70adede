"""SIGINT and SIGTERM reach one handler: every command runs under `guarded`
(imagekit.cli.app), which installs the same function for both, so the real-Pod interrupt
tests (tests/cluster/test_interrupt_real.py, test_accept_real.py) send one signal per command.
Here both signals are sent to a real process running a guarded command: the same exit code and
the same line, naming the signal; a third signal, not a stop signal, is not handled there."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

COMMAND = textwrap.dedent("""\
    import time, typer
    from imagekit.cli.app import guarded
    app = typer.Typer()

    @app.command()
    @guarded
    def wait() -> None:
        print("ready", flush=True)
        time.sleep(60)

    app()
    """)


def _stopped_by(signum: int, tmp_path: Path) -> tuple[int, str]:
    script = tmp_path / "wait.py"
    script.write_text(COMMAND)
    process = subprocess.Popen([sys.executable, str(script)], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signum)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return process.returncode, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_both_stop_signals_end_a_command_the_same_way(signum: int, tmp_path: Path) -> None:
    code, err = _stopped_by(signum, tmp_path)
    assert code == 130, err
    assert err.strip().splitlines() == [
        f"imagekit: error: interrupted by {signal.Signals(signum).name} (imagekit)"]


def test_a_signal_that_is_not_a_stop_signal_is_not_that_handler(tmp_path: Path) -> None:
    code, err = _stopped_by(signal.SIGUSR1, tmp_path)
    assert code == -signal.SIGUSR1, err          # the default action: killed, no line
    assert "interrupted" not in err
