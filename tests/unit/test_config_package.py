"""pdtui.config's names are imported when first used: a TAB completion finds and vets a config without pydantic."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pdtui.config


@pytest.mark.parametrize("name", pdtui.config.__all__)
def test_every_name_the_package_offers_is_there(name):
    assert getattr(pdtui.config, name) is not None
    assert name in dir(pdtui.config)


def test_a_name_it_does_not_offer_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'load_configs'"):
        pdtui.config.load_configs  # noqa: B018


def test_finding_and_vetting_a_config_imports_no_pydantic():
    code = "import sys, pdtui.config.discovery, pdtui.config.trust; print(sorted(m for m in sys.modules if 'pydantic' in m))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_a_name_from_the_package_is_the_one_of_its_module():
    from pdtui.config import loader, schema
    assert pdtui.config.Deployment is schema.Deployment and pdtui.config.load_config is loader.load_config
