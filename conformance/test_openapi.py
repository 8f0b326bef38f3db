"""openapi.yaml is a valid OpenAPI 3.1 document, and the service serves exactly that file."""
import os
import urllib.request

import yaml
from openapi_spec_validator import validate

from conftest import BASE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_document_is_valid_openapi_3_1():
    with open(os.path.join(ROOT, "openapi.yaml")) as f:
        document = yaml.safe_load(f)
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_served_document_is_the_file():
    served = urllib.request.urlopen(BASE + "/openapi.yaml").read()
    with open(os.path.join(ROOT, "openapi.yaml"), "rb") as f:
        assert served == f.read()
