from pathlib import Path

from spio.settings import settings


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("SPIO_CACHE_DIR", str(tmp_path))
    assert settings().cache_dir == Path(tmp_path)


def test_workers_override(monkeypatch):
    monkeypatch.setenv("SPIO_WORKERS", "3")
    assert settings().workers == 3
