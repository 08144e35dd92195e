"""pdtui's data folders are found from a checkout as from an installed wheel."""

from pathlib import Path

from pdtui.support import data


def test_a_checkout_finds_them_at_the_top_of_the_repository():
    top = Path(data.__file__).resolve().parents[2]
    assert data.data_dir("themes") == top / "themes" and (top / "themes" / "dark.yaml").is_file()
    assert (data.data_dir("sample_configs") / "reference.yaml").is_file()


def test_an_installed_wheel_finds_them_beside_the_package(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "pdtui"
    (package / "themes").mkdir(parents=True)
    monkeypatch.setattr(data, "_PACKAGE", package)
    assert data.data_dir("themes") == package / "themes"
