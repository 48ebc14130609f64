"""Repository root conftest: makes the checkout importable without installation.

The sbconform pytest plugin itself is registered through the package's ``pytest11``
entry point once installed (``pip install -e .``).
"""
