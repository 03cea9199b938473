from pathlib import Path

from spio.settings import settings


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("SPIO_CACHE_DIR", str(tmp_path))
    assert settings().cache_dir == Path(tmp_path)


def test_workers_override(monkeypatch):
    monkeypatch.setenv("SPIO_WORKERS", "3")
    assert settings().workers == 3


def test_env_docs_are_generated_from_the_registry():
    from pathlib import Path

    from spio.settings import markdown

    doc = Path(__file__).resolve().parents[2] / "docs" / "env.md"
    assert doc.read_text() == markdown(), (
        "docs/env.md is stale: run `python -m spio.settings > docs/env.md`"
    )


def test_no_environment_reads_outside_settings():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "spio"
    allowed = {root / "settings.py", root / "compiler" / "locate.py"}  # locate reads CUDA_HOME/PATH
    sources = [*root.rglob("*.py"), *root.rglob("*.pyx")]
    offenders = [
        str(p.relative_to(root))
        for p in sources
        if p not in allowed and re.search(r"\benviron\b|\bgetenv\b", p.read_text())
    ]
    assert not offenders, (
        f"read SPIO_* knobs through spio.settings.settings(), not os.environ: {offenders}"
    )
