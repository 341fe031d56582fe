"""On a test subprocess's path (tests.helpers.python_env): the tests' export cache
(tests/export_cache.py) in that process too, where the test runs with it."""

import os

if os.environ.get("THUNDER_AOT_TESTS_EXPORT_CACHE"):
    from tests.export_cache import install_on_import

    install_on_import()
