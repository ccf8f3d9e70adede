"""`python3 -m pip check`: exit code and the parsed broken requirements.

PASS only for exit 0 with "No broken requirements found."; a missing pip is DEFERRED."""

import re
import sys

from _common import emit, run

NOT_INSTALLED = re.compile(r"^(?P<pkg>\S+) (?P<ver>\S+) requires (?P<req>.+), which is not "
                           r"installed\.$")
WRONG_VERSION = re.compile(r"^(?P<pkg>\S+) (?P<ver>\S+) has requirement (?P<req>.+), but you "
                           r"have (?P<have>\S+) (?P<have_ver>\S+)\.$")


def parse(text):
    broken = []
    for line in text.splitlines():
        line = line.strip()
        match = NOT_INSTALLED.match(line)
        if match:
            broken.append({"package": match["pkg"], "version": match["ver"],
                           "requirement": match["req"], "problem": "not-installed",
                           "line": line})
            continue
        match = WRONG_VERSION.match(line)
        if match:
            broken.append({"package": match["pkg"], "version": match["ver"],
                           "requirement": match["req"], "problem": "wrong-version",
                           "installed": f"{match['have']} {match['have_ver']}", "line": line})
    return broken


def main():
    code, out, err = run([sys.executable, "-m", "pip", "check"])
    if code != 0 and "No module named pip" in err:
        return emit("pip_check", "DEFERRED", "pip is not installed in this image", exit_code=code)
    broken = parse(out)
    lines = [line for line in out.splitlines() if line.strip()]
    data = {"exit_code": code, "broken": broken, "output": lines, "stderr": err[-2000:]}
    if code == 0 and "No broken requirements found." in out:
        return emit("pip_check", "PASS", "No broken requirements found.", **data)
    if code == 1 and broken:
        return emit("pip_check", "FAIL", f"{len(broken)} broken requirement(s): " +
                    "; ".join(b["line"] for b in broken), **data)
    return emit("pip_check", "ERROR", f"pip check exited {code} with unparsed output", **data)


if __name__ == "__main__":
    sys.exit(main())
