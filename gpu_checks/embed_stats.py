"""Copy imagekit/stats.py verbatim into gpu_checks/preflight.py between its markers (run after
editing stats.py: `python gpu_checks/embed_stats.py .`; tests/unit/test_stats.py checks it)."""
import re, sys
from pathlib import Path
root = Path(sys.argv[1])
src = (root / "imagekit/stats.py").read_text()
assert "'''" not in src
pf = root / "gpu_checks/preflight.py"
text = pf.read_text()
block = ("# ---- begin imagekit/stats.py (verbatim; tests/unit/test_stats.py keeps it equal) ----\n"
         "_STATS_SOURCE = r'''" + src + "'''\n"
         "# ---- end imagekit/stats.py ----\n")
pat = re.compile(r"# ---- begin imagekit/stats.py.*?# ---- end imagekit/stats.py ----\n", re.S)
if pat.search(text):
    text = pat.sub(lambda m: block, text)
else:
    anchor = 'SCHEMA = "imagekit.gpu-preflight/v1"\n'
    loader = ('\n\ndef _load_stats() -> Any:\n'
              '    """The embedded statistics module (imagekit/stats.py), as a module of its own."""\n'
              '    import types\n'
              '    mod = types.ModuleType("preflight_stats")\n'
              '    sys.modules["preflight_stats"] = mod  # dataclasses look their module up\n'
              '    exec(compile(_STATS_SOURCE, "imagekit/stats.py", "exec"), mod.__dict__)\n'
              '    return mod\n\n\nstats = _load_stats()\n\n')
    text = text.replace(anchor, block + loader + anchor, 1)
pf.write_text(text)
